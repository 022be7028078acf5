"""Kubernetes Jobs chosen by what the lock needs (pure): one Job per GPU class, scheduled onto
the nodes whose GPU Feature Discovery labels meet the lock (driver at or above the floor it
relies on, a compute capability its build runs on, the CPU architecture; the product per
class), or, as a choice, through a DRA ResourceClaimTemplate whose CEL selector says the same of
the NVIDIA DRA driver's device attributes.

Labels: GFD's (NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md, "Generated
Labels": nvidia.com/cuda.driver-version.{major,minor,revision}, nvidia.com/gpu.compute.{major,
minor}, nvidia.com/gpu.product = the NVML name with spaces as '-'). DRA: resource.k8s.io/v1
(Kubernetes 1.34), device class gpu.nvidia.com, attributes productName, driverVersion and
cudaComputeCapability (versions, compared with CEL's semver()). Each pod writes the payload's
verdict (<= 4 KiB) to its termination message; `fleet_run.k8s_results` reads it back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from envbuild.core.errors import UserError
from envbuild.core.models import Lock
from envbuild.cuda.archs import ArchRules, arch_coverage
from envbuild.preflight.fleet_run import CLASS_LABEL, REQUIRES_ANNOTATION, RUN_LABEL
from envbuild.preflight.reports import PULL_MARGIN_S
from envbuild.smoke.container import SmokeContainer
from envbuild.smoke.plan import SMOKE_GRACE_S

API_VERSION = "1.34"
"""The Kubernetes API the manifests are written for (and validated against in the tests)."""
GPU_RESOURCE = "nvidia.com/gpu"
DRA_CLASS = "gpu.nvidia.com"
LOCK_LABEL = "envbuild.lock.sha256"
TERMINATION_LOG = "/dev/termination-log"
DRIVER = "nvidia.com/cuda.driver-version"
COMPUTE = "nvidia.com/gpu.compute"
PRODUCT = "nvidia.com/gpu.product"
ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "amd64": "amd64"}
Select = Literal["labels", "dra"]


@dataclass(frozen=True)
class GpuClass:
    """One kind of GPU node the fleet has (or the lock targets)."""

    name: str
    cc: str
    product: str = ""
    """The NVML name ("NVIDIA H100 80GB HBM3"); "" selects by compute capability only."""
    nodes: int = 1
    """How many nodes of the class to test: the Job's completions, one pod per node."""
    gpus: int = 1


@dataclass(frozen=True)
class ClassPlan:
    """What one class needs of its nodes: the driver floor (the toolkit's own where only PTX
    reaches it), or why the lock cannot run there at all."""

    gpu_class: GpuClass
    floor: str
    excluded: str = ""


def plan_class(lock: Lock, cls: GpuClass, rules: ArchRules | None = None) -> ClassPlan:
    how, _arch = arch_coverage(lock.stack.archs, cls.cc, rules)
    if lock.stack.floors is None:
        return ClassPlan(cls, "", "a CPU lock: nothing to schedule on GPUs")
    if how == "none":
        return ClassPlan(cls, "", f"the build has no code for compute capability {cls.cc}")
    floors = lock.stack.floors
    return ClassPlan(cls, floors.toolkit if how == "ptx" else floors.effective)


def label_value(text: str) -> str:
    """A label value (at most 63 alphanumerics, '-', '_', '.', alphanumeric at both ends)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    if len(slug) > 63:
        slug = slug[:54].rstrip("-_.") + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return slug or "none"


def product_label(name: str) -> str:
    """GFD's nvidia.com/gpu.product value of an NVML name: spaces as '-'."""
    return name.strip().replace(" ", "-")


def _ints(version: str) -> tuple[int, int, int]:
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def driver_terms(floor: str) -> list[list[dict[str, Any]]]:
    """Driver >= floor as node-selector terms (ORed; the expressions of one term are ANDed):
    a newer major; the same major and a newer minor; the same major.minor and a revision at
    least the floor's. Gt compares label values as integers ("02" is 2)."""
    major, minor, rev = _ints(floor)

    def expr(key: str, op: str, value: int) -> dict[str, Any]:
        return {"key": f"{DRIVER}.{key}", "operator": op, "values": [str(value)]}

    terms = [
        [expr("major", "Gt", major)],
        [expr("major", "In", major), expr("minor", "Gt", minor)],
    ]
    last = [expr("major", "In", major), expr("minor", "In", minor)]
    if rev > 0:
        last.append(expr("revision", "Gt", rev - 1))
    return [*terms, last]


def node_terms(lock: Lock, plan: ClassPlan, select: Select) -> list[dict[str, Any]]:
    """The nodeSelectorTerms of one class: every driver term ANDed with the CPU architecture
    and, with labels, the class's compute capability and product."""
    common: list[dict[str, Any]] = [
        {
            "key": "kubernetes.io/arch",
            "operator": "In",
            "values": [ARCHES.get(lock.platform, lock.platform)],
        }
    ]
    if select == "dra":
        return [{"matchExpressions": common}]
    major, minor = plan.gpu_class.cc.split(".")
    common += [
        {"key": f"{COMPUTE}.major", "operator": "In", "values": [major]},
        {"key": f"{COMPUTE}.minor", "operator": "In", "values": [minor]},
    ]
    if plan.gpu_class.product:
        common.append(
            {"key": PRODUCT, "operator": "In", "values": [product_label(plan.gpu_class.product)]}
        )
    return [{"matchExpressions": common + term} for term in driver_terms(plan.floor)]


def semver(version: str) -> str:
    """A driver or compute capability as CEL's semver() takes it: three numbers, no leading
    zeros (550.54.05 -> 550.54.5, 9.0 -> 9.0.0)."""
    return ".".join(str(n) for n in _ints(version))


def cel_selector(plan: ClassPlan) -> str:
    """The CEL expression a device of the class must meet (NVIDIA DRA driver attributes)."""
    attrs = f"device.attributes['{DRA_CLASS}']"
    parts = [
        f"{attrs}.driverVersion.compareTo(semver('{semver(plan.floor)}')) >= 0",
        f"{attrs}.cudaComputeCapability.compareTo(semver('{semver(plan.gpu_class.cc)}')) == 0",
    ]
    if plan.gpu_class.product:
        parts.insert(0, f"{attrs}.productName == '{plan.gpu_class.product}'")
    return " && ".join(parts)


def requires_text(lock: Lock, plan: ClassPlan, select: Select) -> str:
    """What a node must have, in words (the Job's envbuild.requires annotation)."""
    cls = plan.gpu_class
    words = [
        f"kubernetes.io/arch={ARCHES.get(lock.platform, lock.platform)}",
        f"{cls.gpus} x {GPU_RESOURCE}" if select == "labels" else f"{cls.gpus} x {DRA_CLASS}",
        f"driver >= {plan.floor}",
        f"compute capability {cls.cc}",
    ]
    if cls.product:
        words.append(f"product {product_label(cls.product)}")
    return "; ".join(words)


@dataclass(frozen=True)
class JobSpec:
    """What every Job of one run shares."""

    smoke: SmokeContainer
    run: str
    lock_sha256: str
    lock_name: str
    select: Select = "labels"


def job_name(spec: JobSpec, cls: GpuClass) -> str:
    base = f"envbuild-smoke-{label_value(spec.run).lower()}-{label_value(cls.name).lower()}"
    base = re.sub(r"[^a-z0-9-]+", "-", base)
    if len(base) > 63:
        digest = hashlib.sha256(base.encode()).hexdigest()[:8]
        base = base[:54].rstrip("-") + "-" + digest
    return base.rstrip("-")


def _labels(spec: JobSpec, cls: GpuClass) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "envbuild-smoke",
        RUN_LABEL: label_value(spec.run),
        CLASS_LABEL: label_value(cls.name),
        # A label value holds 63 characters: the sha256's first 63 hex digits; the whole one is
        # the annotation of the same name.
        LOCK_LABEL: spec.lock_sha256[:63],
    }


def _container(spec: JobSpec, cls: GpuClass, claim: str) -> dict[str, Any]:
    smoke = spec.smoke
    env = [{"name": "ENVBUILD_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    env += [{"name": k, "value": v} for k, v in smoke.environment.items()]
    resources: dict[str, Any] = (
        {"claims": [{"name": claim}]} if claim else {"limits": {GPU_RESOURCE: str(cls.gpus)}}
    )
    return {
        "name": "smoke",
        "image": smoke.image,
        "command": [*smoke.command, "--verdict", TERMINATION_LOG],
        "env": env,
        "resources": resources,
        # The verdict is the message; a payload that died before writing it leaves the log
        # tail instead (kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/).
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def _timeout_s(smoke: SmokeContainer) -> int:
    timeout = smoke.limits.timeout_s
    if timeout is None:
        timeout = smoke.limits.kill_after_s - SMOKE_GRACE_S
    return int(timeout) + PULL_MARGIN_S


def class_documents(lock: Lock, spec: JobSpec, plan: ClassPlan) -> list[dict[str, Any]]:
    """The Job of one class (and, with DRA, its ResourceClaimTemplate first): `nodes` pods,
    one per node (pod anti-affinity on the hostname), each failing on its own (an Indexed Job
    with backoffLimitPerIndex 0: one node's failure does not stop the others)."""
    cls = plan.gpu_class
    name = job_name(spec, cls)
    labels = _labels(spec, cls)
    annotations = {
        LOCK_LABEL: spec.lock_sha256,
        REQUIRES_ANNOTATION: requires_text(lock, plan, spec.select),
        "envbuild.lock.name": spec.lock_name,
    }
    docs: list[dict[str, Any]] = []
    claim = ""
    pod: dict[str, Any] = {}
    if spec.select == "dra":
        claim = "gpus"
        docs.append(_claim_template(name, labels, plan))
        pod["resourceClaims"] = [{"name": claim, "resourceClaimTemplateName": name}]
    one_per_node = {
        "labelSelector": {
            "matchLabels": {RUN_LABEL: labels[RUN_LABEL], CLASS_LABEL: labels[CLASS_LABEL]}
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    pod |= {
        "restartPolicy": "Never",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": node_terms(lock, plan, spec.select)
                }
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_per_node]},
        },
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [_container(spec, cls, claim)],
        "volumes": [
            {
                "name": "dshm",
                "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.smoke.shm_mib}Mi"},
            }
        ],
    }
    docs.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {
                "completionMode": "Indexed",
                "completions": cls.nodes,
                "parallelism": cls.nodes,
                "backoffLimitPerIndex": 0,
                "activeDeadlineSeconds": _timeout_s(spec.smoke),
                "ttlSecondsAfterFinished": 86400,
                "template": {
                    "metadata": {"labels": labels, "annotations": annotations},
                    "spec": pod,
                },
            },
        }
    )
    return docs


def _claim_template(name: str, labels: dict[str, str], plan: ClassPlan) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": DRA_CLASS,
                                "allocationMode": "ExactCount",
                                "count": plan.gpu_class.gpus,
                                "selectors": [{"cel": {"expression": cel_selector(plan)}}],
                            },
                        }
                    ]
                }
            }
        },
    }


def fleet_documents(
    lock: Lock, spec: JobSpec, classes: Sequence[GpuClass], rules: ArchRules | None = None
) -> tuple[list[dict[str, Any]], list[ClassPlan]]:
    """Every manifest of a run (ordered by class), and the plans of the classes the lock
    cannot run on (no Job: the reason says why)."""
    if "@sha256:" not in spec.smoke.image:
        raise UserError(
            f"--image {spec.smoke.image} is not pinned by digest",
            hint="give REF@sha256:... (envbuild image --push prints pushed.repo_digest), so every "
            "node runs the bytes that passed",
        )
    docs: list[dict[str, Any]] = []
    excluded: list[ClassPlan] = []
    for cls in sorted(classes, key=lambda c: (c.name, c.cc)):
        plan = plan_class(lock, cls, rules)
        if plan.excluded:
            excluded.append(plan)
        else:
            docs += class_documents(lock, spec, plan)
    return docs, excluded

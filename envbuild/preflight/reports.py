"""What `validate` writes for other tools (pure): a Kubernetes Job manifest as YAML, and JUnit
XML for CI. Both are deterministic (no timestamps), so a file can be diffed.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from envbuild.preflight.validate import Check
from envbuild.smoke.container import SmokeContainer
from envbuild.smoke.plan import SMOKE_GRACE_S

# --- Kubernetes Job manifest ---------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*$")


def _yaml_scalar(value: Any) -> str:
    # Strings are written JSON-quoted: a JSON string is a valid YAML double-quoted scalar, so
    # "yes", "0755" or ":" can never change type or meaning (YAML 1.2 spec, section 7.3.1).
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value), ensure_ascii=False)


def _yaml_key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) else json.dumps(key)


def _yaml_lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{_yaml_key(str(k))}:")
                lines.extend(_yaml_lines(v, indent + 2))
            else:
                inline = "{}" if isinstance(v, dict) else "[]" if isinstance(v, list) else None
                lines.append(f"{pad}{_yaml_key(str(k))}: {inline or _yaml_scalar(v)}")
        return lines
    if isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                sub = _yaml_lines(item, indent + 2)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {_yaml_scalar(item)}")
        return lines
    return [pad + _yaml_scalar(value)]


def to_yaml(value: Any) -> str:
    """A tiny YAML emitter for manifests (mappings, sequences, JSON-quoted scalars)."""
    return "\n".join(_yaml_lines(value, 0)) + "\n"


def k8s_name(text: str, *, prefix: str = "envbuild-validate-") -> str:
    """A DNS-1123 label (lowercase alphanumerics and '-', at most 63 characters)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "image"
    return (prefix + slug)[:63].rstrip("-")


PULL_MARGIN_S = 600
"""Added to the smoke time limit in activeDeadlineSeconds: image pull and scheduling."""


def node_label_ok(node: str) -> bool:
    """Can `node` be a label value (the kubernetes.io/hostname label of a node)? At most 63
    characters: alphanumerics, '-', '_', '.', alphanumeric at both ends."""
    return (
        len(node) <= 63
        and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", node) is not None
    )


def job_names(name: str, nodes: Sequence[str]) -> list[str]:
    """One Job name per node, "envbuild-validate-<name>-<node>": a DNS-1123 label; where two
    nodes would get the same name, or a long one is cut, a short hash of the node keeps it
    unique."""
    plain = [k8s_name(f"{name}-{node}") for node in nodes]
    counts = collections.Counter(plain)  # not plain.count: quadratic in the hosts
    out = []
    for node, job in zip(nodes, plain, strict=True):
        if counts[job] > 1 or len(job) >= 63:
            digest = hashlib.sha256(node.encode()).hexdigest()[:8]
            job = job[: 63 - 9].rstrip("-") + "-" + digest
        out.append(job)
    return out


def k8s_job(
    *, smoke: SmokeContainer, name: str, job_name: str, node: str, gpus: int
) -> dict[str, Any]:
    """A batch/v1 Job that runs the smoke container `smoke` (its image, command, /dev/shm,
    environment and the plan's timeout) once, on the node `node`.

    The pod is pinned by node affinity on the kubernetes.io/hostname label (the kubelet sets it
    to the node's hostname, lowercased), so the verdict is about that host and no other. It asks
    for `gpus` whole GPUs (nvidia.com/gpu, the NVIDIA device plugin's resource) and tolerates
    the usual nvidia.com/gpu taint of GPU nodes; /dev/shm is a memory emptyDir because a pod's
    default /dev/shm is 64 MB, too small for NCCL and DataLoader workers. backoffLimit 0 and
    restartPolicy Never: a failed smoke run is a verdict, not something to retry.
    """
    labels = {"app.kubernetes.io/name": "envbuild-validate", "envbuild.job": k8s_name(name)}
    pinned = {
        "key": "kubernetes.io/hostname",
        "operator": "In",
        "values": [node],
    }
    container: dict[str, Any] = {
        "name": "smoke",
        "image": smoke.image,
        "command": list(smoke.command),
        "resources": {"limits": {"nvidia.com/gpu": int(gpus)}},
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if smoke.environment:
        container["env"] = [{"name": k, "value": v} for k, v in smoke.environment.items()]
    timeout_s = smoke.limits.timeout_s
    if timeout_s is None:  # only the kill time is known: the plan's timeout is before it
        timeout_s = smoke.limits.kill_after_s - SMOKE_GRACE_S
    pod = {
        "restartPolicy": "Never",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [pinned]}]
                }
            }
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{smoke.shm_mib}Mi"}}
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "labels": labels,
            "annotations": {"envbuild.node": node},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(timeout_s) + PULL_MARGIN_S,
            "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def to_yaml_documents(values: Sequence[Any]) -> str:
    """Several manifests as one multi-document YAML stream (`kubectl apply -f` reads it)."""
    return "---\n".join(to_yaml(v) for v in values)


# --- JUnit XML -----------------------------------------------------------------------------------


def junit_xml(suites: Sequence[tuple[str, Sequence[Check]]]) -> str:
    """JUnit XML for CI: one <testsuite> per target, one <testcase> per check.

    Deterministic (no timestamps or durations), so a report can be diffed.
    """
    root = ET.Element("testsuites", name="envbuild validate")
    total = failures = skipped = 0
    for suite_name, checks in suites:
        n_fail = sum(1 for c in checks if c.status == "fail")
        n_skip = sum(1 for c in checks if c.status == "skip")
        suite = ET.SubElement(
            root,
            "testsuite",
            name=suite_name,
            tests=str(len(checks)),
            failures=str(n_fail),
            errors="0",
            skipped=str(n_skip),
        )
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname=suite_name, name=c.name)
            if c.status == "fail":
                fail = ET.SubElement(case, "failure", message=c.detail, type="envbuild")
                fail.text = f"{c.detail}\nnext: {c.next_step}" if c.next_step else c.detail
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=c.detail)
            else:
                out = ET.SubElement(case, "system-out")
                out.text = c.detail
        total += len(checks)
        failures += n_fail
        skipped += n_skip
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("skipped", str(skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

"""`envbuild fleet k8s`: Jobs per GPU class, chosen by what the lock needs (preflight/k8s.py).

Every manifest is validated against the Kubernetes API's own schemas at the pinned API version
(kubernetes-validate, strict: unknown fields fail) and read by the real kubectl
(`kubectl create --dry-run=client`, with a discovery cache in place of a cluster: no cluster
can be started here). Which nodes a Job's selector admits is checked by evaluating its
node-selector terms as the scheduler does (`fleet_run.matches`, the NodeSelectorRequirement
operators) over labelled nodes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from envbuild.cli.main import cli
from envbuild.core.errors import UserError
from envbuild.core.models import Floors
from envbuild.preflight import fleet_run, k8s
from envbuild.smoke.container import SmokeLimits, smoke_container
from tests.unit.preflight.test_validate import make_lock

ROOT = Path(__file__).resolve().parents[3]
HOSTS = ROOT / "tests" / "fixtures" / "hosts"
DIGEST = "registry.example.com/ml/torch@sha256:" + "a" * 64
K8S_VERSION = k8s.API_VERSION + ".0"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def spec(select: k8s.Select = "labels", image: str = DIGEST) -> k8s.JobSpec:
    smoke = smoke_container(
        image, SmokeLimits(4096, 660, 600), allow_cpu=False, attach=None, environ={}
    )
    return k8s.JobSpec(smoke, "ci-1234", "f" * 64, "torch-train", select)


H100 = k8s.GpuClass("NVIDIA H100 80GB HBM3", "9.0", "NVIDIA H100 80GB HBM3", nodes=4, gpus=8)
L4 = k8s.GpuClass("L4", "8.9", nodes=2, gpus=1)


def documents(select: k8s.Select = "labels", **lock: Any) -> list[dict[str, Any]]:
    docs, excluded = k8s.fleet_documents(make_lock(**lock), spec(select), [H100, L4])
    assert not excluded
    return docs


def cli_manifests(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = tmp_path / "jobs.yaml"
    res = CliRunner().invoke(
        cli,
        [
            "fleet",
            "k8s",
            "--lock",
            str(ROOT / "images/torch-train"),
            "--image",
            DIGEST,
            "-o",
            str(out),
            "--json",
            *args,
        ],
    )
    assert res.exit_code == 0, res.output
    return list(yaml.safe_load_all(out.read_text()))


@pytest.mark.parametrize(
    "args",
    [
        ("--hosts", str(HOSTS / "fleet-doctor.jsonl")),
        ("--nodes-per-class", "3"),
        ("--select", "dra", "--hosts", str(HOSTS / "fleet-doctor.jsonl")),
        ("--select", "dra", "--run-id", "nightly.2026-12-02"),
    ],
)
def test_every_manifest_validates_against_the_kubernetes_schemas(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    docs = cli_manifests(tmp_path, *args)
    assert docs
    for doc in docs:
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == k8s.API_VERSION
        meta = doc["metadata"]
        assert len(meta["name"]) <= 63 and DNS_LABEL.match(meta["name"]), meta["name"]
        assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in meta["labels"].values())


def test_the_validate_k8s_job_manifests_validate_too(tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            "--hosts",
            str(HOSTS / "fleet-doctor.jsonl"),
            "--lock",
            str(ROOT / "images/torch-train"),
            "--image",
            DIGEST,
            "--k8s-job",
            str(out),
        ],
    )
    assert out.exists(), res.output
    for doc in yaml.safe_load_all(out.read_text()):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_schema_violation_is_caught() -> None:
    """The validator is strict: a field the API does not have fails (so the test above can
    fail)."""
    job = documents()[0]
    job["spec"]["template"]["spec"]["containers"][0]["terminationMessage"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


def discovery_cache(root: Path) -> Path:
    """A kubeconfig whose server never answers, and kubectl's discovery cache for it: the
    groups and kinds the manifests use, as the API server's discovery documents say them."""
    cache = root / "cache" / "discovery" / "127.0.0.1_9"
    groups = [
        ("", "v1", "pods", "Pod"),
        ("batch", "batch/v1", "jobs", "Job"),
        (
            "resource.k8s.io",
            "resource.k8s.io/v1",
            "resourceclaimtemplates",
            "ResourceClaimTemplate",
        ),
    ]
    listing = []
    for group, gv, plural, kind in groups:
        version = {"groupVersion": gv, "version": "v1"}
        listing.append({"name": group, "versions": [version], "preferredVersion": version})
        folder = cache / gv
        folder.mkdir(parents=True)
        resource = {
            "name": plural,
            "singularName": kind.lower(),
            "namespaced": True,
            "kind": kind,
            "verbs": ["create", "get", "list"],
        }
        (folder / "serverresources.json").write_text(
            json.dumps(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": gv,
                    "resources": [resource],
                }
            )
        )
    (cache / "servergroups.json").write_text(
        json.dumps({"kind": "APIGroupList", "apiVersion": "v1", "groups": listing})
    )
    config = root / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "none",
                "clusters": [{"name": "none", "cluster": {"server": "http://127.0.0.1:9"}}],
                "contexts": [{"name": "none", "context": {"cluster": "none", "namespace": "ci"}}],
                "users": [{"name": "u", "user": {}}],
            }
        )
    )
    return config


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("select", ["labels", "dra"])
def test_kubectl_creates_every_document_in_a_client_dry_run(
    tmp_path: Path, select: k8s.Select
) -> None:
    docs = documents(select)
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    config = discovery_cache(tmp_path)
    done = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            "create",
            "--dry-run=client",
            "--validate=false",
            "-f",
            str(manifest),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    items, text, decoder = [], done.stdout.strip(), json.JSONDecoder()
    while text:  # one JSON object per document, one after another
        item, end = decoder.raw_decode(text)
        items.append(item)
        text = text[end:].strip()
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == [
        (d["kind"], d["metadata"]["name"]) for d in docs
    ]
    assert all(i["metadata"]["namespace"] == "ci" for i in items)


def admitted(job: dict[str, Any], labels: dict[str, str]) -> bool:
    """Does the Job's required node affinity admit a node with `labels` (terms ORed,
    expressions ANDed, as kube-scheduler's NodeAffinity plugin)?"""
    pod = job["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(
        all(fleet_run.matches(e, labels) for e in t["matchExpressions"])
        for t in terms["nodeSelectorTerms"]
    )


def gfd_labels(
    driver: str, cc: str = "9.0", product: str = "NVIDIA-H100-80GB-HBM3"
) -> dict[str, str]:
    major, minor, rev = driver.split(".")
    cmaj, cmin = cc.split(".")
    return {
        "kubernetes.io/arch": "amd64",
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/gpu.compute.major": cmaj,
        "nvidia.com/gpu.compute.minor": cmin,
        "nvidia.com/gpu.product": product,
    }


@given(
    st.integers(400, 700),
    st.integers(0, 300),
    st.integers(0, 99),
    st.sampled_from(["525.60.13", "570.124.06", "580.0.0", "550.54.5"]),
)
def test_the_driver_terms_admit_exactly_the_drivers_at_or_above_the_floor(
    major: int, minor: int, rev: int, floor: str
) -> None:
    lock = make_lock(minor_compat=floor, relied_on="minor_compat")
    (job,) = k8s.fleet_documents(lock, spec(), [replace(H100, nodes=1)])[0]
    # GFD writes the revision as the driver does: zero-padded to two digits ("05").
    driver = f"{major}.{minor}.{rev:02d}"
    want = tuple(map(int, driver.split("."))) >= tuple(map(int, floor.split(".")))
    assert admitted(job, gfd_labels(driver)) is want


def test_a_class_is_admitted_only_with_its_compute_capability_product_and_arch() -> None:
    h100_job = documents()[1]  # sorted by class name: "L4", then "NVIDIA H100 ..."
    assert h100_job["metadata"]["labels"][fleet_run.CLASS_LABEL] == "NVIDIA-H100-80GB-HBM3"
    ok = gfd_labels("570.124.06")
    assert admitted(h100_job, ok)
    assert not admitted(h100_job, {**ok, "nvidia.com/gpu.compute.minor": "9"})
    assert not admitted(h100_job, {**ok, "nvidia.com/gpu.product": "NVIDIA-H200"})
    assert not admitted(h100_job, {**ok, "kubernetes.io/arch": "arm64"})
    l4_job = documents()[0]  # selected by compute capability only
    assert admitted(l4_job, gfd_labels("570.124.06", "8.9", "NVIDIA-L4"))


def test_a_gpu_reached_only_through_ptx_needs_the_toolkits_floor() -> None:
    lock = make_lock(archs=("sm_80", "compute_80"), toolkit="570.26", minor_compat="525.60.13")
    plans = [k8s.plan_class(lock, c) for c in (L4, H100)]  # sm_80 runs on 8.9; 9.0 needs JIT
    assert [p.floor for p in plans] == ["525.60.13", "570.26"]
    (job,) = k8s.fleet_documents(lock, spec(), [H100])[0]
    assert not admitted(job, gfd_labels("560.35.03"))
    assert admitted(job, gfd_labels("570.26.00"))


def test_a_class_the_build_has_no_code_for_gets_no_job() -> None:
    lock = make_lock(archs=("sm_90",))
    docs, excluded = k8s.fleet_documents(lock, spec(), [H100, L4])
    assert [d["metadata"]["labels"][fleet_run.CLASS_LABEL] for d in docs] == [
        "NVIDIA-H100-80GB-HBM3"
    ]
    assert excluded[0].gpu_class == L4 and "8.9" in excluded[0].excluded


def test_each_pod_writes_its_verdict_as_the_termination_message() -> None:
    job = documents()[1]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][-2:] == ["--verdict", "/dev/termination-log"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["env"][0]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert container["image"] == DIGEST
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "4096Mi"}
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (4, 4)
    assert job["spec"]["backoffLimitPerIndex"] == 0
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert job["metadata"]["annotations"]["envbuild.lock.sha256"] == "f" * 64


def test_dra_selects_devices_by_product_driver_and_compute_capability() -> None:
    template, job = documents("dra")[2:4]
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == "gpu.nvidia.com" and request["count"] == 8
    cel = request["selectors"][0]["cel"]["expression"]
    assert cel == (
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3' && "
        "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('525.60.13')) >= 0"
        " && device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo("
        "semver('9.0.0')) == 0"
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    assert pod["containers"][0]["resources"] == {"claims": [{"name": "gpus"}]}


def test_an_image_by_tag_is_refused() -> None:
    with pytest.raises(UserError, match="not pinned by digest"):
        k8s.fleet_documents(make_lock(), spec(image="registry.example.com/ml/torch:1"), [H100])


def test_semver_drops_leading_zeros() -> None:
    assert (k8s.semver("550.54.05"), k8s.semver("9.0")) == ("550.54.5", "9.0.0")
    assert make_lock().stack.floors == Floors("570.26", "525.60.13", "minor_compat")

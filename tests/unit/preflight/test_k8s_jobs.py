"""`validate --hosts ... --k8s-job`: one Kubernetes Job per host that passed, pinned to it.

Each manifest is parsed back (PyYAML, the dev extra) and checked against the batch/v1 Job
schema's fields that envbuild uses (tests/fixtures/k8s/job-batch-v1.schema.json).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from envbuild.cli.main import cli
from envbuild.core.models import SmokeSettings
from envbuild.preflight import reports
from envbuild.smoke.container import limits_for, smoke_container

ROOT = Path(__file__).resolve().parents[3]
HOSTS = ROOT / "tests" / "fixtures" / "hosts"
LOCK_DIR = ROOT / "images" / "torch-train"
SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "k8s" / "job-batch-v1.schema.json").read_text())
IMAGE = "registry.example.com/ml/torch-train:1"

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "boolean": bool,
}


def schema_errors(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """The subset of JSON Schema the fixture uses: $ref, type, enum, required, properties,
    additionalProperties, items, minimum, maxLength, pattern."""
    if "$ref" in schema:
        ref = SCHEMA["definitions"][schema["$ref"].rsplit("/", 1)[1]]
        schema = {**ref, **{k: v for k, v in schema.items() if k != "$ref"}}
    types = schema.get("type")
    if types is not None:
        wanted = [types] if isinstance(types, str) else types
        ok = any(
            isinstance(value, _TYPES[t]) and not (t == "integer" and isinstance(value, bool))
            for t in wanted
        )
        if not ok:
            return [f"{where}: {value!r} is not {types}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)):
            errors.append(f"{where}: longer than {schema['maxLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, int) and value < schema.get("minimum", value):
        errors.append(f"{where}: {value} < {schema['minimum']}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{where}[{i}]")
    if isinstance(value, dict):
        errors += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                errors += schema_errors(item, props[key], f"{where}.{key}")
            elif extra is False:
                errors.append(f"{where}: unknown field {key!r}")
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, f"{where}.{key}")
    return errors


def a_job(*, min_shm_mib: int = 1024, **over: Any) -> dict[str, Any]:
    settings = SmokeSettings(timeout_s=900, min_shm_mib=min_shm_mib)
    smoke = smoke_container(IMAGE, limits_for(settings), allow_cpu=False, attach=None, environ={})
    args: dict[str, Any] = {
        "smoke": smoke,
        "name": "torch-train",
        "job_name": "envbuild-validate-torch-train-h100-a",
        "node": "h100-a",
        "gpus": 8,
    }
    return reports.k8s_job(**{**args, **over})


def test_the_schema_check_catches_what_the_api_server_would_refuse() -> None:
    assert schema_errors(a_job(), SCHEMA) == []
    broken = a_job()
    del broken["spec"]["template"]["spec"]["containers"]
    broken["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    broken["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0].pop("operator")
    broken["spec"]["backofLimit"] = 0
    errors = schema_errors(broken, SCHEMA)
    assert len(errors) == 4, errors
    assert any("missing 'containers'" in e for e in errors)
    assert any("'Always' not in" in e for e in errors)
    assert any("missing 'operator'" in e for e in errors)
    assert any("unknown field 'backofLimit'" in e for e in errors)


def test_one_job_is_pinned_to_its_node_with_gpus_shm_and_deadline() -> None:
    job = a_job(min_shm_mib=4096)
    doc = yaml.safe_load(reports.to_yaml(job))
    assert doc == job  # the emitter loses nothing
    spec = doc["spec"]
    assert (spec["activeDeadlineSeconds"], spec["backoffLimit"]) == (900 + 600, 0)
    assert "completions" not in spec and "parallelism" not in spec  # one pod: the defaults
    pod = spec["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h100-a"]}
            ]
        }
    ]
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert container["command"] == [
        "python",
        "/opt/envbuild/payload",
        "--plan",
        "/opt/envbuild/plan.json",
    ]
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4096Mi"}}
    ]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["restartPolicy"] == "Never"
    assert doc["metadata"]["annotations"] == {"envbuild.node": "h100-a"}


def run_fleet(tmp_path: Path, hosts: Path, *extra: str) -> tuple[Any, Path]:
    out = tmp_path / "jobs.yaml"
    res = CliRunner().invoke(
        cli,
        [
            *("validate", "--hosts", str(hosts), "--lock", str(LOCK_DIR)),
            *("--image", IMAGE, "--k8s-job", str(out), *extra),
        ],
    )
    return res, out


def pinned_node(job: dict[str, Any]) -> str:
    terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    ((expr,),) = [t["matchExpressions"] for t in terms]
    assert (expr["key"], expr["operator"]) == ("kubernetes.io/hostname", "In")
    (node,) = expr["values"]
    return str(node)


def gpus_of(job: dict[str, Any]) -> int:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return int(container["resources"]["limits"]["nvidia.com/gpu"])


def test_handwritten_fleet_gets_one_job_per_passing_host(tmp_path: Path) -> None:
    res, out = run_fleet(tmp_path, HOSTS / "fleet-handwritten.jsonl", "--json")
    assert res.exit_code == 1  # four hosts cannot run it; the Jobs cover the four that can
    jobs = list(yaml.safe_load_all(out.read_text()))
    assert {pinned_node(j): gpus_of(j) for j in jobs} == {
        "h100-a": 1,
        "l4-a": 1,
        "v100-a": 1,
        "h100-nocc": 2,
    }
    for job in jobs:
        assert schema_errors(job, SCHEMA) == [], job["metadata"]["name"]
        assert job["spec"]["activeDeadlineSeconds"] == 600 + reports.PULL_MARGIN_S
        volumes = job["spec"]["template"]["spec"]["volumes"]
        assert volumes == [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2048Mi"}}
        ]
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["image"] == IMAGE
    names = [j["metadata"]["name"] for j in jobs]
    assert names == [
        "envbuild-validate-torch-train-h100-a",
        "envbuild-validate-torch-train-l4-a",
        "envbuild-validate-torch-train-v100-a",
        "envbuild-validate-torch-train-h100-nocc",
    ]
    doc = json.loads(res.stdout)
    assert doc["k8s_job"] == str(out)
    assert doc["k8s_jobs"] == [
        {"job": n, "node": pinned_node(j)} for n, j in zip(names, jobs, strict=True)
    ]


def test_doctor_records_ask_for_every_gpu_of_their_host(tmp_path: Path) -> None:
    res, out = run_fleet(tmp_path, HOSTS / "fleet-doctor.jsonl")
    assert res.exit_code == 0, res.output
    jobs = list(yaml.safe_load_all(out.read_text()))
    assert {pinned_node(j): gpus_of(j) for j in jobs} == {"h100-a": 8, "l4-a": 1, "v100-a": 4}
    assert res.output.endswith(
        f"wrote 3 Kubernetes Jobs to {out}, each pinned to one host that passed (h100-a, l4-a, "
        f"v100-a): kubectl apply -f {out}\n"
    )


def test_gpus_per_pod_overrides_the_host_count(tmp_path: Path) -> None:
    res, out = run_fleet(tmp_path, HOSTS / "fleet-doctor.jsonl", "--gpus-per-pod", "2")
    assert res.exit_code == 0, res.output
    assert {gpus_of(j) for j in yaml.safe_load_all(out.read_text())} == {2}


def test_recorded_h200x2_report_is_one_job_with_two_gpus(tmp_path: Path) -> None:
    res, out = run_fleet(tmp_path, HOSTS / "h200x2-doctor.json")
    assert res.exit_code == 0, res.output
    (job,) = yaml.safe_load_all(out.read_text())
    facts = json.loads((HOSTS / "h200x2-doctor.json").read_text())
    assert pinned_node(job) == facts["hostname"].lower()
    assert gpus_of(job) == 2


def write_hosts(tmp_path: Path, *facts: dict[str, Any]) -> Path:
    path = tmp_path / "hosts.jsonl"
    path.write_text("".join(json.dumps(f) + "\n" for f in facts))
    return path


H100 = {"driver": "570.124.06", "gpus": [{"name": "H100"}]}


def test_a_host_recorded_twice_gets_one_job_and_names_are_lowercased(tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path, {"name": "GPU-7", **H100}, {"name": "gpu-7", **H100})
    res, out = run_fleet(tmp_path, hosts)
    assert res.exit_code == 0, res.output
    (job,) = yaml.safe_load_all(out.read_text())
    assert pinned_node(job) == "gpu-7"  # the kubelet lowercases the hostname label


def test_a_host_without_a_name_cannot_be_pinned(tmp_path: Path) -> None:
    junit = tmp_path / "fleet.xml"
    hosts = write_hosts(tmp_path, {"name": "a", **H100}, H100)
    res, out = run_fleet(tmp_path, hosts, "--junit", str(junit))
    assert res.exit_code == 2
    assert "host host2 in" in res.output and "has no name" in res.output
    assert not out.exists()
    (case,) = ET.parse(junit).getroot().iter("testcase")  # --junit is written all the same
    failure = case.find("failure")
    assert failure is not None and "has no name" in failure.get("message", "")


def test_no_passing_host_writes_no_manifest(tmp_path: Path) -> None:
    hosts = write_hosts(
        tmp_path, {"name": "old", "driver": "470.256.02", "gpus": [{"name": "A100", "cc": "8.0"}]}
    )
    res, out = run_fleet(tmp_path, hosts)
    assert res.exit_code == 2 and "no Job written" in res.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (["a.b", "a-b"], 2),  # both slug to "a-b": a hash keeps them apart
        (["n" * 80, "n" * 81], 2),  # cut at 63: a hash keeps them apart
        (["h100-a"], 1),
    ],
)
def test_job_names_are_unique_dns_labels(nodes: list[str], expected: int) -> None:
    names = reports.job_names("torch-train", nodes)
    assert len(set(names)) == expected == len(nodes)
    for name in names:
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)


def test_node_label_values() -> None:
    assert reports.node_label_ok("ip-10-0-1-23.ec2.internal")
    assert not reports.node_label_ok("x" * 64)
    assert not reports.node_label_ok("-bad")

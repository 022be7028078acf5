"""A Kubernetes run read back (`fleet_run.k8s_results`): Jobs and Pods built from the
Kubernetes API types (the official client's models, serialized as the API server sends them),
in each state a run ends in: passed, failed (the verdict in the termination message),
unschedulable, evicted, never started (image pull, deadline), killed for memory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes.client import (
    ApiClient,
    V1Container,
    V1ContainerState,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1Job,
    V1JobCondition,
    V1JobSpec,
    V1JobStatus,
    V1Node,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodSpec,
    V1PodStatus,
    V1PodTemplateSpec,
)

from envbuild.cli.main import cli
from envbuild.payload import smoke_checks as ck
from envbuild.preflight import fleet_run, k8s
from envbuild.smoke.container import SmokeLimits, smoke_container
from tests.unit.preflight.test_validate import make_lock

API = ApiClient()
H100 = k8s.GpuClass("NVIDIA H100 80GB HBM3", "9.0", "NVIDIA H100 80GB HBM3", nodes=6, gpus=8)
SPEC = k8s.JobSpec(
    smoke_container(
        "reg.example.com/t@sha256:" + "a" * 64,
        SmokeLimits(2048, 660, 600),
        allow_cpu=False,
        attach=None,
        environ={},
    ),
    "ci-7",
    "b" * 64,
    "torch-train",
)
JOB = k8s.fleet_documents(make_lock(), SPEC, [H100])[0][0]
JOB_NAME = JOB["metadata"]["name"]


def serialized(obj: Any, kind: str, api_version: str) -> dict[str, Any]:
    doc: dict[str, Any] = API.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return {"kind": kind, "apiVersion": api_version, **doc}


def job(conditions: list[V1JobCondition] | None = None, name: str = JOB_NAME) -> dict[str, Any]:
    meta = JOB["metadata"]
    obj = V1Job(
        metadata=V1ObjectMeta(name=name, labels=meta["labels"], annotations=meta["annotations"]),
        spec=V1JobSpec(
            template=V1PodTemplateSpec(
                spec=V1PodSpec(containers=[V1Container(name="smoke", image="x")])
            )
        ),
        status=V1JobStatus(conditions=conditions),
    )
    return serialized(obj, "Job", "batch/v1")


def pod(
    name: str,
    *,
    node: str | None,
    phase: str,
    state: V1ContainerState | None = None,
    reason: str | None = None,
    message: str | None = None,
    conditions: list[V1PodCondition] | None = None,
) -> dict[str, Any]:
    template = JOB["spec"]["template"]
    labels = {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": JOB_NAME}
    spec = V1PodSpec.from_dict(template["spec"])  # the pod spec of the Job above
    assert spec is not None
    spec.node_name = node
    statuses = [
        V1ContainerStatus(
            name="smoke", image="x", image_id="", ready=False, restart_count=0, state=state
        )
    ]
    obj = V1Pod(
        metadata=V1ObjectMeta(name=f"{JOB_NAME}-{name}", labels=labels),
        spec=spec,
        status=V1PodStatus(
            phase=phase,
            reason=reason,
            message=message,
            conditions=conditions,
            container_statuses=statuses if state else None,
        ),
    )
    return serialized(obj, "Pod", "v1")


def verdict_of(node: str, *failing: str) -> str:
    checks = [ck.check(n, 1, "fail", f"{n}: figure", f"fix {n}") for n in failing]
    checks.append(ck.check("shm", 1, "pass", "ok"))
    report = {
        "ok": not failing,
        "device": "cuda",
        "checks": checks,
        "host": {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "cc": "9.0"}]},
    }
    return ck.verdict_text(ck.verdict_of(report, node))


def terminated(code: int, message: str, reason: str = "Completed") -> V1ContainerState:
    return V1ContainerState(
        terminated=V1ContainerStateTerminated(exit_code=code, message=message, reason=reason)
    )


def node(name: str, driver: str) -> dict[str, Any]:
    major, minor, rev = driver.split(".")
    labels = {
        "kubernetes.io/arch": "amd64",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
    }
    return serialized(V1Node(metadata=V1ObjectMeta(name=name, labels=labels)), "Node", "v1")


UNSCHEDULABLE = V1PodCondition(
    type="PodScheduled",
    status="False",
    reason="Unschedulable",
    message="0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
)


def run_list() -> dict[str, Any]:
    items = [
        job(),
        pod("0", node="gpu-a", phase="Succeeded", state=terminated(0, verdict_of("gpu-a"))),
        pod(
            "1",
            node="gpu-b",
            phase="Failed",
            state=terminated(1, verdict_of("gpu-b", "driver-floor"), "Error"),
        ),
        pod("2", node=None, phase="Pending", conditions=[UNSCHEDULABLE]),
        pod(
            "3",
            node="gpu-c",
            phase="Failed",
            reason="Evicted",
            message="The node was low on resource: memory.",
        ),
        pod(
            "4",
            node="gpu-d",
            phase="Pending",
            state=V1ContainerState(
                waiting=V1ContainerStateWaiting(
                    reason="ImagePullBackOff", message="Back-off pulling image"
                )
            ),
        ),
        pod("5", node="gpu-e", phase="Failed", state=terminated(137, "", "OOMKilled")),
        job(
            [
                V1JobCondition(
                    type="Failed",
                    status="True",
                    reason="DeadlineExceeded",
                    message="Job was active longer than specified deadline",
                )
            ],
            name="envbuild-smoke-ci-7-l4",
        ),
    ]
    l4 = items[-1]["metadata"]
    l4["labels"] = {**l4["labels"], fleet_run.CLASS_LABEL: "L4"}
    return serialized({"items": items}, "List", "v1")


def results(nodes: list[dict[str, Any]] | None = None) -> dict[str, fleet_run.NodeResult]:
    view = fleet_run.k8s_results(run_list(), nodes)
    assert view.run == "ci-7" and view.source == "kubernetes" and not view.ok
    return {n.job: n for n in view.nodes}


def test_every_pod_state_becomes_a_node_result() -> None:
    got = results()
    p = {k.rsplit("-", 1)[-1]: v for k, v in got.items() if k.startswith(JOB_NAME)}
    assert (p["0"].status, p["0"].node, p["0"].gpu_class) == (
        "passed",
        "gpu-a",
        "NVIDIA-H100-80GB-HBM3",
    )
    assert (p["1"].status, p["1"].check, p["1"].fix, p["1"].exit_code) == (
        "failed",
        "driver-floor",
        "fix driver-floor",
        1,
    )
    assert p["2"].status == "never_scheduled" and p["2"].node == ""
    assert "driver >= 525.60.13" in p["2"].fix and "node affinity" in p["2"].detail
    assert (p["3"].status, p["3"].detail) == ("evicted", "The node was low on resource: memory.")
    assert (p["4"].status, p["4"].check) == ("never_started", "ImagePullBackOff")
    assert (p["5"].status, p["5"].check) == ("failed", "OOMKilled")
    deadline = got["envbuild-smoke-ci-7-l4"]
    assert (deadline.status, deadline.check) == ("never_started", "DeadlineExceeded")


def test_with_the_nodes_an_unschedulable_pod_names_the_label_that_excluded_them() -> None:
    got = results([node("gpu-x", "520.61.05"), node("gpu-y", "525.60.11")])  # floor 525.60.13
    unscheduled = got[f"{JOB_NAME}-2"]
    assert unscheduled.check == "nvidia.com/cuda.driver-version"
    assert unscheduled.detail.startswith("2 nodes, 2 with kubernetes.io/arch=amd64")
    assert "0 with nvidia.com/cuda.driver-version high enough" in unscheduled.detail
    # A node that meets every requirement: the scheduler's own message stays.
    got = results([node("gpu-z", "570.124.06")])
    assert got[f"{JOB_NAME}-2"].check == "node-affinity"


def test_a_log_tail_instead_of_a_verdict_is_no_verdict() -> None:
    doc = run_list()
    items = [i for i in doc["items"] if i["kind"] == "Job"][:1]
    items.append(
        pod(
            "9",
            node="gpu-f",
            phase="Failed",
            state=terminated(1, "Traceback ...\nImportError: libcuda.so.1", "Error"),
        )
    )
    (result,) = [n for n in fleet_run.k8s_results({"items": items}).nodes if n.node]
    assert (result.status, result.check) == ("failed", "no-verdict")
    assert "ImportError: libcuda.so.1" in result.detail


def test_the_cli_reads_a_kubectl_file(tmp_path: Path) -> None:
    listing = tmp_path / "run.json"
    listing.write_text(json.dumps(run_list()))
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "List", "items": [node("gpu-x", "470.256.02")]}))
    junit = tmp_path / "fleet.xml"
    res = CliRunner().invoke(
        cli,
        [
            "fleet",
            "results",
            "--k8s",
            str(listing),
            "--nodes",
            str(nodes),
            "--json",
            "--junit",
            str(junit),
        ],
    )
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert doc["counts"] == {
        "evicted": 1,
        "failed": 2,
        "never_scheduled": 1,
        "never_started": 2,
        "passed": 1,
    }
    assert junit.read_text().count("<testcase") == 7
    text = CliRunner().invoke(cli, ["fleet", "results", "--k8s", str(listing)]).output
    assert "NVIDIA-H100-80GB-HBM3  1/6 passed" in text and "L4" in text


def test_a_file_that_is_no_kubernetes_list_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"kind": "Pod"}')
    res = CliRunner().invoke(cli, ["fleet", "results", "--k8s", str(bad)])
    assert res.exit_code == 2 and "not a Kubernetes List" in res.output


def test_with_a_run_id_kubectl_is_asked_for_the_run_and_the_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--run RUN` runs kubectl (a stand-in on PATH here, answering as kubectl would)."""
    (tmp_path / "run.json").write_text(json.dumps(run_list()))
    (tmp_path / "nodes.json").write_text(
        json.dumps({"kind": "List", "items": [node("gpu-x", "470.256.02")]})
    )
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>{tmp_path}/args\n'
        f'case "$2" in nodes) cat {tmp_path}/nodes.json;; *) cat {tmp_path}/run.json;; esac\n'
    )
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    res = CliRunner().invoke(cli, ["fleet", "results", "--run", "ci-7", "--json"])
    assert res.exit_code == 1, res.output
    assert (tmp_path / "args").read_text().splitlines() == [
        "get jobs,pods -l envbuild.run=ci-7 -o json",
        "get nodes -o json",
    ]
    unscheduled = next(
        n for n in json.loads(res.output)["nodes"] if n["status"] == "never_scheduled"
    )
    assert unscheduled["check"] == "nvidia.com/cuda.driver-version"

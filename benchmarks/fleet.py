"""Section 7 of `make bench`: the fleet read-back (`envbuild fleet results`) of 100, 1,000 and
10,000 nodes, Kubernetes and Slurm, and how its time grows with the fleet.

The inputs are made here, the size real ones have: a `kubectl get jobs,pods -o json` List whose
pods carry the whole pod spec `envbuild fleet k8s` writes (affinity, tolerations, volumes) and a
status in each state a run ends in (90 % passed, 5 % failed with a verdict, 2 % unschedulable,
2 % evicted, 1 % image pull back-off), and a Slurm run folder of one verdict and one exit code
per node. Measured: the pure view in process (`fleet_run.k8s_results`), the whole command as
a user runs it (`envbuild fleet results --k8s FILE --json`, `--slurm RUN --json`: start,
read, parse, view, print), and beside it the floor any reader pays: Python's json.load of the
same file (Kubernetes), reading every file of the folder (Slurm). Nothing is asserted.

`python -m benchmarks.fleet` runs this section alone and writes results/fleet-readback.json.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import ENVBUILD, RESULTS_DIR, Section, _checked, _log, interleaved, row

SIZES = (100, 1_000, 10_000)
PER_JOB = 100
"""Pods per Job (one Job per GPU class): 10,000 nodes are 100 classes of 100 nodes."""


def _job_and_template() -> tuple[dict[str, Any], dict[str, Any]]:
    """A Job `envbuild fleet k8s` writes, and its pod template."""
    from envbuild.core.models import Floors, Lock
    from envbuild.preflight import k8s
    from envbuild.smoke.container import SmokeLimits, smoke_container

    smoke = smoke_container(
        "registry.example.com/ml/torch@sha256:" + "a" * 64,
        SmokeLimits(4096, 660, 600),
        allow_cpu=False,
        attach=None,
        environ={},
    )
    spec = k8s.JobSpec(smoke, "bench", "b" * 64, "torch-train")
    lock = _lock(Lock, Floors)
    cls = k8s.GpuClass("NVIDIA H100 80GB HBM3", "9.0", "NVIDIA H100 80GB HBM3", PER_JOB, 8)
    job = k8s.class_documents(lock, spec, k8s.plan_class(lock, cls))[-1]
    return job, job["spec"]["template"]


def _lock(lock_type: Any, floors_type: Any) -> Any:
    """The lock of images/torch-train (its archs and floors decide the selector)."""
    from envbuild.lock.format import loads

    text = (Path(__file__).resolve().parent.parent / "images/torch-train/envbuild.lock").read_text()
    lock = loads(text, path="images/torch-train/envbuild.lock")
    assert isinstance(lock, lock_type) and isinstance(lock.stack.floors, floors_type)
    return lock


def _status(i: int, node: str, verdict_ok: str, verdict_fail: str) -> dict[str, Any]:
    state = i % 100
    if state < 90:
        return _terminated("Succeeded", 0, verdict_ok.replace("NODE", node))
    if state < 95:
        return _terminated("Failed", 1, verdict_fail.replace("NODE", node))
    if state < 97:
        return {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/10000 nodes are available: 10000 node(s) didn't match Pod's "
                    "node affinity/selector.",
                }
            ],
        }
    if state < 99:
        return {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."}
    waiting = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    return {"phase": "Pending", "containerStatuses": [_container({"waiting": waiting})]}


def _container(state: dict[str, Any]) -> dict[str, Any]:
    return {"name": "smoke", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
            "state": state}  # fmt: skip


def _terminated(phase: str, code: int, message: str) -> dict[str, Any]:
    term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}
    return {"phase": phase, "containerStatuses": [_container({"terminated": term})]}


def _verdicts() -> tuple[str, str]:
    from envbuild.payload import smoke_checks as ck

    checks = [ck.check(f"check-{i}", 1, "pass", "ok") for i in range(20)]
    report: dict[str, Any] = {
        "ok": True,
        "device": "cuda",
        "tier": 2,
        "host": {"driver": "570.124.06", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "cc": "9.0"}]},
        "checks": checks,
        "timings": {"total_s": 41.0},
    }
    ok = ck.verdict_text(ck.verdict_of(report, "NODE"))
    report["ok"] = False
    checks[3] = ck.check("driver-floor", 1, "fail", "driver 535 < 570", "upgrade")
    return ok, ck.verdict_text(ck.verdict_of(report, "NODE"))


def k8s_listing(nodes: int) -> dict[str, Any]:
    """A v1 List of `nodes` pods in Jobs of PER_JOB pods, as kubectl prints it."""
    job, template = _job_and_template()
    ok, failed = _verdicts()
    items: list[dict[str, Any]] = []
    for j in range((nodes + PER_JOB - 1) // PER_JOB):
        name = f"envbuild-smoke-bench-class-{j:03d}"
        this = copy.deepcopy(job)
        this["metadata"]["name"] = name
        this["metadata"]["labels"]["envbuild.gpu-class"] = f"class-{j:03d}"
        items.append(this)
        for i in range(j * PER_JOB, min(nodes, (j + 1) * PER_JOB)):
            node = f"gpu{i:05d}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i % PER_JOB}-x{i:05d}",
                    "labels": {**this["metadata"]["labels"], "batch.kubernetes.io/job-name": name},
                    "annotations": dict(template["metadata"]["annotations"]),
                },
                "spec": {**copy.deepcopy(template["spec"]), "nodeName": node},
                "status": _status(i, node, ok, failed),
            }
            items.append(pod)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def slurm_folder(root: Path, nodes: int) -> Path:
    """A Slurm run folder of `nodes` nodes (templates/slurm/smoke.sbatch.sh's layout)."""
    ok, failed = _verdicts()
    run = root / f"envbuild-smoke-bench-{nodes}"
    (run / "verdicts").mkdir(parents=True)
    (run / "logs").mkdir()
    names = [f"gpu{i:05d}" for i in range(nodes)]
    (run / "nodes.txt").write_text("\n".join(names) + "\n")
    (run / "run.json").write_text(json.dumps({"schema": 1, "run": "bench", "job_id": "7"}))
    for i, node in enumerate(names):
        if i % 100 < 97:  # 3 % never ran: no files
            text = (ok if i % 100 < 90 else failed).replace("NODE", node)
            (run / "verdicts" / f"{node}.json").write_text(text)
            (run / "logs" / f"{node}.rc").write_text("0\n" if i % 100 < 90 else "1\n")
    return run


def _parse(path: Path) -> None:
    json.loads(path.read_text())


def _read_all(run: Path) -> None:
    for path in sorted(run.rglob("*")):
        if path.is_file():
            json.loads(path.read_text()) if path.suffix == ".json" else path.read_text()


def bench_fleet(repeat: int) -> Section:
    from envbuild.preflight import fleet_run

    rows = []
    notes = []
    with tempfile.TemporaryDirectory(prefix="envbuild-bench-fleet-") as tmp:
        for n in SIZES:
            _log(f"fleet read-back: {n} nodes")
            listing = k8s_listing(n)
            path = Path(tmp) / f"k8s-{n}.json"
            path.write_text(json.dumps(listing))
            run = slurm_folder(Path(tmp), n)
            view = fleet_run.k8s_results(listing)
            counts = view.to_json()["counts"]
            notes.append(
                f"{n} nodes: kubectl JSON {path.stat().st_size / 1e6:.1f} MB; view {counts}"
            )
            k8s_cli = [ENVBUILD, "fleet", "results", "--k8s", str(path), "--json"]
            slurm_cli = [ENVBUILD, "fleet", "results", "--slurm", str(run), "--json"]
            samples = interleaved(
                {
                    "view": partial(fleet_run.k8s_results, listing),
                    "k8s": partial(_run_allowing_1, k8s_cli),
                    "parse": partial(_parse, path),
                    "slurm": partial(_run_allowing_1, slurm_cli),
                    "read": partial(_read_all, run),
                },
                repeat,
            )
            rows += [
                row(f"Kubernetes view in process, {n} nodes", samples["view"], note="pure"),
                row(
                    f"`fleet results --k8s`, {n} nodes",
                    samples["k8s"],
                    samples["parse"],
                    peer_name="json.load of the file",
                ),
                row(
                    f"`fleet results --slurm`, {n} nodes",
                    samples["slurm"],
                    samples["read"],
                    peer_name="read every file",
                ),
            ]
    notes += _growth(rows)
    return {"title": "7. Fleet read-back (100 to 10,000 nodes)", "rows": rows, "notes": notes}


def _growth(rows: list[dict[str, Any]]) -> list[str]:
    """How each measurement grows from the smallest fleet to the largest (x100 nodes)."""
    out = []
    for kind in ("Kubernetes view in process", "`fleet results --k8s`", "`fleet results --slurm`"):
        small, big = (
            next(r for r in rows if r["what"] == f"{kind}, {n} nodes")
            for n in (SIZES[0], SIZES[-1])
        )
        if small.get("envbuild") and big.get("envbuild"):
            factor = big["envbuild"] / small["envbuild"]
            out.append(
                f"{kind}: x{factor:.0f} from {SIZES[0]} to {SIZES[-1]} nodes "
                f"(x{SIZES[-1] // SIZES[0]} nodes)"
            )
    return out


def _run_allowing_1(cmd: list[str]) -> None:
    """The run has failed nodes on purpose: exit 1 is the expected answer."""
    from benchmarks.common import _run

    res = _run(cmd)
    if res.returncode not in (0, 1):
        _checked(cmd)


def main() -> None:
    """This section alone: results/fleet-readback.json and .md (with the machine's load)."""
    from benchmarks.report import _table

    repeat = int(os.environ.get("BENCH_REPEAT", "5"))
    start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    section = bench_fleet(repeat)
    section["load average"] = {"start": start, "end": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "fleet-readback.json").write_text(
        json.dumps(section, indent=2, sort_keys=True) + "\n"
    )
    text = "\n".join(
        [
            f"# {section['title']}",
            "",
            "`python -m benchmarks.fleet` (benchmarks/fleet.py says what is measured); "
            f"{os.cpu_count()} CPUs, load average {section['load average']['start']} at the "
            f"start and {section['load average']['end']} at the end (other work on the machine "
            "shows in every figure).",
            "",
            *_table(section["rows"]),
            "",
            *(f"- {n}" for n in section["notes"]),
            "",
        ]
    )
    (RESULTS_DIR / "fleet-readback.md").write_text(text)
    print(text, file=sys.stdout)


if __name__ == "__main__":
    main()

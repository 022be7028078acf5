"""A Slurm run folder read back (`fleet_run.slurm_results`, `app.fleet.read_slurm_folder`)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from envbuild.app import fleet
from envbuild.cli.main import cli
from envbuild.payload import smoke_checks as ck
from envbuild.preflight import fleet_run


def verdict(node: str, *failing: str, gpu: str = "NVIDIA H100 80GB HBM3") -> str:
    checks = [ck.check(n, 1, "fail", f"{n} figure", f"fix {n}") for n in failing]
    checks.append(ck.check("shm", 1, "pass", "ok"))
    report = {
        "ok": not failing,
        "device": "cuda",
        "host": {"gpus": [{"name": gpu, "cc": "9.0"}] * 8},
        "checks": checks,
        "timings": {"total_s": 3.0},
    }
    return ck.verdict_text(ck.verdict_of(report, node))


def run_folder(tmp_path: Path) -> Path:
    """Five nodes: one passed, one failed a check, one was killed at its limit, one never ran,
    one has no engine."""
    run = tmp_path / "envbuild-smoke-x-42"
    (run / "verdicts").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / "nodes.txt").write_text("gpu01\ngpu02\ngpu03\ngpu04\ngpu05\n")
    (run / "run.json").write_text(
        json.dumps({"schema": 1, "run": "envbuild-smoke-x", "job_id": "42", "gpu_class": "H100"})
    )
    (run / "verdicts/gpu01.json").write_text(verdict("gpu01"))
    (run / "verdicts/gpu02.json").write_text(verdict("gpu02", "driver-floor", "grads"))
    for node, rc in (("gpu01", 0), ("gpu02", 1), ("gpu03", 124), ("gpu05", 127)):
        (run / f"logs/{node}.rc").write_text(f"{rc}\n")
    (run / "logs/gpu03.err").write_text("pulling\nstill pulling\n")
    return run


def test_every_node_of_the_allocation_gets_a_result(tmp_path: Path) -> None:
    view = fleet_run.slurm_results(fleet.read_slurm_folder(run_folder(tmp_path), ""))
    got = {n.node: n for n in view.nodes}
    assert view.run == "envbuild-smoke-x-42" and not view.ok
    assert got["gpu01"].status == "passed" and got["gpu01"].gpu_class == "NVIDIA H100 80GB HBM3"
    assert (got["gpu02"].status, got["gpu02"].check, got["gpu02"].fix) == (
        "failed",
        "driver-floor",
        "fix driver-floor",
    )
    assert "(+1 more failed)" in got["gpu02"].detail
    assert got["gpu03"].check == "no-verdict" and "time limit" in got["gpu03"].detail
    assert "still pulling" in got["gpu03"].detail and got["gpu03"].exit_code == 124
    assert got["gpu04"].status == "never_started" and got["gpu04"].gpu_class == "H100"
    assert "container engine" in got["gpu05"].detail
    assert view.to_json()["counts"] == {"failed": 3, "never_started": 1, "passed": 1}


def test_sacct_says_which_steps_have_not_ended() -> None:
    text = "42|gpu[01-02]|RUNNING|0:0\n42.batch|gpu01|RUNNING|0:0\n42.0|gpu02|RUNNING|0:0\n"
    sacct = fleet_run.parse_sacct(text)
    assert sacct == {"gpu02": ("RUNNING", "0:0")}
    folder = fleet_run.SlurmFolder(
        run={"job_id": "42"}, nodes=["gpu02"], verdicts={}, exit_codes={}, err_tails={}, sacct=sacct
    )
    (node,) = fleet_run.slurm_results(folder).nodes
    assert node.status == "pending" and node.check == "RUNNING"


def test_a_cut_or_foreign_verdict_file_is_no_verdict(tmp_path: Path) -> None:
    run = run_folder(tmp_path)
    (run / "verdicts/gpu01.json").write_text('{"ok": true')  # cut
    view = fleet_run.slurm_results(fleet.read_slurm_folder(run, ""))
    gpu01 = next(n for n in view.nodes if n.node == "gpu01")
    assert gpu01.status == "failed" and gpu01.check == "no-verdict"


def test_the_cli_exits_1_with_one_json_object_and_writes_junit(tmp_path: Path) -> None:
    run = run_folder(tmp_path)
    junit = tmp_path / "fleet.xml"
    res = CliRunner().invoke(
        cli, ["fleet", "results", "--slurm", str(run), "--json", "--junit", str(junit)]
    )
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert doc["classes"]["NVIDIA H100 80GB HBM3"] == {"failed": 1, "passed": 1}
    assert junit.read_text().count("<testcase") == 5
    text = CliRunner().invoke(cli, ["fleet", "results", "--slurm", str(run)])
    assert "gpu02 [NVIDIA H100 80GB HBM3]: FAILED: driver-floor" in text.output
    assert "fix: fix driver-floor" in text.output


def test_a_folder_that_is_no_run_is_bad_input(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["fleet", "results", "--slurm", str(tmp_path)])
    assert res.exit_code == 2 and "not an envbuild Slurm run folder" in res.output

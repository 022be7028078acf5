"""`envbuild image` and the GPU-attach rule over a fake engine: the choice reaches the engine,
the way used reaches the run, the smoke report label and the --json document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.build.pipeline import build_and_verify
from envbuild.cli.main import cli
from envbuild.core.errors import GpuUnavailableError
from envbuild.host.gpu_attach import GpuChoice
from tests.unit.build.test_build import OK_RUN, make_job, passing
from tests.unit.fakes import FakeEngine


def test_the_way_used_is_in_the_run_the_label_and_the_json() -> None:
    engine = FakeEngine(run_result=OK_RUN)
    job = make_job(gpu=GpuChoice("gpus", ("0", "1")))
    out = build_and_verify(engine, job, judge=passing, progress=lambda _: None)
    assert ("gpu_attach", "gpus") in engine.calls
    spec = next(c[1] for c in engine.calls if c[0] == "run")
    assert spec.gpus is True
    assert spec.gpu_attach is not None and spec.gpu_attach.devices == ("0", "1")
    recorded = {"way": "gpus", "requested": "auto", "devices": ["0", "1"], "reason": "fake engine"}
    label = json.loads(out.report_label)["envbuild"]["gpu_attach"]
    assert label == {**recorded, "runtime": None}
    assert out.to_json()["gpu_attach"] == {**recorded, "runtime": None, "checks": {}}


def test_no_way_stops_before_the_build_with_the_rule_in_the_fields() -> None:
    engine = FakeEngine(run_result=OK_RUN, nvidia=False)
    with pytest.raises(GpuUnavailableError) as info:
        build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert info.value.fields["gpu_attach"]["way"] == "none"
    assert [c[0] for c in engine.calls] == ["ping", "gpu_attach"]


def test_a_cpu_run_records_no_way() -> None:
    engine = FakeEngine(run_result=OK_RUN, nvidia=False)
    out = build_and_verify(engine, make_job(allow_cpu=True), judge=passing, progress=print)
    assert out.to_json()["gpu_attach"] is None
    assert "gpu_attach" not in json.loads(out.report_label)["envbuild"]
    assert "gpu_attach" not in [c[0] for c in engine.calls]


def test_cli_refuses_a_device_that_is_no_index_or_uuid(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["image", str(tmp_path), "--gpu-devices", "0,H100"])
    assert res.exit_code == 2
    assert res.output == (
        "error: --gpu-devices '0,H100': H100 is not a GPU index or UUID\n"
        "  next: pass all, or indexes / UUIDs as nvidia-smi -L lists them: 0,1 or GPU-3f2a...\n"
    )

"""`envbuild image` on the command line: flags reach the API, exit codes, JSON, progress."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envbuild.app import image
from envbuild.build.pipeline import ImageOutcome
from envbuild.cli.commands.image import Progress
from envbuild.cli.main import cli
from envbuild.core.errors import GpuUnavailableError, SmokeFailed, StaleLockError
from envbuild.render.dockerfile import BuildInputs
from envbuild.smoke.plan import SmokeJudgement
from tests.unit.build.test_build import OK_RUN, make_job
from tests.unit.fakes import FakeEngine


def _outcome(**over: Any) -> ImageOutcome:
    from envbuild.build.pipeline import build_and_verify

    engine = FakeEngine(run_result=OK_RUN)
    checks = [
        {"name": "x", "status": "pass"},
        {"name": "gpu-visible", "status": "warn"},
        {"name": "y", "status": "skip"},
        {"name": "z", "status": "skip"},
    ]
    report = {"ok": True, "device": "cpu", "checks": checks}
    return build_and_verify(
        engine,
        make_job(allow_cpu=True, base_image="envbuild-e2e/base:bookworm", **over),
        judge=lambda _: SmokeJudgement(ok=True, report=report),
        progress=lambda _: None,
    )


def test_flags_reach_the_api_and_json_is_one_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")

    def fake(**kwargs: Any) -> ImageOutcome:
        seen.update(kwargs)
        kwargs["progress"]("Step 1/1 : FROM x")
        return _outcome()

    monkeypatch.setattr(image, "build_image", fake)
    args = ["image", str(tmp_path), "--allow-cpu", "--base-image", "b:1", "--ca-cert", str(ca)]
    args += ["--smoke-timeout", "5", "--keep-failed", "--tag", "t/x:1", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout.strip().splitlines()[-1])
    assert doc["ok"] is True and doc["device"] == "cpu" and doc["base_image_replaced"] is True
    assert seen["request"] == image.ImageRequest(
        tag="t/x:1", allow_cpu=True, smoke_timeout=5, keep_failed=True
    )
    assert seen["build_inputs"] == BuildInputs(base_image="b:1", ca_cert=ca)


def test_human_output_names_tag_device_and_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image, "build_image", lambda **_: _outcome())
    result = CliRunner().invoke(cli, ["image", str(tmp_path), "--allow-cpu"])
    assert result.exit_code == 0, result.output
    assert "tagged envbuild-test/demo:ok" in result.stdout
    assert "pass on cpu, checks: 1 pass, 2 skip, 1 warn" in result.stdout
    assert "envbuild.smoke.report" in result.stdout


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SmokeFailed("smoke test of demo failed: shm.size", hint="raise --shm-size"), 6),
        (GpuUnavailableError("the engine cannot attach NVIDIA GPUs", hint="nvidia-smi"), 7),
        (StaleLockError("images/x/envbuild.lock is stale", hint="run: envbuild lock images/x"), 1),
    ],
)
def test_errors_map_to_exit_codes_with_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, code: int
) -> None:
    def fake(**_: Any) -> ImageOutcome:
        raise error

    monkeypatch.setattr(image, "build_image", fake)
    result = CliRunner().invoke(cli, ["image", str(tmp_path)])
    assert result.exit_code == code
    assert "next:" in result.stderr
    assert "Traceback" not in result.output
    as_json = CliRunner().invoke(cli, ["image", str(tmp_path), "--json"])
    assert as_json.exit_code == code
    doc = json.loads(as_json.stdout.strip().splitlines()[-1])
    assert doc["ok"] is False and doc["error"] == type(error).__name__


def test_smoke_failure_prints_each_failed_check_and_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = SmokeFailed(
        "smoke test of demo failed: shm.size",
        hint="rerun with --keep-failed",
        fields={"failed": [{"name": "shm.size", "figure": "64 MiB", "hint": "--shm-size=2g"}]},
    )

    def fake(**_: Any) -> ImageOutcome:
        raise err

    monkeypatch.setattr(image, "build_image", fake)
    result = CliRunner().invoke(cli, ["image", str(tmp_path)])
    assert result.exit_code == 6
    assert "failed check shm.size (64 MiB)" in result.stderr
    assert "fix: --shm-size=2g" in result.stderr


def test_smoke_timeout_must_be_positive(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["image", str(tmp_path), "--smoke-timeout", "0"])
    assert result.exit_code == 2


def test_progress_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(out, tty=False)
    for line in ("Step 1/2 : FROM x", "Collecting torch", "Step 2/2 : RUN y"):
        progress(line)
    progress.close()
    assert out.getvalue().splitlines() == [
        "Step 1/2 : FROM x",
        "Collecting torch",
        "Step 2/2 : RUN y",
    ]


def test_progress_on_a_terminal_overwrites_output_lines_and_keeps_steps() -> None:
    out = io.StringIO()
    progress = Progress(out, tty=True)
    progress("Step 1/2 : FROM x")
    progress("Collecting torch")
    progress("Downloading torch (900 MB)")
    progress("Step 2/2 : RUN y")
    progress.close()
    text = out.getvalue()
    assert "\r\x1b[K  Downloading torch" in text
    kept = [ln for ln in text.split("\n") if ln.strip()]
    assert kept[0] == "Step 1/2 : FROM x"
    assert kept[-1].endswith("Step 2/2 : RUN y")

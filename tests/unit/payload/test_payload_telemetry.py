"""GPU telemetry of the payload without a GPU: NVML through ctypes against a stand-in library
compiled here (tests/fixtures/nvml/fake_nvml.c), nvidia-smi's CSV from a recording, the sampler
and the watcher with a fake reader."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envbuild.core.resources import payload_dir
from envbuild.payload import gpu_read, smoke_host, telemetry, watch
from envbuild.payload import smoke_checks as ck

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REPO = Path(__file__).resolve().parents[3]


def _build(tmp_path: Path, *defines: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in NVML library")
    out = tmp_path / f"libfake-nvml{''.join(defines)}.so"
    src = FIXTURES / "nvml" / "fake_nvml.c"
    subprocess.run([cc, "-shared", "-fPIC", *defines, "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture
def fake_lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    lib = _build(tmp_path)
    monkeypatch.setenv(gpu_read.LIB_ENV, str(lib))
    return lib


# --- NVML through ctypes -------------------------------------------------------------------------


def test_facts_through_ctypes(fake_lib: Path) -> None:
    facts = smoke_host.nvml_facts()
    assert facts["source"] == "nvml" and facts["via"] == "ctypes"
    assert facts["driver"] == "580.95.05" and facts["cuda_driver"] == "13.0"
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200"] * 2
    assert facts["gpus"][0] == {
        "index": 0,
        "name": "NVIDIA H200",
        "cc": "9.0",
        "memory_mib": 143771,
        "uuid": "GPU-00000000-1111-2222-3333-444444444444",
    }


def test_sample_through_ctypes_skips_what_the_driver_refuses(fake_lib: Path) -> None:
    reader, why = gpu_read.open_reader()
    assert why is None and reader.via == "ctypes"
    try:
        first, second = reader.sample()
    finally:
        reader.close()
    assert first == {
        "util_pct": 97,
        "mem_used_mib": 2485,
        "power_w": 650.2,
        "power_limit_w": 700.0,
        "temp_c": 55,
        "sm_clock_mhz": 1980,
        "throttle": 0x44,
    }
    assert ck.throttle_flags(first["throttle"]) == ["hw_thermal_slowdown", "sw_power_cap"]
    assert second["temp_c"] is None  # NVML_ERROR_NOT_SUPPORTED on GPU 1: left out, said why
    assert reader.skipped == {"temp_c": "nvmlDeviceGetTemperature: Not Supported (3)"}


def test_old_driver_names_and_a_missing_symbol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = _build(tmp_path, "-DOLD_DRIVER", "-DNO_POWER")
    monkeypatch.setenv(gpu_read.LIB_ENV, str(lib))
    reader, _ = gpu_read.open_reader()
    assert reader.facts()["cuda_driver"] == "12.2"  # nvmlSystemGetCudaDriverVersion (no _v2)
    first = reader.sample()[0]
    reader.close()
    assert first["throttle"] == 0x4  # nvmlDeviceGetCurrentClocksThrottleReasons (old name)
    assert first["power_w"] is None and first["power_limit_w"] == 700.0
    assert "nvmlDeviceGetPowerUsage is missing" in reader.skipped["power_w"]


def test_no_library_no_nvidia_smi_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpu_read.LIB_ENV, "/nonexistent/libnvidia-ml.so.1")
    monkeypatch.setattr("envbuild.payload.gpu_read.shutil.which", lambda name: None)
    reader, why = gpu_read.open_reader()
    assert reader is None
    assert "cannot load /nonexistent/libnvidia-ml.so.1" in str(why)
    assert "nvidia-smi is not on PATH" in str(why)
    facts = smoke_host.nvml_facts()
    assert facts["source"] is None and facts["gpus"] == [] and facts["error"] == why


# --- nvidia-smi ----------------------------------------------------------------------------------


def test_parse_recorded_nvidia_smi_query() -> None:
    text = (FIXTURES / "nvidia-smi" / "h200x2-query-gpu.csv").read_text()
    rows = gpu_read.parse_smi_csv(text)
    assert len(rows) == 2
    assert rows[0]["cc"] == "9.0" and rows[0]["memory_mib"] == 143771
    assert rows[0]["power_w"] == 650.25 and rows[0]["throttle"] == 0x4
    assert rows[1]["power_w"] is None  # "[N/A]"
    assert rows[1]["sm_clock_mhz"] == 345 and rows[1]["driver"] == "580.95.05"


def _fake_smi(tmp_path: Path, *, refuse_reasons: bool) -> Path:
    recorded = FIXTURES / "nvidia-smi" / "h200x2-query-gpu.csv"
    minimal = tmp_path / "minimal.csv"
    # The same two GPUs as an older nvidia-smi answers SMI_MINIMAL (no compute_cap, no reasons).
    minimal.write_text(
        "".join(
            ", ".join(c for i, c in enumerate(line.split(", ")) if i not in (3, 11)) + "\n"
            for line in recorded.read_text().splitlines()
        )
    )
    script = tmp_path / "nvidia-smi"
    refuse = 'case "$1" in *clocks_throttle_reasons*) exit 2;; esac\n' if refuse_reasons else ""
    script.write_text(
        f'#!/bin/sh\n{refuse}case "$1" in *compute_cap*) cat {recorded};; *) cat {minimal};; esac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_smi_reader_and_its_retry_without_new_fields(tmp_path: Path) -> None:
    new = gpu_read.SmiReader(str(_fake_smi(tmp_path, refuse_reasons=False)))
    assert new.facts()["gpus"][1]["uuid"].startswith("GPU-5555")
    assert [s["throttle"] for s in new.sample()] == [0x4, 0x1]
    old = gpu_read.SmiReader(str(_fake_smi(tmp_path, refuse_reasons=True)))
    assert old.fields == gpu_read.SMI_MINIMAL
    assert [s["throttle"] for s in old.sample()] == [None, None]
    assert [s["util_pct"] for s in old.sample()] == [97, 0]
    assert "throttle" in old.skipped


# --- the sampler -------------------------------------------------------------------------------


class FakeReader:
    source, via = "nvml", "fake"

    def __init__(self, utils: list[int]) -> None:
        self.utils = utils
        self.calls = 0
        self.skipped = {"sm_clock_mhz": "nvmlDeviceGetClockInfo: Not Supported (3)"}
        self.closed = False

    def sample(self) -> list[dict[str, Any]]:
        u = self.utils[self.calls % len(self.utils)]
        self.calls += 1
        gpu: dict[str, Any] = dict.fromkeys(gpu_read.SAMPLE_FIELDS)
        gpu |= {"util_pct": u, "mem_used_mib": 100 + u, "power_w": 100.0 + u, "temp_c": 40}
        gpu |= {"power_limit_w": 700.0, "throttle": 0x1 | (0x40 if u == 99 else 0)}
        return [gpu, dict(gpu, util_pct=0)]

    def close(self) -> None:
        self.closed = True


def test_pick_interval_keeps_sampling_under_one_percent() -> None:
    assert telemetry.pick_interval(0.0004) == telemetry.MIN_INTERVAL_S
    assert telemetry.pick_interval(0.004) == 0.4
    assert telemetry.pick_interval(0.2) == telemetry.MAX_INTERVAL_S  # nvidia-smi: capped
    for cost in (0.0001, 0.001, 0.004, 0.05):
        assert cost / telemetry.pick_interval(cost) <= telemetry.BUDGET


def test_series_halves_when_full_and_stays_evenly_spaced() -> None:
    s = telemetry.Series(max_samples=4)
    for i in range(10):
        s.add(float(i), 50.0, [{"util_pct": i}])
    d = s.as_dict()
    assert d["t"] == [0.0, 4.0, 8.0] and d["stride"] == 4
    assert d["gpus"][0]["util_pct"] == [0, 4, 8]
    assert len(d["t"]) <= 4


def test_sampler_keeps_a_bounded_series_and_the_peaks() -> None:
    reader = FakeReader([10, 99, 50])
    cpu = iter(float(i) for i in range(10_000))
    sampler = telemetry.Sampler(
        open_reader=lambda: (reader, None),
        cpu_seconds=lambda: next(cpu),
        interval=0.005,
        max_samples=8,
    )
    sampler.start()
    sampler.wait_started()
    time.sleep(0.3)
    got = sampler.stop()
    peaks, tel = got["peaks"], got["telemetry"]
    assert reader.closed
    assert peaks["samples"] == tel["samples_taken"] == reader.calls - 1  # less the warm-up
    assert peaks["util_pct"] == 99 and peaks["throttle"] == ["hw_thermal_slowdown"]
    series = tel["series"]
    assert 1 <= len(series["t"]) <= 8 and series["stride"] >= 2
    assert len(series["gpus"]) == 2 and series["gpus"][0]["power_limit_w"] == 700.0
    assert all(len(g["util_pct"]) == len(series["t"]) for g in series["gpus"])
    assert tel["interval_s"] == 0.005 and tel["sample_cost_s"] is not None
    assert tel["cost_pct"] == pytest.approx(100 * tel["sample_cost_s"] / 0.005, abs=0.05)
    assert tel["skipped"] == reader.skipped
    assert ck.check_telemetry(peaks)["status"] == "warn"  # hw thermal slowdown


def test_sampler_picks_its_interval_from_the_measured_cost() -> None:
    sampler = telemetry.Sampler(open_reader=lambda: (FakeReader([90]), None))
    sampler.start()
    sampler.wait_started()
    tel = sampler.stop()["telemetry"]
    assert tel["interval_s"] == telemetry.pick_interval(tel["sample_cost_s"])
    assert tel["cost_pct"] < 100 * telemetry.BUDGET


def test_sampler_without_a_reader_is_a_skip_with_the_reason() -> None:
    sampler = telemetry.Sampler(open_reader=lambda: (None, "cannot load libnvidia-ml.so.1"))
    sampler.start()
    got = sampler.stop()
    assert got["peaks"]["samples"] == 0
    c = ck.check_telemetry(got["peaks"], reason=got["telemetry"]["error"])
    assert c["status"] == "skip" and "cannot load libnvidia-ml.so.1" in c["figure"]


def test_record_telemetry_puts_peaks_series_and_readings_in_the_report() -> None:
    sampler = telemetry.Sampler(open_reader=lambda: (FakeReader([97]), None), interval=0.002)
    sampler.start()
    sampler.wait_started()
    time.sleep(0.05)
    out: dict[str, Any] = {"metrics": {}}
    checks: list[dict[str, Any]] = []
    smoke_host.record_telemetry(
        sampler, out, checks, {"reserved_mib": 9000.0, "max_allocated_mib": 2000.0}
    )
    assert out["metrics"]["nvml"]["samples"] >= 1
    assert out["metrics"]["telemetry"]["series"]["gpus"][0]["util_pct"][0] == 97
    names = {c["name"]: c["status"] for c in checks}
    assert names["telemetry"] == "pass"
    assert names["reading-allocator"] == "warn"


def test_proc_cpu_seconds_of_this_process() -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc")
    seconds = telemetry.proc_cpu_seconds(os.getpid())
    assert seconds is not None and seconds >= 0
    assert telemetry.proc_cpu_seconds(2**31 - 1) is None


# --- the watcher ---------------------------------------------------------------------------------


def test_watch_runs_the_child_and_passes_its_exit_code_on(tmp_path: Path) -> None:
    out = tmp_path / "series.json"
    code = "import time; t = time.time()\nwhile time.time() - t < 0.3: pass\nraise SystemExit(3)"
    rc = watch.run(
        [sys.executable, "-c", code],
        str(out),
        interval=0.02,
        open_reader=lambda: (FakeReader([20, 30]), None),
    )
    assert rc == 3
    record = json.loads(out.read_text())
    assert record["exit_code"] == 3 and record["command"][0] == sys.executable
    tel = record["telemetry"]
    assert tel["samples_taken"] >= 2 and tel["via"] == "fake"
    busy = [c for c in tel["series"]["cpu_pct"] if c is not None]
    assert busy and max(busy) > 20  # the child spun: its CPU, not the watcher's
    assert {r["name"] for r in record["readings"]} >= {"reading-throttle"}


def test_watch_command_that_cannot_start(tmp_path: Path) -> None:
    out = tmp_path / "series.json"
    assert watch.run(["/nonexistent/cmd"], str(out)) == 127
    assert "cannot start" in json.loads(out.read_text())["error"]


def test_watch_as_a_module_against_the_stand_in_library(tmp_path: Path) -> None:
    lib = _build(tmp_path)
    out = tmp_path / "series.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), **{gpu_read.LIB_ENV: str(lib)})
    cmd = [sys.executable, "-m", "envbuild.payload.watch", "--out", str(out), "--"]
    proc = subprocess.run(
        [*cmd, sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(5)"],
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 5
    record = json.loads(out.read_text())
    assert record["exit_code"] == 5
    assert record["peaks"]["util_pct"] == 97 and record["telemetry"]["via"] == "ctypes"
    assert record["telemetry"]["interval_s"] >= telemetry.MIN_INTERVAL_S


def test_watch_runs_from_a_copied_payload_folder(tmp_path: Path) -> None:
    # As inside an image (python /opt/envbuild/payload/watch.py), no site-packages, no NVML.
    folder = tmp_path / "payload"
    shutil.copytree(payload_dir(), folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "series.json"
    env = dict(os.environ, **{gpu_read.LIB_ENV: "/nonexistent.so"}, PATH="/nonexistent")
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(folder / "watch.py"),
            "--out",
            str(out),
            "--",
            sys.executable,
            "-c",
            "pass",
        ],
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0
    record = json.loads(out.read_text())
    assert record["exit_code"] == 0 and record["peaks"]["samples"] == 0
    assert "cannot load /nonexistent.so" in record["telemetry"]["error"]


def test_watch_needs_a_command() -> None:
    with pytest.raises(SystemExit) as exc:
        watch.main(["--out", "x.json"])
    assert exc.value.code == 2


def test_watch_to_stderr_ends_it_with_one_record_line(tmp_path: Path) -> None:
    # `--out -`: how envbuild.smoke.project_step reads the record back from a container's
    # output; the child's own stderr comes first, untouched.
    from envbuild.smoke.project_step import split_watch

    folder = tmp_path / "payload"
    shutil.copytree(payload_dir(), folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, **{gpu_read.LIB_ENV: "/nonexistent.so"}, PATH="/nonexistent")
    child = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    CHILD = (sys.executable, "-c")
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(folder / "watch.py"), "--out", "-", "--", *CHILD, child],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3 and proc.stdout == "out\n"
    rest, record = split_watch(proc.stderr)
    assert rest == "err\n"
    assert record is not None and record["exit_code"] == 3
    assert record["command"][-1] == child


def test_watch_out_that_cannot_be_written_keeps_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "no-such-folder" / "series.json"
    rc = watch.run(
        [sys.executable, "-c", "raise SystemExit(4)"],
        str(out),
        interval=0.02,
        open_reader=lambda: (FakeReader([20]), None),
    )
    err = capsys.readouterr().err
    assert rc == 4 and "cannot write" in err
    assert json.loads(err.rpartition(watch.REPORT_MARK)[2])["exit_code"] == 4
    assert list(tmp_path.iterdir()) == []

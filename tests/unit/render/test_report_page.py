"""The HTML report: SVG scaling, the page's content and determinism, and the CLI's --report
(exit codes, atomic write, a bad path without a traceback)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.app import report as report_app
from envbuild.cli.main import cli
from envbuild.render import report as html
from tests.unit.cli.test_validate_cli import write_lock
from tests.unit.preflight.test_validate import HOSTS, make_lock

FIXTURE = Path(__file__).parents[2] / "fixtures/reports/torch-h100x2.json"
REPORT = json.loads(FIXTURE.read_text())
SAMPLES = len(REPORT["metrics"]["telemetry"]["series"]["t"])


def test_scale_points_maps_the_corners_and_splits_at_gaps() -> None:
    runs = html.scale_points(
        [0, 1, 2, 3], [0, 50, None, 100], t_max=3, y_max=100, box=(0, 0, 30, 10)
    )
    assert runs == [[(0.0, 10.0), (10.0, 5.0)], [(30.0, 0.0)]]
    assert html.points_text(runs[0]) == "0,10 10,5"


def test_scale_points_clamps_and_survives_a_zero_span() -> None:
    assert html.scale_points([0], [250], t_max=0, y_max=100, box=(5, 0, 15, 10)) == [[(5.0, 0.0)]]
    assert html.scale_points([0, 1], [None, None], t_max=1, y_max=1) == []


@pytest.mark.parametrize(
    ("value", "top"), [(0, 1), (1, 1), (1.2, 2), (3, 5), (612, 1000), (39500, 50000), (2.1, 2.5)]
)
def test_nice_max(value: float, top: float) -> None:
    assert html.nice_max(value) == top


def test_charts_of_the_fixture() -> None:
    charts = html.charts(REPORT["metrics"]["telemetry"]["series"])
    assert [c.title.split(" ")[0] for c in charts] == [
        "GPU",
        "GPU",
        "Power",
        "Temperature",
        "SM",
        "CPU",
    ]
    power = charts[2]
    assert [line.label for line in power.lines] == ["GPU 0", "GPU 0 limit", "GPU 1", "GPU 1 limit"]
    assert power.lines[0].points == SAMPLES and power.lines[1].dashed
    assert charts[-1].lines[0].points == SAMPLES - 1  # the first CPU sample has no interval


def test_page_content_and_determinism() -> None:
    fit = report_app.memory_fit(REPORT)
    text = html.page(title="smoke <x>", verdict="pass", report=REPORT, memory_fit=fit)
    assert text == html.page(title="smoke <x>", verdict="pass", report=REPORT, memory_fit=fit)
    assert "smoke &lt;x&gt;" in text  # autoescaped
    assert not re.search(r"<script|<link|https?://(?!www\.w3\.org/2000/svg)", text)
    assert text.count("<svg") == 6
    assert "bf16-tflops" in text and "another process may hold the GPU" in text
    assert "reading-input-pipeline" in text and "<h2>Readings</h2>" in text
    assert "does not fit" in text and "<td>L4</td>" in text
    counts = [int(n) for n in re.findall(r'data-points="(\d+)"', text)]
    assert counts.count(SAMPLES) == 10  # 5 GPU charts x 2 GPUs


def test_page_without_a_report_still_renders() -> None:
    text = html.page(title="t", verdict="fail", report=None, error="build step failed")
    assert "build step failed" in text and "No telemetry series" in text and "FAIL" in text


def test_check_path_refuses_folders_and_files_as_folders(tmp_path: Path) -> None:
    from envbuild.core.errors import UserError

    (tmp_path / "f").write_text("x")
    for bad in (tmp_path, tmp_path / "f" / "r.html"):
        with pytest.raises(UserError):
            report_app.check_path(bad)
    report_app.check_path(tmp_path / "new" / "r.html")


def _validate(tmp_path: Path, *args: str) -> tuple[int, str]:
    folder = tmp_path / "images" / "torch-train"
    if not folder.exists():
        write_lock(tmp_path, "torch-train", make_lock())
    res = CliRunner().invoke(
        cli,
        ["validate", str(folder), *args],
        env={"ENVBUILD_HOST_FACTS": str(HOSTS / "h200-healthy.json")},
    )
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def test_validate_report_is_written_atomically(tmp_path: Path) -> None:
    out = tmp_path / "pages" / "validate.html"
    code, output = _validate(tmp_path, "--report", str(out))
    assert code == 0, output
    text = out.read_text()
    assert "envbuild validate" in text and "<td>driver-floor</td>" in text
    assert [p.name for p in out.parent.iterdir()] == ["validate.html"]  # no temp file left


def test_validate_report_bad_paths_exit_2_and_3(tmp_path: Path) -> None:
    code, output = _validate(tmp_path, "--report", str(tmp_path))
    assert code == 2 and "is a folder" in output and "Traceback" not in output
    (tmp_path / "file").write_text("")
    code, output = _validate(tmp_path, "--report", str(tmp_path / "file" / "r.html"))
    assert code == 2 and "is a file" in output
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        code, output = _validate(tmp_path, "--report", str(ro / "r.html"))
    finally:
        ro.chmod(0o700)
    import os

    if os.geteuid() != 0:  # root writes anywhere
        assert code == 3 and "Traceback" not in output


def test_validate_report_on_a_failure_is_written(tmp_path: Path) -> None:
    out = tmp_path / "v.html"
    folder = write_lock(tmp_path, "torch-train", make_lock())
    res = CliRunner().invoke(
        cli,
        ["validate", str(folder), "--report", str(out)],
        env={"ENVBUILD_HOST_FACTS": str(HOSTS / "old-driver.json")},
    )
    assert res.exit_code == 1
    assert "FAIL" in out.read_text()


def test_fleet_marks_hosts_too_small_for_a_smoke_report(tmp_path: Path) -> None:
    folder = write_lock(tmp_path, "torch-train", make_lock())
    big = json.loads(json.dumps(REPORT))
    big["metrics"]["torch_memory"] = {"reserved_mib": 200 * 1024}
    rep = tmp_path / "smoke.json"
    rep.write_text(json.dumps(big))
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            "--hosts",
            str(HOSTS / "h200-healthy.json"),
            "--lock",
            str(folder),
            "--smoke-report",
            str(rep),
            "--json",
        ],
    )
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    (fit,) = doc["memory_fit"].values()
    assert fit["fits"] is False and fit["need_gib"] > 200
    rep.write_text(json.dumps(REPORT))
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            "--hosts",
            str(HOSTS / "h200-healthy.json"),
            "--lock",
            str(folder),
            "--smoke-report",
            str(rep),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert all(m["fits"] for m in json.loads(res.output)["memory_fit"].values())
    rep.write_text("{}")
    res = CliRunner().invoke(
        cli, ["validate", "--hosts", str(HOSTS / "h200-healthy.json"), "--smoke-report", str(rep)]
    )
    assert res.exit_code == 2 and "no peak device memory" in res.output


def test_the_projects_own_step_has_its_section_charts_and_readings() -> None:
    # The watcher's record of the project's smoke step (smoke_command.watch): its series is
    # the fixture's, its reading one warning.
    series = REPORT["metrics"]["telemetry"]["series"]
    reading = {"name": "reading-throttle", "tier": 2, "status": "warn", "figure": "hw 30%"}
    command = {
        "command": ["python", "train.py", "--note", "it's short"],
        "exit_code": 0,
        "duration_s": 12.5,
        "watch": {"peaks": {"samples": 40}, "telemetry": {"series": series}, "readings": [reading]},
    }
    alone = html.page(title="t", verdict="pass", report=REPORT)
    text = html.page(title="t", verdict="pass", report=REPORT, command=command)
    assert "<h2>The project's smoke step</h2>" in text and "smoke step" not in alone
    # shlex-quoted, then HTML-escaped by the template's autoescape
    assert (
        "<code>python train.py --note &#39;it&#39;&#34;&#39;&#34;&#39;s short&#39;</code>" in text
    )
    assert "exit 0 after 12.5 s; 40 samples" in text
    assert text.count("<polyline") == 2 * alone.count("<polyline")
    assert "hw 30%" in text and "hw 30%" not in alone


def test_report_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    target, link = tmp_path / "served.html", tmp_path / "r.html"
    target.write_text("old")
    link.symlink_to(target)
    report_app.check_path(link)
    report_app.write(link, title="t", ok=True, report=None)
    assert link.is_symlink() and "<html" in target.read_text()


def test_report_to_a_character_device_streams_into_it(tmp_path: Path) -> None:
    # /dev/stdout is a link to a terminal or pipe: a rename would replace the link in /dev.
    link = tmp_path / "out"
    link.symlink_to("/dev/null")
    report_app.check_path(link)
    report_app.write(link, title="t", ok=True, report=None)
    assert link.is_symlink() and Path("/dev/null").is_char_device()


def test_report_to_a_fifo_streams_or_says_nobody_reads(tmp_path: Path) -> None:
    import os
    import threading
    import time

    from envbuild.core.errors import UserError

    fifo = tmp_path / "page"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="no process reads"):
        report_app.write(fifo, title="t", ok=True, report=None)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the reader is there before the write
    os.set_blocking(fd, True)
    got: list[bytes] = []

    def drain() -> None:  # EOF before the writer opened is no EOF: wait for the first bytes
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                got.append(chunk)
            elif got:
                return
            else:
                time.sleep(0.01)

    reader = threading.Thread(target=drain)
    reader.start()
    report_app.write(fifo, title="t", ok=True, report=None)
    reader.join(timeout=10)
    os.close(fd)
    got = [b"".join(got)]
    assert fifo.is_fifo() and "<html" in got[0].decode()


def test_report_dangling_symlink_is_a_user_error(tmp_path: Path) -> None:
    from envbuild.core.errors import UserError

    link = tmp_path / "r.html"
    link.symlink_to(tmp_path / "gone" / "x.html")
    with pytest.raises(UserError, match="does not exist"):
        report_app.check_path(link)
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize(
    "report",
    [
        {"metrics": "not a table"},
        {"metrics": {"telemetry": {"series": {"t": ["a", "b"], "gpus": [{"util_pct": [1, 2]}]}}}},
        {"metrics": {"telemetry": {"series": {"t": [0, 1], "gpus": "x", "cpu_pct": 5}}}},
        {"checks": "x", "device": ["cuda"]},
        {"metrics": {"telemetry": ["not", "a", "table"]}},
    ],
)
def test_a_malformed_report_renders_without_a_crash(report: dict[str, object]) -> None:
    # A report comes from inside an image, which may hold anything.
    command = {"command": "not a list", "watch": {"telemetry": 3, "peaks": [], "readings": 1}}
    text = html.page(title="t", verdict="fail", report=report, command=command)
    assert text.startswith("<!DOCTYPE html>")

"""The pure parts of section 8 of `make bench` (benchmarks/scale.py): the exponent fit on
synthetic curves, the wheels it makes and its table in RESULTS.md (no timing is measured or
asserted here)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from benchmarks import common, scale
from benchmarks import report as report_bench


@pytest.mark.parametrize("b", [0.5, 1.0, 2.0])
def test_fit_returns_the_exponent_of_a_power_law(b: float) -> None:
    ns = [10, 100, 1000, 10_000]
    assert scale.fit_exponent(ns, [0.03 * n**b for n in ns]) == pytest.approx(b)


def test_fit_leaves_out_the_points_under_the_floor() -> None:
    # Fixed start costs hide the growth at small n: only the points above the floor count.
    ns = [1, 10, 100, 1000]
    ts = [0.001, 0.002, 0.05, 0.5]
    assert scale.fit_exponent(ns, ts, floor=0.02) == pytest.approx(1.0)
    assert scale.fit_exponent(ns, ts, floor=0.1) is None  # one point: no fit


def test_made_wheels_carry_the_metadata_uv_reads(tmp_path: Path) -> None:
    path = scale.make_wheel(tmp_path, "benchdep007")
    assert path.name == "benchdep007-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path) as zf:
        meta = zf.read("benchdep007-1.0.dist-info/METADATA").decode()
    assert "Name: benchdep007\nVersion: 1.0\n" in meta
    assert path.read_bytes() == scale.make_wheel(tmp_path / ".", "benchdep007").read_bytes()


def test_report_shows_each_curve_with_its_exponent() -> None:
    rows = [common.row(f"x, {n}", 0.01 * n) for n in (10, 100)]
    section = {
        "title": "8. Scale",
        "rows": rows,
        "curves": [scale._curve("x", rows, (10, 100))],
    }
    text = report_bench.write_report({"scale": section})
    assert "## 8. Scale" in text
    cells = [
        [c.strip() for c in ln.strip("|").split("|")]
        for ln in text.splitlines()
        if ln.startswith("| ") and ln.count("|") == 6
    ]
    assert cells[1:] == [["x", "10", "0.1 s", "**1.00**", "1.00"], ["", "100", "1 s", "", ""]]


def test_reading_marks_a_curve_above_linear_and_the_collector_share() -> None:
    sizes = (1000, 10_000)
    plain = [common.row(f"fleet view in process (x), {n} hosts", n * 1e-4 * (n / 1000) ** 0.3)
             for n in sizes]  # fmt: skip
    running = common.row("the same, 10000 hosts, cyclic GC running", 4.0)
    section = {"rows": [*plain, running], "curves": [scale._curve("fleet", plain, sizes)]}
    text = "\n".join(report_bench.scale_lines(section))
    assert "- fleet: **above linear** (b = 1.30, slope of the two largest n 1.30)" in text
    assert (
        "2.00 s with Python's cyclic collector held off (as envbuild now runs it) against " in text
    )
    assert "4.00 s with it running (50% of that time)" in text

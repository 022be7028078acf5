"""Readings of a telemetry series (envbuild/payload/readings.py): cases in, readings out.

Each tests/cases/smoke/readings/*.json holds a series (as telemetry.Sampler writes it), the torch
allocator's figures or null, and the readings expected: name, status and, for a warn, words its
figure and hint must hold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envbuild.payload import readings as rd

CASES = Path(__file__).resolve().parents[2] / "cases" / "smoke" / "readings"


def _cases() -> list[Path]:
    return sorted(CASES.glob("*.json"))


def test_there_are_cases() -> None:
    assert len(_cases()) >= 8


@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.stem)
def test_reading_case(path: Path) -> None:
    case: dict[str, Any] = json.loads(path.read_text())
    got = rd.readings(case["series"], case.get("torch_memory"))
    assert [(r["name"], r["status"]) for r in got] == [
        (e["name"], e["status"]) for e in case["expect"]
    ], case["_why"]
    for r, e in zip(got, case["expect"], strict=True):
        assert r["status"] in ("pass", "warn") and r["tier"] == 2
        assert e.get("figure_has", "") in r["figure"]
        assert e.get("hint_has", "") in r["hint"]
        if r["status"] == "warn":
            # A series shows symptoms: the next step is worded as a likelihood, with a fix.
            assert any(w in r["hint"] for w in ("likely", "probably", "usually")), r["hint"]
            assert r["figure"]


def test_no_series_no_readings() -> None:
    assert rd.readings(None) == []
    assert rd.readings({}) == []
    assert rd.readings({}, {"reserved_mib": None, "max_allocated_mib": 1.0}) == []


def test_input_pipeline_window_is_not_shifted_by_missed_samples() -> None:
    # 30 start-up samples (CPU busy, GPU idle; the first 15 missed by the reader), then 25 of
    # training with the GPU at 30% and the CPU nearly idle: no input-pipeline warning.
    util = [None] * 15 + [0] * 15 + [30] * 25
    cpu = [100.0] * 30 + [10.0] * 25
    series = {"t": [float(i) for i in range(55)], "cpu_pct": cpu, "gpus": [{"util_pct": util}]}
    got = {r["name"]: r for r in rd.readings(series)}["reading-input-pipeline"]
    assert got["status"] == "pass" and "CPU 10%" in got["figure"]

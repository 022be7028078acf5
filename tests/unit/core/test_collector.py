"""The cyclic collector held off around a fleet view (envbuild/core/collector.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from envbuild.app import validate as validate_app
from envbuild.core.collector import cyclic_collector_paused
from envbuild.core.errors import UserError
from envbuild.preflight import fleet

ROOT = Path(__file__).resolve().parents[3]


def test_paused_inside_and_put_back_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), cyclic_collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_caller_that_disabled_it_keeps_it_disabled() -> None:
    gc.disable()
    try:
        with cyclic_collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_fleet_view_is_built_with_the_collector_off(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    real = fleet.fleet_view

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(validate_app, "fleet_view", spy)
    result = validate_app.validate_fleet(
        hosts_file=ROOT / "tests/fixtures/hosts/fleet-handwritten.jsonl",
        lock_dirs=[ROOT / "images/torch-train"],
    )
    assert seen == [False]
    assert result.view.results and gc.isenabled()


def test_the_collector_comes_back_when_the_view_fails(tmp_path: Path) -> None:
    with pytest.raises(UserError):
        validate_app.validate_fleet(hosts_file=tmp_path / "none.jsonl", root=tmp_path)
    assert gc.isenabled()

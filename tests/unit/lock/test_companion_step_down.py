"""`envbuild lock` when the newest torch series' torchvision is not on the index yet: it locks
the newest series whose companions are (envbuild.app.lock `lock_image`), and says so. Seen
2026-12-07 on PyPI: torch 2.15.0 without torchvision 0.30 (DiT, denoising-diffusion-pytorch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envbuild.app import lock as lock_use_case
from envbuild.core.errors import UnsatisfiableError
from envbuild.lock.companions import without_series
from envbuild.lock.pins import RunResult
from tests.unit.lock.test_lockfile import (
    DEMO_REQUEST,
    FakeUv,
    demo_stack,
    install_fakes,
    make_image,
)

NO_TORCHVISION = (
    "  x No solution found when resolving dependencies:\n"
    "  `-> Because only torchvision<=0.24.1 is available and you require torchvision==0.25.*, "
    "we can conclude that your requirements are unsatisfiable.\n"
)


class MissingSeriesUv(FakeUv):
    """uv as PyPI answers it: no torchvision for the series `missing` asks for. `first`: uv's
    answer to the first pin only (a failure); the pins after it succeed."""

    def __init__(self, missing: tuple[str, ...] = ("torchvision==0.25.*",)) -> None:
        super().__init__()
        self.missing = missing
        self.first: str | None = None
        self.constraints: list[str] = []

    def __call__(self, argv: Any, cwd: Path, env: Any) -> RunResult:
        c = cwd / "constraints.txt"
        text = c.read_text() if c.exists() else ""
        self.constraints.append(text)
        failing = self.first if self.first is not None and not self.calls else None
        if failing is None and any(m in text for m in self.missing):
            failing = NO_TORCHVISION
        if failing is not None:
            self.calls.append(list(argv))
            return RunResult(1, "", failing)
        return super().__call__(argv, cwd, env)


def _setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, narrowed_fits: bool = True
) -> tuple[Path, MissingSeriesUv, list[str]]:
    import envbuild.resolver

    uv = MissingSeriesUv()
    install_fakes(monkeypatch, uv=uv)
    asked: list[str] = []

    def resolve(req: Any, m: Any, hosts: Any = (), **kw: Any) -> Any:
        asked.append(req.framework)
        if "!=" in req.framework and not narrowed_fits:
            raise UnsatisfiableError("no torch release in the matrix matches " + req.framework)
        return demo_stack()

    monkeypatch.setattr(envbuild.resolver, "resolve", resolve)
    text = DEMO_REQUEST.replace('requirements = ["numpy<3"]', 'requirements = ["torchvision"]')
    return make_image(tmp_path, text), uv, asked


def test_the_series_without_companions_is_left_out_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv, asked = _setup(monkeypatch, tmp_path)
    # The stand-in resolver answers torch 2.10.0 again; the step down's second pin finds
    # torchvision's series (uv's second answer), so the mechanics are what is checked here.
    uv.missing, uv.first = (), NO_TORCHVISION
    outcome = lock_use_case.lock_image(image)
    assert outcome.status == "written"
    assert asked == ["torch>=2.8,<2.11", "torch!=2.10.*,<2.11,>=2.8"]
    assert len(uv.calls) == 2
    said = [w for w in outcome.warnings if w.startswith("left out")]
    assert said == [
        "left out torch 2.10: its torchvision (0.25.*) is not on the index yet; locked torch "
        "2.10.0, the newest release that fits; `envbuild lock --upgrade` tries the newer series "
        "again"
    ]
    # What the lock records is the request as written, not the narrowed requirement.
    assert 'requirement = "torch>=2.8,<2.11"' in (image / "envbuild.toml").read_text()
    assert "!=2.10.*" not in outcome.text


def test_when_no_older_series_fits_the_first_cause_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, _, asked = _setup(monkeypatch, tmp_path, narrowed_fits=False)
    with pytest.raises(UnsatisfiableError) as info:
        lock_use_case.lock_image(image)
    err = info.value
    assert err.message.startswith(
        "torchvision pairs with one torch series, and no torchvision 0.25.* (the one for torch "
        "2.10.0) is on the index"
    )
    assert err.hint.startswith("allow an older torch series in [framework] requirement")
    # ... and what leaving that series out met.
    assert (
        "\n(and with series 2.10 left out: no torch release in the matrix matches torch!=2.10.*"
        in err.message
    )
    assert err.exit_code == 1
    assert asked == ["torch>=2.8,<2.11", "torch!=2.10.*,<2.11,>=2.8"]
    assert not (image / "envbuild.lock").exists()


def test_steps_down_a_few_series_at_most(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image, uv, asked = _setup(monkeypatch, tmp_path)
    # Every pin fails the same way: the same series again is not stepped over twice.
    with pytest.raises(UnsatisfiableError) as info:
        lock_use_case.lock_image(image)
    assert "no torchvision 0.25.*" in info.value.message
    assert len(asked) == 2 and len(uv.calls) == 2


def test_a_framework_release_the_requirements_exclude_is_stepped_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """maxtext's numpy<2.2 against jax 0.12.0.1 (which needs numpy>=2.2): uv would take an
    older jax were the framework not fixed first; lock does so one series at a time."""
    image, uv, asked = _setup(monkeypatch, tmp_path)
    conflict = (
        "  x No solution found when resolving dependencies:\n"
        "  `-> Because torch==2.10.0 depends on numpy>=2.2 and you require numpy<2.2, we can "
        "conclude that your requirements are unsatisfiable.\n"
    )
    uv.missing, uv.first = (), conflict
    outcome = lock_use_case.lock_image(image)
    assert asked == ["torch>=2.8,<2.11", "torch!=2.10.*,<2.11,>=2.8"]
    assert any(
        w.startswith("left out torch 2.10: it conflicts with the requirements; locked torch")
        for w in outcome.warnings
    )


def test_a_conflict_that_does_not_name_the_framework_is_not_stepped_over() -> None:
    from envbuild.app.lock_steps import with_step_down

    other = UnsatisfiableError("Because scipy==1.0 depends on numpy<1 and you require numpy>=2")
    assert "step_down" not in with_step_down(other, "torch", "2.10.0").fields
    named = UnsatisfiableError("Because torch==2.10.0 depends on numpy>=2.2 ...")
    assert with_step_down(named, "torch", "2.10.0").fields["step_down"]["series"] == "2.10"


@pytest.mark.parametrize(
    ("requirement", "series", "expected"),
    [
        ("torch", ["2.15"], "torch!=2.15.*"),
        ("torch>=2.8", ["2.15", "2.14"], "torch!=2.14.*,!=2.15.*,>=2.8"),
        ("torch==2.10.*", [], "torch==2.10.*"),
    ],
)
def test_without_series(requirement: str, series: list[str], expected: str) -> None:
    assert without_series(requirement, series) == expected

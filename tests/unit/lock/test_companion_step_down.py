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
    """uv as PyPI answers it: no torchvision for the series `missing` asks for."""

    def __init__(self, missing: tuple[str, ...] = ("torchvision==0.25.*",)) -> None:
        super().__init__()
        self.missing = missing
        self.constraints: list[str] = []

    def __call__(self, argv: Any, cwd: Path, env: Any) -> RunResult:
        c = cwd / "constraints.txt"
        text = c.read_text() if c.exists() else ""
        self.constraints.append(text)
        if any(m in text for m in self.missing):
            self.calls.append(list(argv))
            return RunResult(1, "", NO_TORCHVISION)
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
    uv.missing = ()
    calls = {"n": 0}
    real_call = MissingSeriesUv.__call__

    def first_fails(self: MissingSeriesUv, argv: Any, cwd: Path, env: Any) -> RunResult:
        calls["n"] += 1
        if calls["n"] == 1:
            self.calls.append(list(argv))
            return RunResult(1, "", NO_TORCHVISION)
        return real_call(self, argv, cwd, env)

    monkeypatch.setattr(MissingSeriesUv, "__call__", first_fails)
    outcome = lock_use_case.lock_image(image)
    assert outcome.status == "written"
    assert asked == ["torch>=2.8,<2.11", "torch!=2.10.*,<2.11,>=2.8"]
    assert len(uv.calls) == 2
    said = [w for w in outcome.warnings if "companions" in w]
    assert said == [
        "the companions (torchvision, torchaudio) of torch 2.10 are not on the index yet: "
        "locked torch 2.10.0, the newest whose are; re-lock with --upgrade once they are published"
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

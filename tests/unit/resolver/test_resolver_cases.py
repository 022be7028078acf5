"""Data-driven resolver cases against the shipped matrix: tests/cases/resolve/*.toml.

Each case file holds one case:

    fact = "the published fact it rests on, with its source"
    [request]                # envbuild resolve flags
    framework = "torch==2.6.*"
    gpus = ["RTX 5090"]      # names, sm_XX or compute capabilities
    driver = "570.124.06"    # oldest driver on the targets; absent = unknown
    python = "3.12"          # also: os, cuda, flavour, cpu = true, strict = true
    framework_index = "pypi" # [indexes] framework_index (auto, pypi, index)
    [expect]
    ok = true
    version = "==2.7.*"      # a specifier on the picked release (ok = true)
    variant = "cu128"        # exact variant, or variant_prefix = "cu12"
    relied_on = "minor_compat"
    cuda = ">=12.8"          # a specifier on the build's CUDA
    flavour = "base"
    target_archs = ["sm_120"]
    reasons = ["substring", ...]       # (ok = false) each must appear in some reason
    alternatives = ["substring", ...]  # each must appear in some alternative
    notes = ["substring", ...]         # (ok = true) each must appear in some note
    cudnn = ">=9.10,<9.11"             # a specifier on the planned cuDNN
    cudnn_requirement = "nvidia-cudnn-cu12==9.10.2.21"   # the pin the lock must add
    confidence = "low"                 # the pick's confidence (lowest of its rows)
    error = "substring"                # input refused outright (exit 2): in message or hint
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuild.core.errors import UserError
from envbuild.core.models import Stack, Unsatisfiable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomlkit as tomllib

CASES = sorted((Path(__file__).parent.parent.parent / "cases" / "resolve").glob("*.toml"))


REQUEST_KEYS = {"framework", "gpus", "driver", "python", "os", "cuda", "flavour", "cpu", "strict"}
REQUEST_KEYS |= {"platform", "framework_index"}
EXPECT_KEYS = {
    "ok",
    "version",
    "variant",
    "variant_prefix",
    "relied_on",
    "cuda",
    "flavour",
    "os",
    "python",
    "target_archs",
    "reasons",
    "alternatives",
    "notes",
    "cudnn",
    "cudnn_requirement",
    "confidence",
    "error",
}


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    return data


def test_there_are_cases_and_each_cites_its_fact() -> None:
    assert len(CASES) >= 12
    for path in CASES:
        case = _load(path)
        assert set(case) == {"fact", "request", "expect"}, path.name
        assert len(case["fact"]) > 20, f"{path.name}: cite the source of the fact"
        assert set(case["request"]) <= REQUEST_KEYS, path.name
        assert set(case["expect"]) <= EXPECT_KEYS, path.name
        assert isinstance(case["expect"]["ok"], bool), path.name


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path) -> None:
    from envbuild.resolver import result_to_text

    case = _load(path)
    rq, ex = case["request"], case["expect"]
    if "error" in ex:
        # Input the matrix refuses outright (exit 2): the message names the problem.
        with pytest.raises(UserError) as caught:
            _resolve(rq)
        assert ex["error"] in caught.value.message + " " + caught.value.hint
        return
    result = _resolve(rq)
    shown = "\n".join(result_to_text(result))
    _check_expectations(ex, result, shown)


def _resolve(rq: dict[str, Any]) -> Stack | Unsatisfiable:
    from envbuild.app import resolve as resolve_use_case

    return resolve_use_case.resolve(
        framework=rq.get("framework", "torch"),
        gpus=tuple(rq.get("gpus", ())),
        driver=rq.get("driver"),
        python=rq.get("python"),
        os_name=rq.get("os"),
        cuda=rq.get("cuda"),
        flavour=rq.get("flavour", "auto"),
        cpu=rq.get("cpu", False),
        strict_compat=rq.get("strict", False),
        platform=rq.get("platform", "x86_64"),
        framework_index=rq.get("framework_index", "auto"),
    )


def _check_expectations(ex: dict[str, Any], result: Stack | Unsatisfiable, shown: str) -> None:
    if not ex["ok"]:
        assert isinstance(result, Unsatisfiable), f"expected nothing to fit, got:\n{shown}"
        for want in ex.get("reasons", ()):
            assert any(want in r for r in result.reasons), f"{want!r} not in:\n{shown}"
        for want in ex.get("alternatives", ()):
            assert any(want in a for a in result.alternatives), f"{want!r} not in:\n{shown}"
        return
    assert isinstance(result, Stack), f"expected a stack, got:\n{shown}"
    s = result
    if "version" in ex:
        assert Version(s.framework.version) in SpecifierSet(ex["version"]), shown
    if "variant" in ex:
        assert s.framework.variant == ex["variant"], shown
    if "variant_prefix" in ex:
        assert s.framework.variant.startswith(ex["variant_prefix"]), shown
    if "relied_on" in ex:
        assert s.floors is not None and s.floors.relied_on == ex["relied_on"], shown
    if "cuda" in ex:
        assert s.cuda is not None and Version(s.cuda) in SpecifierSet(ex["cuda"]), shown
    for key in ("flavour", "os", "python"):
        if key in ex:
            assert getattr(s, key) == ex[key], shown
    if "target_archs" in ex:
        assert list(s.target_archs) == ex["target_archs"], shown
    for want in ex.get("notes", ()):
        assert any(want in n for n in s.notes), f"{want!r} not in:\n{shown}"
    if "cudnn" in ex:
        assert s.cudnn is not None and Version(s.cudnn) in SpecifierSet(ex["cudnn"]), shown
    if "cudnn_requirement" in ex:
        assert s.cudnn_requirement == ex["cudnn_requirement"], shown
    if "confidence" in ex:
        assert s.confidence == ex["confidence"], shown


# --- properties over the shipped matrix -------------------------------------------------------

DRIVERS = [None, "470.82.01", "525.60.13", "535.104.05", "550.54.15", "560.35.05"]
DRIVERS += ["570.124.06", "575.57.08", "580.65.06", "590.48.01"]


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.lists(
        st.sampled_from(["V100", "T4", "A100", "A10", "L4", "H100", "B200", "RTX 5090", "GB10"]),
        max_size=3,
    ),
    driver=st.sampled_from(DRIVERS),
    framework=st.sampled_from(["torch", "torch>=2.9", "torch==2.4.*", "tensorflow", "jax"]),
    strict=st.booleans(),
)
def test_every_stack_runs_on_every_target(
    gpus: list[str], driver: str | None, framework: str, strict: bool
) -> None:
    from envbuild.app import resolve as resolve_use_case
    from envbuild.cuda.archs import coverage
    from envbuild.matrix import load_matrix
    from envbuild.resolver import parse_gpu

    m = load_matrix()
    # GB10 (DGX Spark) comes only in Arm hosts: its images are aarch64 ones.
    platform = "aarch64" if "GB10" in gpus else "x86_64"
    result = resolve_use_case.resolve(
        framework=framework,
        gpus=gpus,
        driver=driver,
        strict_compat=strict,
        matrix=m,
        platform=platform,
    )
    if isinstance(result, Unsatisfiable):
        assert result.reasons and all(result.reasons)
        return
    assert result.floors is not None and result.cuda is not None
    for name in gpus:
        cc = parse_gpu(m, name).cc
        how, _ = coverage(result.archs, cc)
        assert how is not None, (name, result.archs)
        if how == "ptx" or strict:
            assert result.floors.relied_on == "toolkit"
    if driver:
        assert Version(driver) >= Version(result.floors.effective)
        if Version(result.cuda) >= Version("13"):
            assert Version(driver) >= Version("580")  # CUDA Compatibility guide: 13.x >= 580
    assert result.base_image.require_cuda.startswith(f"cuda>={result.cuda.split('.')[0]}.")

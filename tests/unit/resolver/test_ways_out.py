"""Every way out the resolver prints fits: each alternative of every case in
tests/cases/resolve/ is applied to the case's request and resolved again; a CPU request is never
told to pick a CUDA range; and the index policy (`[indexes] framework_index`, the lock's
unreachable indexes) picks what the matrix rows say installs from where."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from envbuild.core.models import Stack, Unsatisfiable
from tests.unit.resolver.test_resolver_cases import CASES, _load, _resolve

# A CUDA range offered as a way out: `--cuda '>=12.6'`, `cuda = "==13.0.*"`.
CUDA_RANGE = re.compile(r"""(--cuda|cuda =)\s*['"]?[<>=~!]""")


def _unsatisfiable_cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in CASES:
        case = _load(path)
        if not case["expect"]["ok"] and "error" not in case["expect"]:
            out.append((path.stem, case["request"]))
    return out


UNSAT = _unsatisfiable_cases()


def _without_gpu(rq: dict[str, Any], label: str) -> dict[str, Any]:
    """The request without the GPUs of `label` ("V100 (sm_70)", "sm_70", "A100 / A800 (sm_80)")."""
    from envbuild.matrix import load_matrix
    from envbuild.resolver import parse_gpu

    m = load_matrix()
    sm = re.search(r"\((sm_\w+)\)", label)
    arch = sm.group(1) if sm else label.strip()
    rest = [g for g in rq.get("gpus", ()) if parse_gpu(m, g).sm != arch]
    assert len(rest) < len(rq.get("gpus", ())), f"{label!r} names no GPU of {rq}"
    return {**rq, "gpus": rest}


def apply(rq: dict[str, Any], way: str) -> dict[str, Any] | None:
    """The case's request with one way out applied; None for one that changes no request
    field (another GPU model altogether)."""
    if way.startswith("another GPU:"):
        return None
    if m := re.search(r"--framework '([^']+)'", way):
        return {**rq, "framework": m.group(1)}
    if m := re.search(r"with --driver (\S+) ", way):
        return {**rq, "driver": m.group(1)}
    if m := re.match(r"a newer driver: >= (\S+) ", way):
        return {**rq, "driver": m.group(1)}
    if m := re.match(r"drop (.+?) from this image", way):
        return _without_gpu(rq, m.group(1))
    if way.startswith("allow minor-version compatibility"):
        return {**rq, "strict": False}
    if way.startswith("allow the framework's own index"):
        return {**rq, "framework_index": "auto"}
    if way.startswith("drop the extra in --framework"):
        return {**rq, "framework": re.sub(r"\[[^\]]*\]", "", rq.get("framework", "torch"))}
    if m := re.match(r"--python (3\.\d+): ", way):
        return {**rq, "python": m.group(1)}
    if m := re.match(r"drop --(python|os|cuda|flavour):", way):
        return {k: v for k, v in rq.items() if k != m.group(1)}
    raise AssertionError(f"a way out this test cannot apply (teach it, or reword it): {way!r}")


@pytest.mark.parametrize(("name", "rq"), UNSAT, ids=[n for n, _ in UNSAT])
def test_every_way_out_fits(name: str, rq: dict[str, Any]) -> None:
    result = _resolve(rq)
    assert isinstance(result, Unsatisfiable), name
    for way in result.alternatives:
        changed = apply(rq, way)
        if changed is None:
            continue
        again = _resolve(changed)
        assert isinstance(again, Stack), f"{name}: {way!r} does not fit:\n{again}"
        named = re.search(r"(\d+\.\d+\.\d+\S*) (\S+) \(CUDA", way)
        if named and "the newest" not in way:
            # The stack the way out names is the one it gives.
            assert (again.framework.version, again.framework.variant) == named.groups(), way


def test_there_are_ways_out_to_check() -> None:
    ways = [w for _, rq in UNSAT for w in _resolve(rq).alternatives]  # type: ignore[union-attr]
    assert len(UNSAT) >= 10 and len(ways) >= 20


CPU_CASES = [(n, rq) for n, rq in UNSAT if rq.get("cpu")]


@pytest.mark.parametrize(("name", "rq"), CPU_CASES, ids=[n for n, _ in CPU_CASES])
def test_a_cpu_request_is_never_told_a_cuda_range(name: str, rq: dict[str, Any]) -> None:
    result = _resolve(rq)
    assert isinstance(result, Unsatisfiable)
    for line in (*result.reasons, *result.alternatives):
        assert not CUDA_RANGE.search(line), f"{name}: {line!r}"


def test_there_are_cpu_cases() -> None:
    assert CPU_CASES, "tests/cases/resolve/ should hold an unsatisfiable CPU request"


# --- what the lock finds unreachable ----------------------------------------------------------

PYTORCH_INDEXES = frozenset(
    f"https://download.pytorch.org/whl/{v}" for v in ("cu118", "cu126", "cu128", "cu129", "cu130")
)


def _request(**flags: Any) -> Any:
    from envbuild.request.parse import request_from_flags

    return request_from_flags(**flags)


@pytest.mark.parametrize(
    ("gone", "version", "variant"),
    [
        # matrix/torch.toml: ==2.14.* cu126 installs from download.pytorch.org/whl/cu126 and
        # is the best fit on 570 (RELEASE.md copies); ==2.11.* cu128 from whl/cu128 is the next
        # (same source); ==2.10.* cu128 is PyPI's default (measured PyPI wheel torch==2.10.0).
        (frozenset(), "2.14.1", "cu126"),
        (frozenset({"https://download.pytorch.org/whl/cu126"}), "2.11.0", "cu128"),
        (PYTORCH_INDEXES, "2.10.0", "cu128"),
    ],
)
def test_unreachable_indexes_leave_their_builds_out(
    gone: frozenset[str], version: str, variant: str
) -> None:
    from envbuild import resolver
    from envbuild.matrix import load_matrix

    req = _request(gpus=("H100", "L4"), driver="570.124.06")
    stack = resolver.resolve(req, load_matrix(), unreachable=gone)
    assert isinstance(stack, Stack)
    assert (stack.framework.version, stack.framework.variant) == (version, variant)
    assert stack.framework.index_url not in gone


def test_framework_index_index_ignores_what_does_not_answer() -> None:
    # "index": the best build, its own index required (the lock then fails, no fallback).
    from envbuild import resolver
    from envbuild.matrix import load_matrix

    req = _request(gpus=("H100", "L4"), driver="570.124.06", framework_index="index")
    stack = resolver.resolve(req, load_matrix(), unreachable=PYTORCH_INDEXES)
    assert isinstance(stack, Stack) and stack.framework.variant == "cu126"


def test_a_cpu_request_with_its_index_down_names_no_cuda_build() -> None:
    # matrix/torch.toml: the x86_64 cpu build installs from download.pytorch.org/whl/cpu only.
    from envbuild import resolver
    from envbuild.matrix import load_matrix

    req = _request(cpu=True)
    gone = frozenset({"https://download.pytorch.org/whl/cpu"})
    result = resolver.resolve(req, load_matrix(), unreachable=gone)
    assert isinstance(result, Unsatisfiable)
    assert result.reasons[0] == (
        "torch builds from https://download.pytorch.org/whl/cpu are left out: it does not answer"
    )
    assert result.alternatives == (
        "once https://download.pytorch.org/whl/cpu answers: torch 2.15.0 cpu fits, from it",
    )
    assert not any(CUDA_RANGE.search(a) for a in result.alternatives)


def test_the_resolve_flag_and_the_request_key_agree(tmp_path: Path) -> None:
    from envbuild.request.parse import load_request

    (tmp_path / "envbuild.toml").write_text(
        '[framework]\nrequirement = "torch"\n[indexes]\nframework_index = "pypi"\n'
    )
    assert load_request(tmp_path).indexes == _request(framework_index="pypi").indexes


# --- the same ways out, in an envbuild.toml's words (what `envbuild lock` prints) --------------


def _case_request(rq: dict[str, Any]) -> Any:
    """A case's request as `envbuild resolve` builds it from its flags."""
    from envbuild.request.parse import request_from_flags

    return request_from_flags(
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


def _formatter(flag: str) -> Any:
    return lambda m: flag.format(m.group(1))


def _as_flags(way: str) -> str:
    """A way out in the request's words, put back into `envbuild resolve`'s (explain.WORDS)."""
    from envbuild.resolver.explain import WORDS

    for change, key in sorted(WORDS["keys"].items(), key=lambda kv: -len(kv[1])):
        flag = WORDS["flags"][change]
        if "{}" in key:
            head, tail = key.split("{}")
            pattern = re.escape(head) + r"(.+?)" + re.escape(tail)
            way = re.sub(pattern, _formatter(flag), way)
        else:
            way = way.replace(key, flag)
    return way


@pytest.mark.parametrize(("name", "rq"), UNSAT, ids=[n for n, _ in UNSAT])
def test_the_lock_is_told_the_same_ways_out_in_its_own_words(name: str, rq: dict[str, Any]) -> None:
    """axolotl, locked for A100 + L4 on driver 535, was told `--framework 'torch==2.10.*'`, a
    flag `envbuild lock` does not take (exit 2, no such option)."""
    from envbuild import resolver
    from envbuild.matrix import load_matrix

    request = _case_request(rq)
    flags = resolver.resolve(request, load_matrix())
    keys = resolver.resolve(request, load_matrix(), words="keys")
    assert isinstance(flags, Unsatisfiable) and isinstance(keys, Unsatisfiable)
    assert keys.reasons == flags.reasons
    for way in keys.alternatives:
        assert not re.search(r"(^|[ (])--[a-z]", way), f"{name}: a flag in {way!r}"
    assert [_as_flags(w) for w in keys.alternatives] == list(flags.alternatives)


def test_the_lock_words_are_exercised() -> None:
    from envbuild import resolver
    from envbuild.matrix import load_matrix

    ways = []
    for _, rq in UNSAT:
        result = resolver.resolve(_case_request(rq), load_matrix(), words="keys")
        ways += list(getattr(result, "alternatives", ()))
    said = " ".join(ways)
    assert '[framework] requirement = "' in said and '[image] python = "' in said

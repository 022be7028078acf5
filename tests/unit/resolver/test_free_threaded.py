"""Free-threaded Python ("3.14t") as a Python spec: the request takes it, the matrix records
which releases publish its wheels, the resolver refuses with ways out that resolve
(docs/request.md, "Python")."""

from __future__ import annotations

import dataclasses
import re

import pytest
from packaging.specifiers import SpecifierSet

from envbuild.core.errors import RequestError, UserError
from envbuild.core.models import Stack, Unsatisfiable, free_threaded_minor
from envbuild.core.resources import matrix_dir
from envbuild.matrix import FrameworkRelease, check_files, load_matrix, read_matrix_files
from envbuild.request.parse import check_request, parse_request, request_from_flags
from envbuild.resolver import resolve


def test_the_request_file_takes_a_free_threaded_python_and_refuses_other_suffixes() -> None:
    text = '[image]\npython = "3.14t"\n[framework]\nrequirement = "torch==2.9.*"\n'
    request = parse_request(text.encode(), path="images/x/envbuild.toml", default_name="x")
    assert check_request(request).python == "3.14t"
    with pytest.raises(RequestError, match=re.escape("3.14t for a free-threaded build")):
        parse_request(text.replace("3.14t", "3.14d").encode(), path="p", default_name="x")


@pytest.mark.parametrize(("spec", "minor"), [("3.14t", "3.14"), ("3.13t", "3.13"), ("3.14", None)])
def test_free_threaded_minor(spec: str, minor: str | None) -> None:
    assert free_threaded_minor(spec) == minor


def test_every_torch_release_with_cp314t_wheels_resolves_with_a_managed_python() -> None:
    matrix = load_matrix()
    with_wheels = [
        r.version for r in matrix.releases_of("torch") if r.free_threaded and "3.14" in _minors(r)
    ]
    assert with_wheels[0] == "2.9.0" and "2.15.0" in with_wheels
    request = request_from_flags(framework="torch==2.9.*", python="3.14t", gpus=("H100",))
    answer = resolve(request, matrix)
    assert isinstance(answer, Stack) and answer.python == "3.14t"
    assert answer.managed_python is not None and answer.managed_python.free_threaded
    assert "python_build:3.14t:x86_64" in answer.rows


def test_without_a_managed_build_the_refusal_says_so_and_its_ways_out_resolve() -> None:
    matrix = dataclasses.replace(load_matrix(), python_builds=())
    request = request_from_flags(framework="torch==2.9.*", python="3.14t", gpus=("H100",))
    answer = resolve(request, matrix)
    assert isinstance(answer, Unsatisfiable)
    assert any("cp314t wheels exist" in r for r in answer.reasons)
    assert any("no managed build of it for x86_64" in r for r in answer.reasons)
    for way_out in answer.alternatives[:4]:
        python = way_out.split()[1].rstrip(":")
        again = resolve(dataclasses.replace(request, python=python), matrix)
        assert isinstance(again, Stack) and again.python == python, way_out


def _minors(release: FrameworkRelease) -> set[str]:
    spec = SpecifierSet(release.free_threaded or "")
    return {m for m in ("3.13", "3.14", "3.15") if spec.contains(m)}


def test_a_malformed_free_threaded_range_is_a_matrix_problem() -> None:
    files = read_matrix_files(matrix_dir(), label="matrix")
    name = next(n for n in files if n.endswith("torch.toml"))
    files[name] = files[name].replace('free_threaded = "==3.14.*"', 'free_threaded = "3.14t"', 1)
    report = check_files(files)
    assert any("free_threaded '3.14t' is not a version range" in p for p in report.problems)


def test_an_os_that_is_asked_for_and_ships_no_free_threaded_python_is_refused() -> None:
    request = request_from_flags(python="3.13t", os_name="debian13")
    with pytest.raises(UserError, match=re.escape("debian13 ships Python 3.13, not 3.13t")) as err:
        resolve(request, load_matrix())
    assert "drop --os to get a managed Python 3.13t" in err.value.hint


def test_the_stack_says_where_a_managed_python_comes_from() -> None:
    from envbuild.resolver.output import result_to_json, result_to_text

    request = request_from_flags(framework="torch==2.9.*", python="3.14t", gpus=("H100",))
    stack = resolve(request, load_matrix())
    assert isinstance(stack, Stack) and stack.managed_python is not None
    line = next(x for x in result_to_text(stack) if x.strip().startswith("python:"))
    assert line.endswith(
        f"3.14t on {stack.os}: managed, python-build-standalone {stack.managed_python.release} "
        f"(CPython {stack.managed_python.version}) via the lock's uv"
    )
    managed = result_to_json(stack)["stack"]["managed_python"]
    assert managed["uv_key"] == "cpython-3.14.7+freethreaded-linux-x86_64-gnu"
    assert len(managed["sha256"]) == 64 and managed["bootstrap_python"] == "3.12"
    plain = resolve(request_from_flags(framework="torch==2.9.*", gpus=("H100",)), load_matrix())
    assert isinstance(plain, Stack) and "managed_python" not in result_to_json(plain)["stack"]

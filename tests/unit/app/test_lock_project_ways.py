"""The ways out of a lock that fails with and without the project's framework range: each
"another version" is checked against that range (envbuild.app.lock_project.within_project)."""

from __future__ import annotations

from envbuild.app.lock_project import within_project
from envbuild.core.errors import UnsatisfiableError
from envbuild.lock.projectdeps import ProjectInputs
from envbuild.lock.projectread import Line
from envbuild.request.parse import request_from_flags

PROJECT = ProjectInputs(requirements=(Line("torch>=2.11.0,<=2.12.1", "pyproject.toml"),))
WAYS = [
    "another torch version: torch 2.10.0 cu128 (CUDA 12.8.1) fits ([framework] requirement = "
    '"torch==2.10.*")',
    "another torch version: torch 2.12.1 cu130 (CUDA 13.0.2) fits ([framework] requirement = "
    '"torch==2.12.*")',
    "a newer driver: >= 580.65.06 on every target host would allow torch 2.12.1 cu130 (CUDA 13.0.2)",
]


def _err(ways: list[str]) -> UnsatisfiableError:
    return UnsatisfiableError(
        "nothing in the matrix fits the request:\n  torch 2.12.1: needs driver >= 580",
        hint="try: " + "; or ".join(ways),
        fields={"reasons": ["torch 2.12.1: needs driver >= 580"], "alternatives": ways},
    )


def test_a_version_outside_the_projects_range_is_offered_only_with_it_widened() -> None:
    """axolotl (torch>=2.11.0,<=2.12.1) on driver 535 was told torch 2.10.0 fits; written as
    told, the lock failed again: no torch release matches <=2.12.1,==2.10.*,>=2.11.0."""
    request = request_from_flags(framework="torch>=2.11,<=2.12.1", driver="535.104.05")
    out = within_project(_err(WAYS), request, PROJECT)
    assert out.fields["alternatives"] == [
        WAYS[0] + ", outside the project's range (pyproject.toml: torch>=2.11.0,<=2.12.1): "
        "widen that too",
        WAYS[1],
        WAYS[2],
    ]
    assert out.hint == "try: " + "; or ".join(out.fields["alternatives"])
    assert out.message == _err(WAYS).message


def test_ways_inside_the_range_are_left_as_they_are() -> None:
    err = _err(WAYS[1:])
    request = request_from_flags(framework="torch", driver="535.104.05")
    assert within_project(err, request, PROJECT) is err

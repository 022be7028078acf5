"""Which projects take their version from git (`project.vcs_backend`), and which versions may go
into a Dockerfile line (`project.checked_version`). Sources: setuptools-scm's and hatch-vcs's
own usage docs (https://setuptools-scm.readthedocs.io/en/latest/usage/,
https://github.com/ofek/hatch-vcs#usage); PEP 621 ("version" static or listed in dynamic)."""

from __future__ import annotations

from typing import Any

import pytest

from envbuild.core.errors import UserError
from envbuild.request.project import VERSION_ARG, checked_version, vcs_backend

SCM_BUILD = {"requires": ["setuptools>=64", "setuptools-scm>=8"]}


@pytest.mark.parametrize(
    ("pyproject", "backend"),
    [
        # setuptools-scm's documented pyproject.toml.
        (
            {"build-system": SCM_BUILD, "project": {"name": "x", "dynamic": ["version"]}},
            "setuptools-scm",
        ),
        # The older spelling with the toml extra, and an underscore: the same name (PEP 503).
        ({"build-system": {"requires": ["setuptools_scm[toml]>=6.2"]}}, "setuptools-scm"),
        # hatch-vcs: hatchling plus the plugin, active as [tool.hatch.version] source = "vcs".
        (
            {
                "build-system": {"requires": ["hatchling", "hatch-vcs"]},
                "project": {"name": "x", "dynamic": ["version"]},
                "tool": {"hatch": {"version": {"source": "vcs"}}},
            },
            "hatch-vcs",
        ),
        (
            {
                "build-system": {"requires": ["hatchling", "hatch-vcs"]},
                "tool": {"hatch": {"version": {"path": "src/x/__about__.py"}}},
            },
            "",
        ),
        ({"build-system": {"requires": ["hatchling", "hatch-vcs"]}}, ""),
        # setuptools-scm required, but the version is setuptools' own from a file (seen in a
        # public project: [tool.setuptools.dynamic] version = {file = "VERSION"}).
        (
            {
                "build-system": SCM_BUILD,
                "tool": {"setuptools": {"dynamic": {"version": {"file": "VERSION"}}}},
            },
            "",
        ),
        # A version written down: nothing to read from git, whatever the build needs.
        ({"build-system": SCM_BUILD, "project": {"name": "x", "version": "1.0"}}, ""),
        ({"build-system": {"requires": ["setuptools>=61"]}, "project": {"name": "x"}}, ""),
        ({"project": {"name": "x"}}, ""),
        ({}, ""),
        # Not requirements: left to the build, which says what is wrong.
        ({"build-system": {"requires": ["setuptools-scm>>>"]}}, ""),
        ({"build-system": {"requires": "setuptools-scm"}}, ""),
        ({"build-system": "setuptools-scm"}, ""),
    ],
)
def test_the_backend_that_reads_the_version_from_git(
    pyproject: dict[str, Any], backend: str
) -> None:
    assert vcs_backend(pyproject) == backend


@pytest.mark.parametrize(
    "version", ["1.2.3", "1.2.4.dev0+g0c116f88f.d20261204", "2!1.0rc1", "0.1.dev3+gabc_1"]
)
def test_setuptools_scm_versions_go_into_the_dockerfile(version: str) -> None:
    assert checked_version(version, "setuptools-scm 10.3.4") == version


@pytest.mark.parametrize(
    "version", ["", "1.2.3\nRUN rm -rf /", "$(id)", "1.0 beta", "v1.2.3`x`", "main"]
)
def test_anything_else_is_refused_with_the_way_out(version: str) -> None:
    with pytest.raises(UserError) as err:
        checked_version(version, VERSION_ARG)
    assert err.value.exit_code == 2
    assert VERSION_ARG in (err.value.hint or "")

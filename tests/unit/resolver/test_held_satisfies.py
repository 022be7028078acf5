"""envbuild/core/versions.py `held_satisfies`: the one rule by which a framework base's installed
build (probed or from an NGC row) meets a requirement's range, for the framework
(framework_base.py) and for the request's other packages (app/base_extras.py) alike."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuild.core.versions import held_satisfies

CASES = [
    # NGC 25.12's torch (matrix/ngc.toml) is a pre-release of 2.10.0 with a local label.
    ("2.10.0a0+b4e4ee81d3", "==2.10.*", True),
    ("2.10.0a0+b4e4ee81d3", ">=2.10", True),
    ("2.10.0a0+b4e4ee81d3", "<2.10", False),
    ("2.10.0a0+b4e4ee81d3", "==2.9.*", False),
    ("2.11.0+cu130", "==2.11.0", True),
    ("2.11.0+cu130", "==2.11.0+cu130", True),
    ("2.11.0+cu130", "!=2.11.0", False),
    ("1.26.4", ">=2", False),
    ("2.0.0rc1", ">=2.0.0rc1", True),
]


@pytest.mark.parametrize(("held", "spec", "expected"), CASES)
def test_held_build_against_a_range(held: str, spec: str, expected: bool) -> None:
    assert held_satisfies(Version(held), SpecifierSet(spec)) is expected

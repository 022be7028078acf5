"""A setup.py read without running it (envbuild.request.setuptools_static): odd code is a typed
answer, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.core.errors import RequestError
from envbuild.request.setuptools_static import read_setup_py


def test_a_literal_that_cannot_be_built_is_unreadable(tmp_path: Path) -> None:
    # ast.literal_eval raises TypeError for an unhashable key; it escaped as exit 70.
    path = tmp_path / "setup.py"
    path.write_text('setup(name="x", extras_require={["gpu"]: ["cupy"]}, install_requires={[1]})\n')
    setup = read_setup_py(path, "setup.py")
    assert setup.name == "x"
    assert set(setup.unreadable) == {"extras_require", "install_requires"}


@pytest.mark.parametrize(
    "body",
    [
        "setup(install_requires=" + "-" * 200_000 + "1)",  # MemoryError in the parser
        "setup(install_requires=a" + ".b" * 100_000 + ")",  # RecursionError in the parser
    ],
)
def test_nesting_deeper_than_the_parser_takes_is_refused(tmp_path: Path, body: str) -> None:
    path = tmp_path / "setup.py"
    path.write_text(body)
    with pytest.raises(RequestError, match=r"setup\.py cannot be parsed"):
        read_setup_py(path, "setup.py")


def _read(tmp_path: Path, body: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    path = tmp_path / "setup.py"
    path.write_text(body)
    setup = read_setup_py(path, "setup.py")
    return setup.install_requires, setup.unreadable


def test_a_name_bound_once_to_a_literal_is_read(tmp_path: Path) -> None:
    """llm-foundry's shape: the list is a top-level name, setup() gets the name."""
    body = (
        "from setuptools import setup\n"
        "install_requires = [\n    'numpy>=1.26',  # a comment\n    'tqdm',\n]\n"
        "reqs: list[str] = ['a']\n"
        "setup(name='x', install_requires=install_requires)\n"
    )
    assert _read(tmp_path, body) == (("numpy>=1.26", "tqdm"), ())


@pytest.mark.parametrize(
    "change",
    [
        "install_requires.append('b')",  # a method called on it
        "install_requires += ['b']",  # augmented assignment
        "install_requires = ['b']",  # bound twice
        "install_requires[0] = 'b'",  # an item stored
        "del install_requires[0]",
        "for install_requires in [['b']]: pass",  # a loop target
        "def f():\n    global install_requires\n    install_requires = ['b']\nf()",
        "if True:\n    install_requires = ['b']",  # bound again below the top level
    ],
)
def test_a_name_changed_anywhere_is_unreadable(tmp_path: Path, change: str) -> None:
    """What setup() gets is what setup.py computes: any change to the name, anywhere, and
    envbuild does not guess."""
    body = f"install_requires = ['a']\n{change}\nsetup(install_requires=install_requires)\n"
    assert _read(tmp_path, body) == ((), ("install_requires",))


def test_a_name_bound_to_an_expression_is_unreadable(tmp_path: Path) -> None:
    body = (
        "base = ['a']\ninstall_requires = base + ['b']\nsetup(install_requires=install_requires)\n"
    )
    assert _read(tmp_path, body) == ((), ("install_requires",))


def test_extras_built_by_code_are_unreadable_but_the_rest_is_read(tmp_path: Path) -> None:
    body = (
        "install_requires = ['a']\nextra_deps = {}\nextra_deps['dev'] = ['pytest']\n"
        "setup(install_requires=install_requires, extras_require=extra_deps)\n"
    )
    assert _read(tmp_path, body) == (("a",), ("extras_require",))

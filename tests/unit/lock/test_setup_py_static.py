"""A setup.py read without running it (envbuild.lock.setuptools_static): odd code is a typed
answer, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.core.errors import RequestError
from envbuild.lock.setuptools_static import read_setup_py


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

"""uv's warnings about what it locked are said again by `lock` (envbuild.lock.pins.uv_warnings):
without them, `transformer-engine[pytorch]` locked PyPI's 0.0.0 placeholder in silence."""

from __future__ import annotations

from envbuild.lock.pins import uv_argv, uv_warnings

STDERR = """\
warning: A managed Python download is available for Python 3.12, but an error occurred.
warning: The requested Python version 3.12 is not available; 3.11.7 will be used to build dependencies instead.
Resolved 12 packages in 301ms
warning: The package `transformer-engine==0.0.0` does not have an extra named `pytorch`
warning: The package `transformer-engine==0.0.0` does not have an extra named `pytorch`
warning: `foo==1.0` is yanked (reason: "broken wheel")
"""


def test_only_warnings_about_the_locked_packages_are_passed_on_once() -> None:
    assert uv_warnings(STDERR) == (
        "uv: The package `transformer-engine==0.0.0` does not have an extra named `pytorch`",
        'uv: `foo==1.0` is yanked (reason: "broken wheel")',
    )
    assert uv_warnings("") == ()


def test_uv_is_not_asked_to_be_quiet() -> None:
    """--quiet would hide the warnings above."""
    from envbuild.lock.pins import PinRequest

    argv = uv_argv(["uv"], PinRequest(requirements=("numpy",), python="3.12"))
    assert "--quiet" not in argv and "-q" not in argv

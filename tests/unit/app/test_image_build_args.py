"""The build arguments `envbuild image` gives the engine: a managed Python's mirror from the
variable uv itself reads (docs/request.md, "Managed Python"), checked before anything runs."""

from __future__ import annotations

import dataclasses

import pytest

from envbuild.app.image import MIRROR_ARG, build_args
from envbuild.core.errors import UserError
from envbuild.core.models import Lock, ManagedPython
from tests.golden import fixtures


def _managed() -> Lock:
    lock = fixtures.cpu_lock()
    managed = ManagedPython(
        version="3.14.7",
        uv_key="cpython-3.14.7-linux-x86_64-gnu",
        release="20260814",
        url="https://github.com/astral-sh/python-build-standalone/releases/download/x.tar.gz",
        sha256="0" * 64,
        bootstrap_python="3.12",
    )
    return dataclasses.replace(lock, stack=dataclasses.replace(lock.stack, managed_python=managed))


@pytest.mark.parametrize(
    "url", ["http://10.0.0.5:8080/pbs", "https://mirror.example/astral-sh/pbs/", "file:///srv/pbs"]
)
def test_a_managed_python_takes_the_mirror_from_the_environment(url: str) -> None:
    assert build_args(_managed(), {MIRROR_ARG: url, "HOME": "/root"}) == {MIRROR_ARG: url}


def test_no_mirror_or_no_managed_python_gives_no_build_arguments() -> None:
    assert build_args(_managed(), {"HOME": "/root"}) == {}
    assert build_args(_managed(), {MIRROR_ARG: ""}) == {}
    # Set for uv elsewhere on this machine: an OS Python downloads nothing, so it is ignored.
    assert build_args(fixtures.cpu_lock(), {MIRROR_ARG: "not a url"}) == {}


@pytest.mark.parametrize(
    "value",
    [
        "mirror.example/pbs",
        "ftp://m.example/pbs",
        "http://m.example/a b",
        'http://m"x',
        "http://$HOME",
    ],
)
def test_a_mirror_that_is_not_a_url_is_a_user_error(value: str) -> None:
    with pytest.raises(UserError) as err:
        build_args(_managed(), {MIRROR_ARG: value})
    assert err.value.exit_code == 2
    assert MIRROR_ARG in err.value.message and f"unset {MIRROR_ARG}" in err.value.hint

"""The uv envbuild runs and the environment `uv pip compile` (or pip) runs in when envbuild
pins: the request's [indexes] are the only package sources, whatever the machine's PIP_* /
UV_* settings say.

Imports only `os`: `envbuild.lock.headstart` finds the same uv and builds the same environment
before the rest of the lock path is imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Settings that would silently add indexes, find-links or constraints to a lock: the request's
# [indexes] are the only sources (a lock made on one machine must match one made on another).
_LEAKY_ENV = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_CONSTRAINT",
    "PIP_REQUIREMENT",
    "PIP_NO_INDEX",
    "PIP_ONLY_BINARY",
    "PIP_NO_BINARY",
    "PIP_PRE",
)


# uv settings that only say how to reach an index, never which: TLS, caches, and credentials
# (https://docs.astral.sh/uv/concepts/authentication/: netrc through NETRC, a keyring, and
# UV_INDEX_<NAME>_USERNAME / _PASSWORD). Credentials never travel in a URL (request.py).
# UV_PYTHON_INSTALL_DIR says where uv's own Pythons are, for `uv python find` (a free-threaded
# lock reads its ABI from one: envbuild.lock.pins.free_threaded_cpython).
_UV_KEPT = (
    "UV_CACHE_DIR",
    "UV_NATIVE_TLS",
    "UV_HTTP_TIMEOUT",
    "UV_KEYRING_PROVIDER",
    "UV_PYTHON_INSTALL_DIR",
)


def _uv_kept(key: str) -> bool:
    return key in _UV_KEPT or (
        key.startswith("UV_INDEX_") and key.endswith(("_USERNAME", "_PASSWORD"))
    )


def isolated_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment for uv/pip: no index settings from the machine; TLS, caches and the
    ways uv and pip take credentials (NETRC, a keyring, UV_INDEX_<NAME>_USERNAME/_PASSWORD)
    are kept."""
    env = {
        k: v
        for k, v in environ.items()
        if k not in _LEAKY_ENV and not (k.startswith("UV_") and not _uv_kept(k))
    }
    env["UV_PYTHON_DOWNLOADS"] = "never"  # uv must not fetch an interpreter to lock for one
    env["PIP_CONFIG_FILE"] = os.devnull  # pip.conf may add indexes/find-links/constraints
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def find_uv(environ: Mapping[str, str], python: str) -> str | None:
    """The uv a lock runs: ENVBUILD_UV, else the one beside `python` (the running
    interpreter's venv: envbuild's dev extra), else the first on PATH (`shutil.which`)."""
    override = environ.get("ENVBUILD_UV")
    if override:
        return override
    beside = os.path.join(os.path.dirname(python), "uv")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    import shutil  # only here: its import would delay the head start's common cases

    return shutil.which("uv", path=environ.get("PATH"))

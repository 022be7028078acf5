"""Suite-wide settings.

Property tests draw new examples on every run, which is what finds bugs on a developer's
machine; a CI gate must not turn red on a draw nobody can replay. `.ci/run` sets
HYPOTHESIS_PROFILE=ci: the same examples every run (derandomized), and a failure prints the blob
that reproduces it (`@reproduce_failure`).
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import settings

# envbuild's user cache (compiled matrix, dataclass code) goes to a folder of this run, not
# the developer's ~/.cache: child processes (CLI tests) inherit it.
os.environ.setdefault("ENVBUILD_CACHE_DIR", tempfile.mkdtemp(prefix="envbuild-test-cache-"))
# uv is not started ahead of `envbuild lock` (envbuild/lock/headstart.py) in tests that fake it: a
# kept command would start the real uv beside the fake. tests/unit/lock/test_headstart.py turns
# it on where it is what is tested.
os.environ.setdefault("ENVBUILD_NO_HEADSTART", "1")
# `envbuild lock` takes every package index to answer instead of asking it
# (envbuild/lock/reach.py): tests fake uv and must not reach the network.
# tests/unit/cli/test_cli_lock.py fakes the probe where the fallback is what is tested.
os.environ.setdefault("ENVBUILD_NO_INDEX_PROBE", "1")

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

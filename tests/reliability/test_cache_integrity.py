"""Caches that cannot hurt: nothing loaded from the user cache runs code, a corrupt file is
a miss (never a wrong value, never a crash), and a remembered wheel hash is used only while
the file holds the bytes it describes (envbuild.core.compiled, envbuild.lock.wheelhashes).

The defects: the compiled matrix was unpickled without restriction (a pickle naming
`os.system` ran it), a flipped byte in it could give a different matrix, and a wheel-hash
record was trusted on the file's `stat` identity alone, even when the file had changed
within one timestamp tick of that identity (git's "racily clean" case) or the record was of
an older format.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envbuild.core import compiled
from envbuild.lock import wheelhashes
from tests.reliability.helpers import REPO, run


class Planted:
    """A value whose pickle calls a function when loaded (what a planted cache file does)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_compiled_value_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    target = tmp_path / "value.pickle"
    compiled.write(target, "k", [Planted(marker)])
    assert target.exists()
    assert compiled.read(target, "k") is None
    assert not marker.exists(), "loading the cache ran code"
    assert not target.exists()  # dropped: the next write replaces it


def _matrix_cache(cache: Path) -> Path:
    (found,) = cache.glob("matrix-*.pickle")
    return found


@pytest.fixture
def cached_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A compiled matrix in a private cache folder, written by a real `envbuild resolve`."""
    import shutil

    from envbuild import matrix as mx
    from envbuild.core.resources import matrix_dir

    folder = tmp_path / "matrix"
    shutil.copytree(matrix_dir(), folder)
    old = time.time() - 3600  # older than the racy window: the matrix may be cached
    for path in folder.glob("*.toml"):
        os.utime(path, (old, old))
    monkeypatch.setenv("ENVBUILD_MATRIX_DIR", str(folder))
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    mx.clear_cache()
    out = run("resolve", "--gpu", "H100", "--driver", "570.124.06", "--json")
    assert out.code == 0, out.text
    mx.clear_cache()
    return _matrix_cache(tmp_path / "cache")


def test_a_planted_global_in_the_compiled_matrix_is_never_called(
    cached_matrix: Path, tmp_path: Path
) -> None:
    import binascii
    import pickle

    from envbuild import matrix as mx

    marker = tmp_path / "ran"
    data = cached_matrix.read_bytes()
    magic, header, _body = data.split(b"\n", 2)
    body = pickle.dumps(Planted(marker))
    meta = json.loads(header)
    meta["crc32"] = binascii.crc32(body)  # a well-formed file: only the global is wrong
    cached_matrix.write_bytes(b"\n".join([magic, json.dumps(meta).encode(), body]))
    cached_matrix.chmod(0o600)
    out = run("resolve", "--gpu", "H100", "--driver", "570.124.06", "--json")
    mx.clear_cache()
    assert out.code == 0, out.text
    assert not marker.exists(), "the compiled matrix ran code"
    assert b"posix" not in _matrix_cache(tmp_path / "cache").read_bytes()  # rebuilt


_FUZZ = r"""
import os, random, sys
from envbuild.core import compiled
from envbuild.matrix.load import _row_types
from envbuild.matrix.rows import Matrix

path, key, seed, cases = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
good = open(path, "rb").read()
want = compiled.read(path, key, allowed=_row_types(), kind=Matrix)
assert want is not None, "the fixture's file did not load"
rng = random.Random(seed)
wrong = hits = 0
for _ in range(cases):
    data = bytearray(good)
    kind = rng.randrange(3)
    at = rng.randrange(len(data))
    if kind == 0:
        data[at] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del data[at:]
    else:
        data[at:at] = os.urandom(rng.randrange(1, 9))
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)
    got = compiled.read(path, key, allowed=_row_types(), kind=Matrix)
    hits += got is not None
    wrong += got is not None and got != want
print("WRONG", wrong, "HITS", hits)
"""


def test_a_corrupt_compiled_matrix_is_a_miss_never_a_wrong_value_or_a_crash(
    cached_matrix: Path,
) -> None:
    # The key the fixture's resolve stored, read back from the file's JSON header.
    header = json.loads(cached_matrix.read_bytes().split(b"\n", 2)[1])
    seed = random.randrange(1 << 30)
    done = subprocess.run(
        [sys.executable, "-c", _FUZZ, str(cached_matrix), header["key"], str(seed), "300"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    # A crash of the interpreter (a signal) would be a negative return code.
    assert done.returncode == 0, (seed, done.stderr[-2000:])
    assert done.stdout.split()[:2] == ["WRONG", "0"], (seed, done.stdout)


# --- wheel hashes -----------------------------------------------------------------------------

WHEEL = "probe-1.0-py3-none-any.whl"


@pytest.fixture
def wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "wheels"
    folder.mkdir()
    path = folder / WHEEL
    path.write_bytes(b"the wheel's bytes")
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stored(path: Path, digest: str, taken_ns: int | None) -> dict[str, wheelhashes.Record]:
    """The record of PATH as the cache file holds it (`taken_ns` None: an older envbuild's
    two-field record)."""
    identity = wheelhashes.file_identity(str(path))
    assert identity is not None
    value: list[object] = [identity, digest] + ([taken_ns] if taken_ns is not None else [])
    cache = Path(os.environ["ENVBUILD_CACHE_DIR"])
    cache.mkdir(parents=True, exist_ok=True)
    (cache / wheelhashes.FILE_NAME).write_text(json.dumps({str(path): value}))
    (cache / wheelhashes.FILE_NAME).chmod(0o600)
    return wheelhashes.load()


def test_a_record_that_is_not_the_files_hash_is_not_trusted_on_a_doubt(wheel: Path) -> None:
    # The identity matches in each case; the digest is of other bytes (the file changed within
    # one timestamp tick of the identity, which keeps every stat field the same).
    wrong = "0" * 64
    assert wheelhashes.known(str(wheel), _stored(wheel, wrong, None)) is None  # older record
    racy = time.time_ns()  # the identity taken right after the file's last change
    assert wheelhashes.known(str(wheel), _stored(wheel, wrong, racy)) is None
    # A record taken well after the file's last change is trusted on its identity alone.
    old_ns = time.time_ns() + 10 * 10**9
    assert wheelhashes.known(str(wheel), _stored(wheel, _sha(wheel), old_ns)) == _sha(wheel)


def test_a_touched_wheel_with_the_same_bytes_keeps_its_hash(wheel: Path) -> None:
    stored = _stored(wheel, _sha(wheel), time.time_ns() + 10 * 10**9)
    os.utime(wheel, ns=(10**18, 10**18))  # another identity (a cheap miss), the same bytes
    assert wheelhashes.known(str(wheel), stored) == _sha(wheel)
    wheel.write_bytes(b"other bytes, same len")  # other bytes: a miss
    assert wheelhashes.known(str(wheel), stored) is None


def test_a_fifo_in_place_of_a_wheel_is_not_read(wheel: Path) -> None:
    stored = _stored(wheel, _sha(wheel), None)
    wheel.unlink()
    os.mkfifo(wheel)
    started = time.monotonic()
    assert wheelhashes.known(str(wheel), stored) is None
    assert time.monotonic() - started < 5

"""Non-regular and oversized files everywhere envbuild reads a path: a FIFO (would block for
ever), a character device (`/dev/zero`: endless bytes), a directory, and a 1 GiB sparse file.
Each is refused before reading, exit 2, naming the file; never a hang, a MemoryError or exit 70.

Each case runs the CLI in a child process with a time limit (`run_child`), so a regression
fails the test instead of hanging the run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability.helpers import REPO, Outcome, assert_clear_error, copy_example
from tests.reliability.hostile import run_child

SPARSE_SIZE = 1 << 30


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _folder(path: Path) -> None:
    path.mkdir()


def _huge(path: Path) -> None:
    with open(path, "wb") as fh:
        fh.truncate(SPARSE_SIZE)  # sparse: no disk space, but a size no reader may load


KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (_fifo, "not a regular file"),
    "device": (_device, "not a regular file"),
    "folder": (_folder, "not a regular file"),
    "huge": (_huge, "larger than"),
}


def _refused(out: Outcome, name: str, says: str) -> None:
    """Exit 2 naming the file: envbuild's own error, or (a folder given for a file option)
    Click's usage error, which refuses it before envbuild runs."""
    if says == "not a regular file" and "is a directory" in out.err and out.code == 2:
        assert name in out.err, out.err
        return
    assert_clear_error(out, 2, names=name)
    assert says in out.err, out.err


def _plant(path: Path, kind: str) -> str:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    make, says = KINDS[kind]
    make(path)
    return says


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("command", ["lock --check", "render", "lock --offline"])
def test_request_file(tmp_path: Path, kind: str, command: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    says = _plant(image / "envbuild.toml", kind)
    out = run_child(*command.split(), str(image))
    _refused(out, "envbuild.toml", says)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("command", ["lock --check", "render", "validate"])
def test_lock_file(tmp_path: Path, kind: str, command: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    says = _plant(image / "envbuild.lock", kind)
    env = {"ENVBUILD_HOST_FACTS": str(REPO / "tests/fixtures/hosts/h200-healthy.json")}
    out = run_child(*command.split(), str(image), env=env)
    _refused(out, "envbuild.lock", says)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_lock_file_when_relocking(tmp_path: Path, kind: str) -> None:
    """`lock` reads the old lock for its picks: a planted file there is refused, not replaced
    (it was not written by envbuild) and not followed."""
    image = copy_example(tmp_path, "torch-cpu")
    says = _plant(image / "envbuild.lock", kind)
    out = run_child("lock", "--offline", str(image))
    _refused(out, "envbuild.lock", says)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_hosts_file(tmp_path: Path, kind: str) -> None:
    hosts = tmp_path / "hosts.jsonl"
    says = _plant(hosts, kind)
    for args, env in (
        (("validate", "--hosts", str(hosts), "--lock", str(REPO / "images/torch-cpu")), None),
        (("resolve", "--hosts", str(hosts)), None),
        (("doctor",), {"ENVBUILD_HOST_FACTS": str(hosts)}),
    ):
        out = run_child(*args, env=env)
        _refused(out, "hosts.jsonl", says)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_matrix_overlay_file(tmp_path: Path, kind: str) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    says = _plant(overlay / "cuda.toml", kind)
    out = run_child("matrix", "check", "--overlay", str(overlay))
    _refused(out, "cuda.toml", says)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ca_cert(tmp_path: Path, kind: str) -> None:
    ca = tmp_path / "proxy-ca.crt"
    says = _plant(ca, kind)
    out = run_child("render", str(REPO / "images/torch-cpu"), "--ca-cert", str(ca))
    _refused(out, "proxy-ca.crt", says)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_smoke_plan(tmp_path: Path, kind: str) -> None:
    plan = tmp_path / "plan.json"
    says = _plant(plan, kind)
    out = run_child("smoke", "--plan", str(plan))
    _refused(out, "plan.json", says)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_user_template(tmp_path: Path, kind: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    says = _plant(image / "Dockerfile.j2", kind)
    out = run_child("render", str(image))
    _refused(out, "Dockerfile.j2", says)


def test_largest_shipped_inputs_are_under_the_caps() -> None:
    """The caps are far above anything real: every shipped request, lock and matrix file reads."""
    for image in sorted((REPO / "images").iterdir()):
        if not (image / "envbuild.toml").is_file():
            continue  # a folder being set up
        out = run_child("lock", "--check", str(image))
        assert "larger than" not in out.err and "regular file" not in out.err, out.text
    out = run_child("matrix", "check")
    assert out.code == 0, out.text

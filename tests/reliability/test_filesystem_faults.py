"""Read-only and full disks for `lock` and `render`, and what a hostile checkout can plant in an
image folder: the lock's temp name or folder-lock file as a directory, the folder-lock file as
a symlink, and `render --context` pointed at a folder that holds more than its own output.

Each fault is one typed error with a next step (exit 3 for a full disk, 2 or 3 for a folder that
cannot be written), never exit 70; nothing is left behind and nothing outside envbuild's own
output is deleted or created. The disks are real where the tests may mount (root: a read-only
bind mount, a 64 KiB tmpfs); the kernel's own ENOSPC also comes from /dev/full everywhere.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.helpers import assert_clear_error, copy_example, run
from tests.reliability.hostile import assert_one_json, fake_uv

# --- disks -------------------------------------------------------------------------------------


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """FOLDER read-only for this process: permission bits for a normal user, a read-only bind
    mount for root (which permission bits do not stop)."""
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(mode)
        return
    done = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount as root here: {done.stderr.decode().strip()}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(folder)], check=True, capture_output=True
        )
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=False, capture_output=True)


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of SIZE mounted at FOLDER (root only; skipped elsewhere)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False, capture_output=True)


def _fill(folder: Path) -> None:
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as fh:
        while True:
            fh.write(b"\0" * 4096)
            fh.flush()


def _writes_hit_a_full_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every temp file envbuild writes gets /dev/full's descriptor: the kernel answers ENOSPC
    on the write, as a full disk would (the temp file itself is real, so cleanup is checked)."""
    real = tempfile.mkstemp

    def mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        fd, name = real(*args, **kwargs)  # type: ignore[call-overload]
        os.close(fd)
        return os.open("/dev/full", os.O_WRONLY), name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def _leftovers(folder: Path) -> list[str]:
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.name.startswith(".") and p.name != "." and not p.name.startswith(".envbuild.lock.lock")
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_render_output_on_a_full_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    _writes_hit_a_full_device(monkeypatch)
    args = ["render", str(image), "-o", str(out_dir / "Dockerfile")] + (
        ["--json"] if as_json else []
    )
    out = run(*args)
    if as_json:
        assert out.code == 3, out.text
        doc = assert_one_json(out)
        assert "space" in doc["message"], doc
    else:
        assert_clear_error(out, 3, names="space")
    assert list(out_dir.iterdir()) == []  # no Dockerfile, no temp file


def test_lock_on_a_full_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = copy_example(tmp_path, "torch-train")
    before = (image / "envbuild.lock").read_bytes()
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )  # the request changed: the lock must be rewritten
    _writes_hit_a_full_device(monkeypatch)
    out = run("lock", "--offline", str(image), env=fake_uv(tmp_path / "uv"))
    assert_clear_error(out, 3, names="space")
    assert (image / "envbuild.lock").read_bytes() == before
    assert _leftovers(image) == []


def _stale_copy(root: Path) -> Path:
    """torch-train copied to ROOT with its request changed: `lock` must rewrite its lock."""
    image = copy_example(root / "stale", "torch-train")
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    return image


def test_render_and_lock_on_a_real_full_disk(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        image = copy_example(disk, "torch-train")
        stale = _stale_copy(disk)
        _fill(disk)
        out = run("render", str(image), "-o", str(image / "Dockerfile"))
        assert_clear_error(out, 3, names="space")
        out = run("render", str(image), "--context", str(disk / "ctx"))
        assert_clear_error(out, 3, names="space")
        out = run("lock", "--offline", str(stale), env=fake_uv(tmp_path / "uv"))
        assert_clear_error(out, 3, names="space")
        for folder in (image, stale, disk):
            assert _leftovers(folder) == []


def test_render_and_lock_in_a_read_only_folder(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-train")
    stale = _stale_copy(tmp_path)
    env = fake_uv(tmp_path / "uv")
    with read_only(image), read_only(stale):
        for args in (
            ("render", str(image), "-o", str(image / "Dockerfile")),
            ("render", str(image), "--context", str(image / "ctx")),
            ("lock", "--offline", str(stale)),
        ):
            out = run(*args, env=env)
            assert_clear_error(out, 2, 3, names=args[-1] if args[0] == "lock" else str(image))
            out = run(*args, "--json", env=env)
            assert out.code in (2, 3), out.text
            assert_one_json(out)


# --- what a hostile checkout can plant -----------------------------------------------------------


def test_lock_is_a_directory(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    (image / "envbuild.lock").unlink()
    (image / "envbuild.lock").mkdir()
    for args in (("lock", "--check", str(image)), ("render", str(image))):
        out = run(*args)
        assert_clear_error(out, 2, names="envbuild.lock")
        out = run(*args, "--json")
        assert out.code == 2, out.text
        assert "envbuild.lock" in json.dumps(assert_one_json(out))


def test_a_directory_at_a_temp_path_is_left_alone(tmp_path: Path) -> None:
    """The lock step removes a dead writer's temp files; a directory with such a name is not
    one of them: it is neither removed nor a crash."""
    image = copy_example(tmp_path, "torch-train")
    planted = image / ".envbuild.lock.planted.tmp"
    planted.mkdir()
    (planted / "keep").write_text("mine")
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    out = run("lock", "--offline", str(image), env=fake_uv(tmp_path / "uv"))
    assert out.code == 0, out.text
    assert (planted / "keep").read_text() == "mine"


def test_folder_lock_file_is_a_directory(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-train")
    (image / ".envbuild.lock.lock").unlink(missing_ok=True)  # a lock run in images/ leaves one
    (image / ".envbuild.lock.lock").mkdir()
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    out = run("lock", "--offline", str(image), env=fake_uv(tmp_path / "uv"))
    assert_clear_error(out, 2, 3, names=".envbuild.lock.lock")


@pytest.mark.parametrize("target_exists", [False, True])
def test_folder_lock_file_is_not_followed(tmp_path: Path, target_exists: bool) -> None:
    """A symlink at `.envbuild.lock.lock` (a hostile checkout) is refused: the lock step, run as
    root, must not create or open files wherever the link points."""
    image = copy_example(tmp_path, "torch-train")
    target = tmp_path / "elsewhere"
    if target_exists:
        target.write_text("not envbuild's")
    (image / ".envbuild.lock.lock").unlink(missing_ok=True)  # a lock run in images/ leaves one
    (image / ".envbuild.lock.lock").symlink_to(target)
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    before = (image / "envbuild.lock").read_bytes()
    out = run("lock", "--offline", str(image), env=fake_uv(tmp_path / "uv"))
    assert_clear_error(out, 2, names=".envbuild.lock.lock")
    assert target.exists() == target_exists
    if target_exists:
        assert target.read_text() == "not envbuild's"
    assert (image / "envbuild.lock").read_bytes() == before


# --- render --context never deletes what it did not write ----------------------------------------


def _wheels(tmp_path: Path) -> Path:
    """An empty wheelhouse: torch-cpu's lock names a local wheel folder, so a context of it
    needs `--find-links` (the files are not needed to write the context)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    return wheels


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_context_into_the_image_folder_is_refused(tmp_path: Path) -> None:
    """The reported case: a rendered Dockerfile beside envbuild.lock looked like an earlier
    context, and the folder (request and all) was replaced."""
    image = copy_example(tmp_path, "torch-cpu")
    wheels = _wheels(tmp_path)
    assert run("render", str(image), "-o", str(image / "Dockerfile")).code == 0
    (image / "notes.txt").write_text("mine")
    before = _files(image)
    out = run("render", str(image), "--context", str(image), "--find-links", str(wheels))
    assert_clear_error(out, 2, names=str(image))
    assert _files(image) == before


@pytest.mark.parametrize("where", ["parent of the image folder", "folder with other files"])
def test_context_into_a_folder_it_did_not_write_is_refused(tmp_path: Path, where: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    if where == "parent of the image folder":
        dest = image.parent
    else:
        dest = tmp_path / "ctx"
        dest.mkdir()
        (dest / "Dockerfile").write_text("FROM scratch\n")
        (dest / "envbuild.lock").write_text("not from envbuild\n")
    before = _files(dest)
    out = run("render", str(image), "--context", str(dest), "--find-links", str(_wheels(tmp_path)))
    assert_clear_error(out, 2, names=str(dest))
    assert _files(dest) == before


def test_context_replaces_its_own_earlier_output(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    dest = tmp_path / "ctx"
    assert (
        run(
            "render", str(image), "--context", str(dest), "--find-links", str(_wheels(tmp_path))
        ).code
        == 0
    )
    first = _files(dest)
    out = run("render", str(image), "--context", str(dest), "--find-links", str(_wheels(tmp_path)))
    assert out.code == 0, out.text
    assert _files(dest) == first
    # Someone added a file to the earlier context: it is no longer only envbuild's output.
    (dest / "notes.txt").write_text("mine")
    out = run("render", str(image), "--context", str(dest), "--find-links", str(_wheels(tmp_path)))
    assert_clear_error(out, 2, names=str(dest))
    assert (dest / "notes.txt").read_text() == "mine"


def test_failed_context_write_leaves_no_debris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    dest = tmp_path / "out" / "ctx"
    dest.parent.mkdir()
    real = Path.write_bytes
    calls = []

    def write_bytes(self: Path, data: bytes) -> int:
        calls.append(self)
        if len(calls) == 3:  # a few files in: the disk fills up
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    out = run("render", str(image), "--context", str(dest), "--find-links", str(_wheels(tmp_path)))
    assert_clear_error(out, 3, names="space")
    assert list(dest.parent.iterdir()) == []  # no .ctx.* left, no half context

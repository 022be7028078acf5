"""A lock that took packages from a local wheel folder: `render --context` and `image` take
that folder as the wheelhouse when it is here with the locked files (and say so), and refuse,
naming the folder, only when it is not; a plain `render` never needs --find-links."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.app import image as image_case
from envbuild.app import inputs
from envbuild.cli.main import cli
from envbuild.core.errors import UserError
from envbuild.core.models import Lock
from envbuild.render.dockerfile import BuildInputs, RenderOptions
from envbuild.render.local_wheels import lock_wheelhouse
from tests.golden import fixtures


def local_lock(source: str) -> tuple[Lock, str]:
    """The GPU fixture with its first package taken from `source`; the wheel's file name."""
    lock = fixtures.gpu_lock()
    first = dataclasses.replace(lock.packages[0], source=source)
    wheel = f"{first.name.replace('-', '_')}-{first.version}-py3-none-any.whl"
    return dataclasses.replace(lock, packages=(first, *lock.packages[1:])), wheel


def test_the_lock_folder_is_the_wheelhouse_when_it_holds_the_wheels(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    folder.mkdir()
    lock, wheel = local_lock(str(folder))
    (folder / wheel).write_bytes(b"wheel")
    options, note = lock_wheelhouse(lock, RenderOptions(), image_dir=tmp_path / "img")
    assert options.find_links == folder
    assert note is not None and note.startswith(f"wheels from {folder}: the local folder")
    # A relative source is the image folder's, as the request wrote it.
    relative, _ = local_lock("wheels")
    options, _ = lock_wheelhouse(relative, RenderOptions(), image_dir=tmp_path)
    assert options.find_links == folder
    # --find-links decides when given; a lock without local sources changes nothing.
    given = RenderOptions(find_links=tmp_path)
    assert lock_wheelhouse(lock, given, image_dir=tmp_path) == (given, None)
    plain = fixtures.gpu_lock()
    assert lock_wheelhouse(plain, RenderOptions(), image_dir=tmp_path) == (RenderOptions(), None)


def test_a_missing_folder_or_wheel_is_refused_naming_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    lock, _ = local_lock(str(folder))
    with pytest.raises(UserError) as err:
        lock_wheelhouse(lock, RenderOptions(), image_dir=tmp_path)
    assert f"local wheel folder {str(folder)!r}, which is not here" in err.value.message
    assert err.value.hint.startswith("pass --find-links DIR")
    folder.mkdir()
    (folder / "other-1.0-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(UserError) as err:
        lock_wheelhouse(lock, RenderOptions(), image_dir=tmp_path)
    first = lock.packages[0]
    assert err.value.message.endswith(f"does not hold {first.name}=={first.version}")
    assert str(folder) in err.value.message
    assert err.value.fields["missing"] == [f"{first.name}=={first.version}"]


@pytest.fixture
def image_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from envbuild.matrix import Matrix

    folder = tmp_path / "img"
    folder.mkdir()
    (folder / "envbuild.lock").write_text("# lock text\n")
    lock, wheel = local_lock("wheels")
    (folder / "wheels").mkdir()
    (folder / "wheels" / wheel).write_bytes(b"wheel")
    monkeypatch.setattr(inputs, "load_fresh_text", lambda d, **_: (None, lock, "# lock text\n"))
    monkeypatch.setattr("envbuild.matrix.load_matrix_from", lambda overlay: Matrix())
    return folder


def test_render_context_takes_the_lock_folder_and_says_so(image_dir: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    result = CliRunner().invoke(cli, ["render", str(image_dir), "--context", str(ctx)])
    assert result.exit_code == 0, result.output
    assert f"wheels from {image_dir / 'wheels'}: the local folder" in result.stderr
    assert [p.name for p in (ctx / "wheels").iterdir()] == [
        p.name for p in (image_dir / "wheels").iterdir()
    ]
    assert "--find-links /tmp/envbuild-wheels" in (ctx / "Dockerfile").read_text()


def test_plain_render_never_needs_find_links(image_dir: Path) -> None:
    for child in (image_dir / "wheels").iterdir():
        child.unlink()
    (image_dir / "wheels").rmdir()
    result = CliRunner().invoke(cli, ["render", str(image_dir)])
    assert result.exit_code == 0, result.output
    assert "FROM " in result.stdout and "wheels from" not in result.stderr
    # The context does need the files: refused, naming the folder.
    refused = CliRunner().invoke(cli, ["render", str(image_dir), "--context", "ctx.tar"])
    assert refused.exit_code == 2
    assert f"'{image_dir / 'wheels'}', which is not here" in refused.stderr


def test_image_takes_the_lock_folder_and_tells_progress(image_dir: Path) -> None:
    seen: list[str] = []
    job, _ = image_case.prepare(
        image_dir=image_dir,
        request=image_case.ImageRequest(),
        build_inputs=BuildInputs(),
        progress=seen.append,
    )
    assert any(name.startswith("wheels/") for name in job.context)
    assert seen and seen[0].startswith(f"wheels from {image_dir / 'wheels'}")

"""The compiled matrix in the user cache (envbuild.core.compiled, envbuild.matrix.load): used
when nothing changed, rebuilt when a matrix file, an overlay or the code that made it changed,
dropped when corrupt, ignored when not the user's."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuild import matrix as mx
from envbuild.core import compiled
from envbuild.core.resources import matrix_dir
from envbuild.matrix import parse

OLD = time.time() - 3600  # older than load.RACY_S: a file this old may be cached


def _age(folder: Path) -> None:
    for path in folder.glob("*.toml"):
        os.utime(path, (OLD, OLD))


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[int]]:
    """A private cache folder and matrix copy; counts how often the matrix is parsed."""
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "matrix"
    shutil.copytree(matrix_dir(), folder)
    _age(folder)
    monkeypatch.setenv("ENVBUILD_MATRIX_DIR", str(folder))
    calls: list[int] = []
    real = parse.collect

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(parse, "collect", counting)
    mx.clear_cache()
    yield calls
    mx.clear_cache()


def _load(overlay: Path | None = None) -> mx.Matrix:
    mx.clear_cache()  # the per-process cache: each call is a new process here
    return mx.load_matrix_from(overlay)


def _h200(matrix: mx.Matrix) -> float:
    return next(b.bf16_tflops for b in matrix.baselines if b.gpu == "H200")


def _set_h200(path: Path, value: str) -> None:
    text = path.read_text()
    assert "bf16_tflops = 753.0" in text
    path.write_text(text.replace("bf16_tflops = 753.0", f"bf16_tflops = {value}", 1))


def test_second_process_reads_the_compiled_matrix(parses: list[int], tmp_path: Path) -> None:
    first = _load()
    second = _load()
    assert len(parses) == 1
    assert second == first
    assert second.fingerprints() == first.fingerprints()
    assert len(list((tmp_path / "cache").glob("matrix-*.pickle"))) == 1


def test_an_edited_matrix_file_is_parsed_again(parses: list[int], tmp_path: Path) -> None:
    assert _h200(_load()) == 753.0
    _set_h200(tmp_path / "matrix" / "baselines.toml", "754.0")  # same size, new mtime
    assert _h200(_load()) == 754.0
    assert len(parses) == 2


def test_a_touched_file_rebuilds(parses: list[int], tmp_path: Path) -> None:
    _load()
    os.utime(tmp_path / "matrix" / "cuda.toml", (OLD + 1, OLD + 1))
    _load()
    _load()
    assert len(parses) == 2  # rebuilt once, then read again


def test_a_file_added_or_removed_rebuilds(parses: list[int], tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    assert _h200(_load(overlay)) == 753.0
    added = overlay / "baselines.toml"
    shutil.copy(tmp_path / "matrix" / "baselines.toml", added)
    _set_h200(added, "700.0")
    _age(overlay)
    assert _h200(_load(overlay)) == 700.0
    added.unlink()
    assert _h200(_load(overlay)) == 753.0
    assert len(parses) == 3


def test_overlay_changes_are_seen(parses: list[int], tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copy(tmp_path / "matrix" / "baselines.toml", overlay / "baselines.toml")
    _set_h200(overlay / "baselines.toml", "700.0")
    _age(overlay)
    assert _h200(_load(overlay)) == 700.0
    assert _h200(_load(overlay)) == 700.0
    assert len(parses) == 1
    text = (overlay / "baselines.toml").read_text().replace("700.0", "701.0")
    (overlay / "baselines.toml").write_text(text)
    assert _h200(_load(overlay)) == 701.0
    assert _h200(_load()) == 753.0  # the built-in matrix alone is its own entry
    assert len(parses) == 3


def test_a_file_changed_just_now_is_not_stored(parses: list[int], tmp_path: Path) -> None:
    # Same size, same timestamp tick: only content tells; such a file is never cached.
    (tmp_path / "matrix" / "nccl.toml").touch()
    _load()
    _load()
    assert len(parses) == 2
    assert not list((tmp_path / "cache").glob("matrix-*"))


def test_a_corrupt_cache_is_ignored_and_rebuilt(parses: list[int], tmp_path: Path) -> None:
    _load()
    (cached,) = (tmp_path / "cache").glob("matrix-*")
    good = cached.read_bytes()
    header_end = good.index(b".", len(b"envbuild-compiled 1\n")) + 1  # the header pickle's STOP
    garbage = [
        b"",
        b"envbuild-compiled 1\n\x80\x05garbage",
        good[:300],  # truncated
        good[:header_end] + b"\x80\x05\x95garbage",  # a good header, a corrupt value
    ]
    for bad in garbage:
        cached.write_bytes(bad)
        cached.chmod(0o600)
        assert _h200(_load()) == 753.0
    assert len(parses) == 5
    _load()
    assert len(parses) == 5  # the last rebuild stored a good one again


def test_a_corrupt_file_is_removed(tmp_path: Path) -> None:
    target = tmp_path / "value.pickle"
    compiled.write(target, "k", [1, 2])
    assert compiled.read(target, "k") == [1, 2]
    assert compiled.read(target, "other key") is None and target.exists()  # stale: kept
    target.write_bytes(target.read_bytes()[:-3])  # truncated
    assert compiled.read(target, "k") is None
    assert not target.exists()  # dropped: the next write starts clean


def test_a_cached_value_that_is_not_a_matrix_is_a_miss(
    parses: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiled, "read", lambda path, key, **_: ["not a Matrix"])
    assert _h200(_load()) == 753.0
    assert len(parses) == 1


def test_a_cache_others_can_write_is_not_loaded(parses: list[int], tmp_path: Path) -> None:
    _load()
    (cached,) = (tmp_path / "cache").glob("matrix-*")
    cached.chmod(0o666)
    _load()
    assert len(parses) == 2


def test_a_changed_row_type_module_is_never_filled_from_old_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "rowtype_mod.py"
    source.write_text("class Row:\n    def __init__(self, x):\n        self.x = x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import rowtype_mod  # type: ignore[import-not-found]

    target = tmp_path / "value.pickle"
    compiled.write(target, "k", [rowtype_mod.Row(1)])
    rows = (rowtype_mod.Row,)
    assert compiled.read(target, "k", allowed=rows) is not None
    assert [row.x for row in compiled.read(target, "k", allowed=rows) or ()] == [1]
    assert compiled.read(target, "other key", allowed=rows) is None
    source.write_text(source.read_text() + "    y = 2\n")  # a new field: another size
    assert compiled.read(target, "k", allowed=rows) is None
    sys.modules.pop("rowtype_mod", None)


def test_the_string_paths_name_what_the_path_helpers_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `envbuild resolve` reads the compiled matrix through the string forms (no pathlib).
    from envbuild.core import resources

    monkeypatch.delenv("ENVBUILD_MATRIX_DIR", raising=False)
    assert resources.matrix_folder() == str(matrix_dir())
    assert (matrix_dir() / "torch.toml").is_file()
    monkeypatch.setenv("ENVBUILD_MATRIX_DIR", str(tmp_path / "m"))
    assert resources.matrix_folder() == str(tmp_path / "m") == str(matrix_dir())
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "c"))
    assert compiled.cache_file("x.pickle") == str(compiled.cache_dir() / "x.pickle")

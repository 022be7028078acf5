"""Local wheelhouse hashes remembered from uv's own output (envbuild.lock.wheelhashes): the next
pin hands uv a links page with `#sha256=` so it does not hash the files again; a file that
changed is a miss."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from envbuild.lock import pins as pydeps
from envbuild.lock import wheelhashes
from envbuild.lock.pins import PinRequest, RunResult

WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
BYTES = b"wheel bytes"
DIGEST = hashlib.sha256(BYTES).hexdigest()  # what uv reports: the file's own hash


class RecordingUv:
    """Answers like uv with one local wheel, and keeps the find-links it was given."""

    def __init__(self, house: Path) -> None:
        self.house = house
        self.links: list[str] = []
        self.pages: list[str] = []

    def __call__(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> RunResult:
        link = argv[list(argv).index("--find-links") + 1]
        self.links.append(link)
        self.pages.append(Path(link).read_text() if link.endswith(".html") else "")
        url = wheelhashes.file_url(str(self.house / WHEEL))
        (cwd / "pylock.toml").write_text(
            'lock-version = "1.0"\ncreated-by = "uv"\n\n[[packages]]\nname = "torch"\n'
            f'version = "2.13.0+cpu"\nwheels = [{{ url = "{url}", hashes = {{ sha256 = '
            f'"{DIGEST}" }} }}]\n'
        )
        return RunResult(0, "", "")


@pytest.fixture
def house(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / WHEEL).write_bytes(BYTES)
    return folder


def _pin(house: Path, uv: RecordingUv) -> None:
    req = PinRequest(requirements=("torch==2.13.0",), python="3.11", find_links=(str(house),))
    result = pydeps.pin(req, runner=uv, tool="uv")
    assert [p.source for p in result.packages] == [str(house)]


def test_second_pin_gives_uv_the_hash_uv_reported(house: Path) -> None:
    uv = RecordingUv(house)
    _pin(house, uv)
    _pin(house, uv)
    assert uv.links[0] == str(house)  # nothing known yet: the folder as the request names it
    assert uv.links[1].endswith(".html")
    expected = f'<a href="file://{house}/{WHEEL}#sha256={DIGEST}">{WHEEL}</a><br>'
    assert expected in uv.pages[1].splitlines()


def test_a_rewritten_wheel_is_hashed_by_uv_again(house: Path) -> None:
    uv = RecordingUv(house)
    _pin(house, uv)
    (house / WHEEL).write_bytes(b"WHEEL BYTES")  # the same size: only the times tell
    os.utime(house / WHEEL, ns=(1, 1))
    _pin(house, uv)
    assert uv.links[1] == str(house)


class RewritingUv(RecordingUv):
    """uv answering while the wheel is rewritten under it (same size, new times)."""

    def __call__(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> RunResult:
        (self.house / WHEEL).write_bytes(b"WHEEL BYTES")
        os.utime(self.house / WHEEL, ns=(1, 1))
        return super().__call__(argv, cwd, env)


def test_a_wheel_rewritten_while_uv_runs_is_not_remembered(house: Path) -> None:
    """uv's hash may be of the old bytes: stored under the new file's identity it would be
    handed to every later lock as the hash of bytes it never described."""
    _pin(house, RewritingUv(house))
    uv = RecordingUv(house)
    _pin(house, uv)
    assert uv.links == [str(house)]


def test_a_folder_with_more_than_wheels_stays_with_uv(house: Path) -> None:
    (house / "vecadd-0.1.0.tar.gz").write_bytes(b"sdist")
    uv = RecordingUv(house)
    _pin(house, uv)
    _pin(house, uv)
    assert uv.links == [str(house), str(house)]


def test_a_cache_file_others_can_write_is_ignored(house: Path) -> None:
    uv = RecordingUv(house)
    _pin(house, uv)
    cache = Path(os.environ["ENVBUILD_CACHE_DIR"]) / wheelhashes.FILE_NAME
    assert wheelhashes.load()
    cache.chmod(0o666)
    assert wheelhashes.load() == {}

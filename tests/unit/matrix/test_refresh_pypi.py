"""The HTTP edge of `matrix refresh` (envbuild.matrix.refresh.pypi) without a network: a fake session serves
recorded files (and byte ranges of a real, recorded wheel)."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import requests

from envbuild.core.errors import SourceUnreachableError
from envbuild.matrix import refresh
from envbuild.matrix.refresh import pypi

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "refresh"
WHEEL_NAME = "cuda_toolkit-12.8.1-py2.py3-none-any.whl"
WHEEL_URL = f"https://files.pythonhosted.org/packages/xx/{WHEEL_NAME}"


class FakeRaw:
    """urllib3's HTTPResponse as `envbuild.core.httpbody.read_body` reads it."""

    def __init__(self, body: bytes) -> None:
        self.body = io.BytesIO(body)

    def read1(self, amt: int, decode_content: bool = True) -> bytes:
        return self.body.read1(amt)


class FakeResponse:
    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.status_code = status
        self.content = body
        self.raw = FakeRaw(body)
        self.headers = headers or {}

    def close(self) -> None:
        pass


class FakeSession:
    """Serves whole bodies by URL and byte ranges of `blobs`, like a static file server."""

    def __init__(
        self,
        pages: dict[str, tuple[str, bytes]] | None = None,
        blobs: dict[str, bytes] | None = None,
        *,
        honour_range: bool = True,
        down: tuple[str, ...] = (),
    ) -> None:
        self.pages = pages or {}
        self.blobs = blobs or {}
        self.honour_range = honour_range
        self.down = down
        self.calls: list[tuple[str, str]] = []

    def get(
        self, url: str, headers: dict[str, str], timeout: Any, stream: bool = False
    ) -> FakeResponse:
        assert timeout == pypi.TIMEOUT
        assert stream, "every body is read through envbuild.core.httpbody"
        self.calls.append((url, headers.get("Range", "")))
        if any(url.startswith(d) for d in self.down):
            raise requests.ConnectionError(f"cannot resolve {url}")
        if url in self.blobs:
            blob = self.blobs[url]
            rng = headers.get("Range")
            if not rng or not self.honour_range:
                return FakeResponse(200, blob)
            spec = rng.removeprefix("bytes=")
            if spec.startswith("-"):
                start, end = max(0, len(blob) - int(spec[1:])), len(blob) - 1
            else:
                a, _, b = spec.partition("-")
                start, end = int(a), min(int(b), len(blob) - 1)
            return FakeResponse(
                206,
                blob[start : end + 1],
                {"Content-Range": f"bytes {start}-{end}/{len(blob)}"},
            )
        if url in self.pages:
            ctype, body = self.pages[url]
            return FakeResponse(200, body, {"Content-Type": ctype})
        return FakeResponse(404, b"not found")


def fetcher(session: FakeSession, tmp_path: Path) -> pypi.Fetcher:
    return pypi.Fetcher(session=session, cache_dir=tmp_path / "cache")  # type: ignore[arg-type]


def test_range_reader_matches_zipfile_on_a_real_wheel(tmp_path: Path) -> None:
    blob = (FIX / WHEEL_NAME).read_bytes()
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        expected = zf.read(name)
    session = FakeSession(blobs={WHEEL_URL: blob})
    f = fetcher(session, tmp_path)
    assert pypi.read_wheel_member(f, WHEEL_URL, suffix=".dist-info/METADATA") == expected
    assert all(rng for _url, rng in session.calls)  # never the whole file
    # Immutable bytes are cached: a second read sends no request.
    n = len(session.calls)
    assert pypi.read_wheel_member(f, WHEEL_URL, suffix=".dist-info/METADATA") == expected
    assert len(session.calls) == n


def test_range_reader_reads_a_central_directory_beyond_the_tail(tmp_path: Path) -> None:
    # A zip whose central directory does not fit in the tail read: 2000 entries.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pkg-1.0.dist-info/METADATA", "Name: pkg\nVersion: 1.0\n")
        for i in range(2000):
            zf.writestr(f"pkg/long/path/to/module_number_{i:05d}.py", f"x = {i}\n")
    blob = buf.getvalue()
    url = "https://files.example/pkg-1.0-py3-none-any.whl"
    session = FakeSession(blobs={url: blob})
    got = pypi.read_wheel_member(fetcher(session, tmp_path), url, suffix=".dist-info/METADATA")
    assert got == b"Name: pkg\nVersion: 1.0\n"
    assert len(session.calls) == 4  # tail, central directory, local header, data


def test_server_without_ranges_is_refused(tmp_path: Path) -> None:
    blob = (FIX / WHEEL_NAME).read_bytes()
    f = fetcher(FakeSession(blobs={WHEEL_URL: blob}, honour_range=False), tmp_path)
    with pytest.raises(SourceUnreachableError) as exc:
        pypi.read_wheel_member(f, WHEEL_URL, suffix=".dist-info/METADATA")
    assert "byte ranges" in exc.value.message and exc.value.exit_code == 3


def test_not_a_zip_is_a_typed_error(tmp_path: Path) -> None:
    url = "https://files.example/broken.whl"
    f = fetcher(FakeSession(blobs={url: b"this is not a zip file" * 10}), tmp_path)
    with pytest.raises(SourceUnreachableError) as exc:
        pypi.read_wheel_member(f, url, suffix=".dist-info/METADATA")
    assert exc.value.fields["url"] == url and exc.value.hint


def test_pep658_metadata_is_hash_checked(tmp_path: Path) -> None:
    body = (FIX / "metadata-torch-2.7.1-cp313-cp313-manylinux_2_28_x86_64.whl.txt").read_bytes()
    url = "https://files.example/torch-2.7.1-cp313-cp313-manylinux_2_28_x86_64.whl"
    session = FakeSession(pages={url + ".metadata": ("application/octet-stream", body)})
    f = fetcher(session, tmp_path)
    good = refresh.IndexFile(
        url.rsplit("/", 1)[1], url, core_metadata={"sha256": hashlib.sha256(body).hexdigest()}
    )
    assert pypi.wheel_metadata(f, good) == body.decode()
    bad = refresh.IndexFile(good.filename, url + "?", core_metadata={"sha256": "0" * 64})
    session.pages[bad.url + ".metadata"] = ("application/octet-stream", body)
    with pytest.raises(SourceUnreachableError, match="does not match the hash"):
        pypi.wheel_metadata(f, bad)


def test_simple_project_asks_for_pep691_json_and_caches(tmp_path: Path) -> None:
    body = (FIX / "simple-torch.json").read_bytes()
    url = "https://pypi.org/simple/torch/"
    session = FakeSession(pages={url: (pypi.PEP691_JSON, body)})
    f = fetcher(session, tmp_path)
    assert pypi.simple_project(f, "torch") == json.loads(body)
    assert pypi.simple_project(f, "torch") == json.loads(body)
    assert len(session.calls) == 1
    # An index page is cached for INDEX_TTL_S only: with ttl 0 it is fetched again.
    f.index_ttl_s = -1
    pypi.simple_project(f, "torch")
    assert len(session.calls) == 2


def test_html_answer_to_a_json_request_is_refused(tmp_path: Path) -> None:
    url = "https://pypi.org/simple/torch/"
    html = (FIX / "simple-torch.html").read_bytes()
    f = fetcher(FakeSession(pages={url: ("text/html", html)}), tmp_path)
    with pytest.raises(SourceUnreachableError, match="did not answer"):
        pypi.simple_project(f, "torch")


def test_unreachable_host_is_a_typed_error(tmp_path: Path) -> None:
    f = fetcher(FakeSession(down=("https://download.pytorch.org",)), tmp_path)
    with pytest.raises(SourceUnreachableError) as exc:
        pypi.pytorch_index_page(f, None)
    assert exc.value.exit_code == 3
    assert exc.value.fields["url"] == "https://download.pytorch.org/whl/torch/"
    assert "ConnectionError" in exc.value.message


def test_http_error_status_is_a_typed_error(tmp_path: Path) -> None:
    f = fetcher(FakeSession(), tmp_path)
    with pytest.raises(SourceUnreachableError, match="HTTP 404"):
        pypi.simple_project(f, "no-such-project")


def test_docker_hub_tags_follow_next(tmp_path: Path) -> None:
    first = pypi.DOCKER_HUB_TAGS.format(repo="nvidia/cuda")
    second = first + "&page=2"
    pages = {
        first: (
            "application/json",
            json.dumps({"results": [{"name": "12.8.1-base-ubuntu24.04"}], "next": second}).encode(),
        ),
        second: (
            "application/json",
            json.dumps({"results": [{"name": "12.8.1-devel-ubuntu24.04"}], "next": None}).encode(),
        ),
    }
    url, tags = pypi.docker_hub_tags(fetcher(FakeSession(pages=pages), tmp_path))
    assert url == first and tags == ["12.8.1-base-ubuntu24.04", "12.8.1-devel-ubuntu24.04"]


def test_session_retries_idempotent_requests() -> None:
    session = pypi.make_session()
    adapter = session.get_adapter("https://pypi.org/")
    assert isinstance(adapter, requests.adapters.HTTPAdapter)
    retry = adapter.max_retries
    assert retry.total == 3 and retry.backoff_factor > 0
    assert {429, 500, 502, 503, 504} <= set(retry.status_forcelist)
    assert retry.allowed_methods is not None
    assert "GET" in retry.allowed_methods and "POST" not in retry.allowed_methods
    assert str(session.headers["User-Agent"]).startswith("envbuild/")


def test_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pypi.default_cache_dir() == tmp_path / "envbuild" / "http"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert pypi.default_cache_dir() == Path.home() / ".cache" / "envbuild" / "http"

"""HTTP edge of `envbuild matrix refresh`: PyPI, the PyTorch wheel index, registry tag lists.

Only `matrix refresh` imports this module; `lock` and `resolve` never touch the network for the
matrix. Everything here is I/O; what the responses mean is decided in `envbuild.matrix.refresh` (pure).

- PyPI's Simple API in JSON (PEP 691, `Accept: application/vnd.pypi.simple.v1+json`).
- A wheel's core metadata: the PEP 658 `<url>.metadata` file when the index advertises it
  (`core-metadata` / `data-dist-info-metadata` keys, PEP 714), else the `.dist-info/METADATA`
  member read out of the wheel with HTTP range requests (the zip central directory is at the
  end of the file; pip's `lazy_wheel` does the same). Mirrors and proxies often drop the PEP 658
  keys, and torch wheels are 0.5-0.9 GB, so the range read is what keeps a refresh cheap.
- Retries with backoff on connection errors and 429/5xx (urllib3 `Retry` through an
  `HTTPAdapter`), a (connect, read) timeout on every request, and an on-disk cache under
  `$XDG_CACHE_HOME/envbuild/http` (default `~/.cache/envbuild/http`): index pages for an hour,
  immutable files (wheel bytes, `.metadata`) for good.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild import __version__
from envbuild.core.errors import SourceUnreachableError
from envbuild.core.fsio import write_atomic
from envbuild.core.httpbody import BodyError, read_body
from envbuild.matrix.refresh import (
    TOOLKIT_PROJECT,
    Channel,
    ChannelData,
    CoreMetadata,
    IndexFile,
    ReleaseData,
    cuda_pins,
    parse_metadata,
    parse_simple_json,
    pick_metadata_wheel,
    toolkit_runtime_pins,
    wheels_for,
)

if TYPE_CHECKING:
    import requests

PYPI_SIMPLE = "https://pypi.org/simple"
PYTORCH_INDEX = "https://download.pytorch.org/whl"
DOCKER_HUB_TAGS = "https://hub.docker.com/v2/repositories/{repo}/tags?page_size=100"
PEP691_JSON = "application/vnd.pypi.simple.v1+json"
USER_AGENT = f"envbuild/{__version__} (matrix refresh; +https://pypi.org/project/envbuild)"

INDEX_TTL_S = 3600
"""Index pages change when a release is uploaded; an hour keeps reruns cheap and fresh enough."""
TIMEOUT = (10.0, 60.0)
"""(connect, read) seconds for every request."""
TOTAL_S = 300.0
"""The most one answer may take, body included: `TIMEOUT` is per read, which a server sending
a byte at a time never trips."""
MAX_BODY_BYTES = 64 << 20
"""The largest answer read (torch's PEP 691 page is a few MB; a range read is 64 KiB)."""
MAX_TAG_PAGES = 50
"""Docker Hub pages of 100 tags; nvidia/cuda has a few thousand tags."""

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_CDIR_ENTRY = 0x02014B50
_LOCAL_HEADER = 0x04034B50
_TAIL_BYTES = 64 * 1024
"""Enough for the end-of-central-directory record and (for wheels) most central directories."""


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/envbuild/http`, default `~/.cache/envbuild/http`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuild" / "http"


def make_session(*, retries: int = 3, backoff: float = 0.5) -> requests.Session:
    """A `requests.Session` that retries idempotent requests on connection errors and 429/5xx."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    retry = Retry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        backoff_factor=backoff,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD"}),
        respect_retry_after_header=True,
        raise_on_status=False,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    session.headers["User-Agent"] = USER_AGENT
    return session


@dataclass(frozen=True)
class Response:
    url: str
    body: bytes
    from_cache: bool = False

    def text(self) -> str:
        return self.body.decode("utf-8")


class Fetcher:
    """GETs with retries, timeouts and an on-disk cache; every failure is a
    `SourceUnreachableError` (exit 3) naming the url and what to do."""

    def __init__(
        self,
        *,
        session: requests.Session | None = None,
        cache_dir: Path | None = None,
        use_cache: bool = True,
        index_ttl_s: int = INDEX_TTL_S,
        timeout: tuple[float, float] = TIMEOUT,
    ) -> None:
        self._session = session
        self.cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
        self.use_cache = use_cache
        self.index_ttl_s = index_ttl_s
        self.timeout = timeout

    @property
    def session(self) -> requests.Session:
        if self._session is None:
            self._session = make_session()
        return self._session

    # -- cache ------------------------------------------------------------------------------

    def _cache_path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.cache_dir / digest[:2] / digest

    def _cache_get(self, key: str, ttl_s: int | None) -> bytes | None:
        if not self.use_cache:
            return None
        path = self._cache_path(key)
        try:
            if ttl_s is not None and time.time() - path.stat().st_mtime > ttl_s:
                return None
            return path.read_bytes()
        except OSError:
            return None

    def _cache_put(self, key: str, body: bytes) -> None:
        if not self.use_cache:
            return
        # A read-only or full cache must not fail a refresh: the data is already in hand.
        with contextlib.suppress(OSError):
            write_atomic(self._cache_path(key), body)

    # -- requests ---------------------------------------------------------------------------

    def _get(self, url: str, headers: Mapping[str, str], *, what: str) -> requests.Response:
        import requests

        try:
            resp = self.session.get(url, headers=dict(headers), timeout=self.timeout, stream=True)
        except requests.RequestException as exc:
            raise SourceUnreachableError(
                f"cannot reach {what}: {type(exc).__name__}",
                hint="check the network or proxy (HTTPS_PROXY) and rerun; "
                "`--source` limits the refresh to the sources that work",
                fields={"url": url},
            ) from None
        if resp.status_code >= 400:
            resp.close()
            raise SourceUnreachableError(
                f"{what} answered HTTP {resp.status_code}",
                hint="rerun later; if it persists the index layout may have changed",
                fields={"url": url, "status": resp.status_code},
            )
        return resp

    def get(
        self,
        url: str,
        *,
        accept: str | None = None,
        ttl_s: int | None = None,
        what: str = "",
        check: Callable[[bytes], object] | None = None,
    ) -> Response:
        """GET a whole body; `ttl_s=None` caches it for good (immutable files). `check` judges
        a body (raising SourceUnreachableError when it is not what was asked for): only a body
        that passes it is cached, or served from the cache, so a bad answer (a maintenance
        page, a truncated file, bytes that do not match their listed hash) is asked again next
        time instead of being kept."""
        key = f"GET {url} {accept or ''}"
        cached = self._cache_get(key, ttl_s)
        if cached is not None and _passes(check, cached):
            return Response(url, cached, from_cache=True)
        headers = {"Accept": accept} if accept else {}
        resp = self._get(url, headers, what=what or url)
        if accept and accept not in resp.headers.get("Content-Type", ""):
            resp.close()
            raise SourceUnreachableError(
                f"{what or url} did not answer in {accept}",
                hint="the index does not speak this API; point refresh at pypi.org",
                fields={"url": url, "content_type": resp.headers.get("Content-Type", "")},
            )
        body = self._body(resp, url, what or url)
        if check is not None:
            check(body)
        self._cache_put(key, body)
        return Response(url, body)

    def _body(self, resp: requests.Response, url: str, what: str) -> bytes:
        """The answer's body, bounded in size and total time (`envbuild.core.httpbody`)."""
        import requests

        started = time.monotonic()
        try:
            return read_body(resp, limit=MAX_BODY_BYTES, deadline=started + TOTAL_S, what=what)
        except (BodyError, requests.RequestException) as exc:
            raise SourceUnreachableError(
                f"cannot read {what}: {exc}",
                hint="check the network or proxy (HTTPS_PROXY) and rerun; "
                "`--source` limits the refresh to the sources that work",
                fields={"url": url},
            ) from None

    def get_range(self, url: str, start: int, length: int | None = None) -> tuple[bytes, int]:
        """Bytes of an immutable file by HTTP range: `start < 0` = the last -start bytes.
        Returns (bytes, total size of the file)."""
        spec = f"bytes={start}" if start < 0 else f"bytes={start}-{start + (length or 1) - 1}"
        key = f"RANGE {url} {spec}"
        cached = self._cache_get(key, None)
        if cached is not None and len(cached) >= 8:
            total = struct.unpack("<Q", cached[:8])[0]
            return cached[8:], int(total)
        resp = self._get(url, {"Range": spec, "Accept-Encoding": "identity"}, what=url)
        if resp.status_code != 206:
            # A server that ignores Range would send the whole 900 MB wheel: stop here.
            resp.close()
            raise SourceUnreachableError(
                f"{url} does not serve byte ranges (HTTP {resp.status_code})",
                hint="use an index that serves PEP 658 .metadata files or byte ranges",
                fields={"url": url},
            )
        content_range = resp.headers.get("Content-Range", "")
        total_text = content_range.rpartition("/")[2]
        if not total_text.isdigit():
            resp.close()
            raise SourceUnreachableError(
                f"{url} sent no usable Content-Range ({content_range!r})",
                hint="use an index that serves PEP 658 .metadata files",
                fields={"url": url},
            )
        body = self._body(resp, url, url)
        self._cache_put(key, struct.pack("<Q", int(total_text)) + body)
        return body, int(total_text)


def _passes(check: Callable[[bytes], object] | None, body: bytes) -> bool:
    if check is None:
        return True
    try:
        check(body)
    except SourceUnreachableError:
        return False
    return True


# -- PyPI -----------------------------------------------------------------------------------


def simple_project_url(project: str, *, index: str = PYPI_SIMPLE) -> str:
    return f"{index.rstrip('/')}/{project}/"


def simple_project(fetcher: Fetcher, project: str, *, index: str = PYPI_SIMPLE) -> dict[str, Any]:
    """PEP 691 JSON of one project: {"name", "files": [...], "versions": [...], "meta"}."""
    url = simple_project_url(project, index=index)

    def project_json(body: bytes) -> dict[str, Any]:
        from envbuild.core.documents import DocumentError, json_loads

        try:
            data = json_loads(body)
        except DocumentError:
            raise SourceUnreachableError(
                f"PyPI sent invalid JSON for {project}",
                hint="rerun; the answer was not cached",
                fields={"url": url},
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise SourceUnreachableError(
                f"PyPI's answer for {project} has no file list",
                hint="rerun later; the answer was not cached",
                fields={"url": url},
            )
        return data

    what = f"PyPI ({project})"
    resp = fetcher.get(
        url, accept=PEP691_JSON, ttl_s=fetcher.index_ttl_s, what=what, check=project_json
    )
    return project_json(resp.body)


def wheel_metadata(fetcher: Fetcher, file: IndexFile) -> str:
    """Core metadata (the METADATA text) of one wheel an index lists."""
    advertised = file.core_metadata
    if advertised:
        # PEP 658/714: the metadata file sits beside the wheel; its hash, when given, is checked.
        url = f"{file.url}.metadata"
        expected = advertised.get("sha256") if isinstance(advertised, Mapping) else None

        def matches(body: bytes) -> None:
            if expected and hashlib.sha256(body).hexdigest() != expected:
                raise SourceUnreachableError(
                    f"{file.filename}.metadata does not match the hash the index lists",
                    hint="rerun; a proxy may have altered the file (it was not cached)",
                    fields={"url": url},
                )

        resp = fetcher.get(url, ttl_s=None, what=f"{file.filename}.metadata", check=matches)
        return resp.body.decode("utf-8", errors="replace")
    body = read_wheel_member(fetcher, file.url, suffix=".dist-info/METADATA")
    return body.decode("utf-8", errors="replace")


def read_wheel_member(fetcher: Fetcher, url: str, *, suffix: str) -> bytes:
    """One member of a remote zip (wheel) whose name ends with `suffix`, read by HTTP ranges."""
    try:
        return _read_member(fetcher, url, suffix)
    except (ValueError, zlib.error, struct.error) as exc:
        raise SourceUnreachableError(
            f"{url.rsplit('/', 1)[-1]}: cannot read its {suffix}: {exc}",
            hint="rerun with --no-cache; if it persists, report the file",
            fields={"url": url},
        ) from None


def _read_member(fetcher: Fetcher, url: str, suffix: str) -> bytes:
    tail, total = fetcher.get_range(url, -_TAIL_BYTES)
    tail_start = total - len(tail)
    cd_offset, cd_size = central_directory_span(tail, tail_start)
    if cd_offset >= tail_start:
        cdir = tail[cd_offset - tail_start : cd_offset - tail_start + cd_size]
    else:
        cdir, _ = fetcher.get_range(url, cd_offset, cd_size)
    entry = find_member(cdir, suffix)
    if entry is None:
        raise SourceUnreachableError(
            f"{url.rsplit('/', 1)[-1]} has no *{suffix}",
            hint="this file is not a wheel; report it",
            fields={"url": url},
        )
    # Local header (30 bytes + name + extra) precedes the data; its extra field may differ from
    # the central directory's, so read the header first, then the data.
    header, _ = fetcher.get_range(url, entry.header_offset, 30)
    data_offset = entry.header_offset + local_header_size(header)
    data, _ = fetcher.get_range(url, data_offset, entry.compressed_size)
    return inflate(entry, data)


# -- zip structure (pure helpers of the range reader) -----------------------------------------


@dataclass(frozen=True)
class ZipEntry:
    name: str
    method: int
    compressed_size: int
    size: int
    header_offset: int


def central_directory_span(tail: bytes, tail_start: int) -> tuple[int, int]:
    """(offset, size) of the central directory, from the last bytes of a zip (ZIP64 aware)."""
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) < at + 22:
        raise ValueError("no end-of-central-directory record in the last bytes")
    cd_size, cd_offset = struct.unpack("<II", tail[at + 12 : at + 20])
    if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:
        loc = tail.rfind(_EOCD64_LOCATOR, 0, at)
        if loc < 0:
            raise ValueError("ZIP64 archive without a ZIP64 locator")
        (eocd64_offset,) = struct.unpack("<Q", tail[loc + 8 : loc + 16])
        rel = eocd64_offset - tail_start
        if rel < 0:
            raise ValueError("ZIP64 end record lies before the bytes read")
        cd_size, cd_offset = struct.unpack("<QQ", tail[rel + 40 : rel + 56])
    return int(cd_offset), int(cd_size)


def find_member(cdir: bytes, suffix: str) -> ZipEntry | None:
    """The first top-level-folder member whose name ends with `suffix` (wheel layout)."""
    pos = 0
    while pos + 46 <= len(cdir):
        (sig,) = struct.unpack("<I", cdir[pos : pos + 4])
        if sig != _CDIR_ENTRY:
            raise ValueError(f"bad central directory entry at {pos}")
        method = struct.unpack("<H", cdir[pos + 10 : pos + 12])[0]
        csize, usize = struct.unpack("<II", cdir[pos + 20 : pos + 28])
        name_len, extra_len, comment_len = struct.unpack("<HHH", cdir[pos + 28 : pos + 34])
        (offset,) = struct.unpack("<I", cdir[pos + 42 : pos + 46])
        name = cdir[pos + 46 : pos + 46 + name_len].decode("utf-8", errors="replace")
        extra = cdir[pos + 46 + name_len : pos + 46 + name_len + extra_len]
        pos += 46 + name_len + extra_len + comment_len
        if name.endswith(suffix) and name.count("/") == suffix.count("/"):
            csize, usize, offset = _zip64_sizes(extra, csize, usize, offset)
            return ZipEntry(name, method, csize, usize, offset)
    return None


def _zip64_sizes(extra: bytes, csize: int, usize: int, offset: int) -> tuple[int, int, int]:
    # ZIP64 extended information (header id 0x0001) holds, in order, the fields whose 32-bit
    # value is 0xFFFFFFFF: size, compressed size, header offset (APPNOTE 4.5.3).
    pos = 0
    while pos + 4 <= len(extra):
        hid, hlen = struct.unpack("<HH", extra[pos : pos + 4])
        body = extra[pos + 4 : pos + 4 + hlen]
        pos += 4 + hlen
        if hid != 0x0001:
            continue
        values = list(struct.unpack(f"<{len(body) // 8}Q", body[: len(body) // 8 * 8]))
        if usize == 0xFFFFFFFF and values:
            usize = values.pop(0)
        if csize == 0xFFFFFFFF and values:
            csize = values.pop(0)
        if offset == 0xFFFFFFFF and values:
            offset = values.pop(0)
    return csize, usize, offset


def local_header_size(header: bytes) -> int:
    (sig,) = struct.unpack("<I", header[:4])
    if sig != _LOCAL_HEADER:
        raise ValueError("bad local file header")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return 30 + int(name_len) + int(extra_len)


def inflate(entry: ZipEntry, data: bytes) -> bytes:
    if entry.method == 0:
        return data
    if entry.method == 8:
        return zlib.decompress(data, -15)
    raise ValueError(f"{entry.name}: zip compression method {entry.method} not supported")


# -- PyTorch wheel index and registries -------------------------------------------------------


def pytorch_index_page(fetcher: Fetcher, variant: str | None, project: str = "torch") -> Response:
    """A PEP 503 HTML page of the PyTorch index: download.pytorch.org/whl/<variant>/torch/ for one
    variant, or download.pytorch.org/whl/torch/ (variant None: every `+cuXXX` wheel at once)."""
    url = f"{PYTORCH_INDEX}/{variant}/{project}/" if variant else f"{PYTORCH_INDEX}/{project}/"
    return fetcher.get(url, ttl_s=fetcher.index_ttl_s, what=f"the PyTorch index ({url})")


def docker_hub_tags(fetcher: Fetcher, repo: str = "nvidia/cuda") -> tuple[str, list[str]]:
    """All tag names of a Docker Hub repository (paged through `next`); returns (url, tags)."""
    from envbuild.core.documents import DocumentError, json_loads

    def tag_page(body: bytes) -> dict[str, Any]:
        page: Any
        try:
            page = json_loads(body)
        except DocumentError:
            page = None
        ok = isinstance(page, dict) and isinstance(page.get("results", []), list)
        if not ok or not all(isinstance(r, dict) for r in page.get("results", [])):
            raise SourceUnreachableError(
                f"Docker Hub sent no tag list for {repo}", hint="rerun later", fields={"url": url}
            )
        result: dict[str, Any] = page
        return result

    first = DOCKER_HUB_TAGS.format(repo=repo)
    url: str | None = first
    tags: list[str] = []
    for _ in range(MAX_TAG_PAGES):
        if url is None:
            break
        what = f"Docker Hub ({repo})"
        resp = fetcher.get(url, ttl_s=fetcher.index_ttl_s, what=what, check=tag_page)
        page = tag_page(resp.body)
        tags.extend(str(r["name"]) for r in page.get("results", []) if "name" in r)
        url = page.get("next") or None
        if url is not None and not str(url).startswith("https://hub.docker.com/"):
            url = None  # a `next` elsewhere is not Docker Hub's tag list
    return first, sorted(set(tags))


# -- what a refresh from PyPI needs ----------------------------------------------------------


def gather_channel(
    fetcher: Fetcher,
    channel: Channel,
    *,
    since: str | None,
    index: str = PYPI_SIMPLE,
    progress: Callable[[str], None] = lambda _line: None,
) -> ChannelData:
    """The project's Linux x86_64 wheels per release (from `since` on) and the core metadata of
    one wheel per release. A release whose metadata cannot be read keeps metadata=None."""
    from packaging.version import Version

    data = simple_project(fetcher, channel.project, index=index)
    by_release = wheels_for(parse_simple_json(data))
    floor = Version(since) if since else None
    releases: list[ReleaseData] = []
    for version in sorted(by_release):
        if floor is not None and version < floor:
            continue
        wheels = tuple(by_release[version])
        chosen = pick_metadata_wheel(wheels)
        progress(f"{channel.project} {version}: {chosen.file.filename}")
        try:
            meta = parse_metadata(wheel_metadata(fetcher, chosen.file))
        except SourceUnreachableError as err:
            progress(f"{channel.project} {version}: {err.message}")
            releases.append(ReleaseData(str(version), wheels, chosen, None))
            continue
        releases.append(ReleaseData(str(version), wheels, chosen, meta))
    return ChannelData(channel, simple_project_url(channel.project, index=index), tuple(releases))


def gather_runtime_pins(
    fetcher: Fetcher,
    channels: Sequence[ChannelData],
    *,
    index: str = PYPI_SIMPLE,
    progress: Callable[[str], None] = lambda _line: None,
) -> dict[str, str]:
    """cuda-toolkit release -> its `nvidia-cuda-runtime*` pin, for the CUDA minors the channels'
    runtime pins name (only those toolkits' metadata is read)."""
    from packaging.version import Version

    minors: set[tuple[int, int]] = set()
    for ch in channels:
        for rd in ch.releases:
            if rd.metadata is None:
                continue
            pins = cuda_pins(rd.metadata, extra=ch.channel.extra)
            if pins.runtime and not pins.toolkit:
                v = Version(pins.runtime)
                minors.add((v.major, v.minor))
    if not minors:
        return {}
    data = simple_project(fetcher, TOOLKIT_PROJECT, index=index)
    metas: dict[str, CoreMetadata] = {}
    for version, wheels in sorted(_any_platform_wheels(parse_simple_json(data)).items()):
        if (version.major, version.minor) not in minors or version.is_prerelease:
            continue
        progress(f"{TOOLKIT_PROJECT} {version}")
        metas[str(version)] = parse_metadata(wheel_metadata(fetcher, wheels[0]))
    return toolkit_runtime_pins(metas)


def _any_platform_wheels(files: Sequence[IndexFile]) -> dict[Any, list[IndexFile]]:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion

    out: dict[Any, list[IndexFile]] = {}
    for f in files:
        if not f.filename.endswith(".whl"):
            continue
        try:
            _n, version, _b, _t = parse_wheel_filename(f.filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        out.setdefault(version, []).append(f)
    return out

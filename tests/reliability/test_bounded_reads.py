"""No hangs, bounded reads: user-cache files, CDI specs and `file://` requirements go through
the input reader's rules (no FIFO, no device, a size cap), and network answers are bounded in
size and in total time, not per read (envbuild.core.fsio, envbuild.core.httpbody).

The defects: a FIFO in place of a cache file or a CDI spec hung `lock`, `doctor` and `image`
(opened for reading, it waits for a writer); a `file://` requirement naming a FIFO reached uv,
which hangs reading it; a registry or index that sends one byte every few seconds never trips
requests' per-read timeout; and a huge answer was read whole before its size was checked.
Each hanging case runs where a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuild.core import compiled, usercache
from envbuild.engine import registry
from envbuild.lock import wheelhashes
from envbuild.matrix.refresh import pypi
from tests.reliability.helpers import assert_clear_error, copy_example, run
from tests.reliability.hostile import fake_uv

HANG_S = 20


def finishes(fn: Callable[[], Any], within: float = HANG_S) -> Any:
    """fn()'s value; fails the test when it has not returned within `within` seconds (the
    thread is left blocked: a daemon, gone with the test process)."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), f"still blocked after {within} s"
    return box[0]


# --- files ------------------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(folder))
    return folder


@pytest.mark.parametrize("name", [wheelhashes.FILE_NAME, "smoke-passes.json", "matrix-x.pickle"])
def test_a_fifo_as_a_cache_file_is_a_miss(cache: Path, name: str) -> None:
    from envbuild.build import passes

    os.mkfifo(cache / name, 0o600)
    if name == wheelhashes.FILE_NAME:
        assert finishes(wheelhashes.load) == {}
    elif name.startswith("matrix"):
        assert finishes(lambda: compiled.read(cache / name, "k")) is None
    else:
        store = passes.FileStore("k", "here", path=cache / name)
        assert finishes(lambda: store.find("sha256:1")) is None


def test_a_cache_file_past_its_cap_is_a_miss(cache: Path) -> None:
    path = cache / wheelhashes.FILE_NAME
    with open(path, "wb") as f:
        f.truncate(usercache.MAX_BYTES + 1)  # sparse: no disk used
    path.chmod(0o600)
    assert finishes(wheelhashes.load) == {}


def test_a_fifo_among_the_cdi_specs_is_skipped(tmp_path: Path) -> None:
    from envbuild.host.probe import probe_cdi

    (tmp_path / "a-nvidia.yaml").write_text(
        'cdiVersion: "0.5.0"\nkind: nvidia.com/gpu\ndevices:\n- name: "0"\n'
    )
    os.mkfifo(tmp_path / "b-planted.yaml")
    os.symlink("/dev/zero", tmp_path / "c-zero.json")
    specs = finishes(lambda: probe_cdi([str(tmp_path)]))
    assert [Path(s["path"]).name for s in specs] == ["a-nvidia.yaml"]


def test_a_file_url_requirement_naming_a_fifo_never_reaches_uv(tmp_path: Path) -> None:
    fifo = tmp_path / "envbuild_probe-1.0-py3-none-any.whl"
    os.mkfifo(fifo)
    image = copy_example(tmp_path, "torch-train")
    request = image / "envbuild.toml"
    request.write_text(
        request.read_text().replace(
            'requirements = ["numpy<3"]', f'requirements = ["numpy<3", "probe @ file://{fifo}"]'
        )
    )
    env = fake_uv(tmp_path / "uv")
    out = finishes(lambda: run("lock", "--offline", str(image), env=env))
    assert_clear_error(out, 2, names="a FIFO")
    assert not (tmp_path / "uv" / "uv-calls.jsonl").exists(), "uv was started"


# --- network answers --------------------------------------------------------------------------


class Server:
    """A local HTTP/1.1 server that answers every request with `headers` and then feeds the
    body from `body()` (an iterator of byte strings), counting what it managed to send."""

    def __init__(self, headers: str, body: Callable[[], Iterator[bytes]]) -> None:
        self.headers = headers
        self.body = body
        self.sent = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                first = conn.recv(65536)
                if not first.startswith((b"GET", b"HEAD")):
                    return  # a TLS hello: close, as a plain-HTTP server would fail it
                conn.sendall(self.headers.encode())
                for chunk in self.body():
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()


def _trickle() -> Iterator[bytes]:
    while True:
        yield b"{"
        time.sleep(0.2)


def _huge() -> Iterator[bytes]:
    block = b" " * (1 << 20)
    for _ in range(200):
        yield block


MANIFEST = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"


def test_a_registry_that_trickles_its_manifest_is_given_up_in_total_time() -> None:
    server = Server(MANIFEST, _trickle)
    try:
        started = time.monotonic()
        ref = f"127.0.0.1:{server.port}/team/base:1"
        got = finishes(lambda: registry.registry_digest(ref, timeout=5, retries=0, total_s=2))
        assert got is None
        assert time.monotonic() - started < 10  # the total, not 5 s per byte for ever
    finally:
        server.close()


def test_a_huge_registry_answer_is_not_read_past_its_cap() -> None:
    server = Server(MANIFEST, _huge)
    try:
        ref = f"127.0.0.1:{server.port}/team/base:1"
        assert finishes(lambda: registry.registry_digest(ref, retries=0)) is None
        time.sleep(0.5)
        # The cap is 4 MiB; what the kernel's socket buffers took is all the server got out.
        assert server.sent < 40 << 20, server.sent
    finally:
        server.close()


def test_an_index_that_trickles_is_unreachable_in_total_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envbuild.core.errors import SourceUnreachableError

    monkeypatch.setattr(pypi, "TOTAL_S", 2.0)
    server = Server(MANIFEST, _trickle)
    try:
        fetcher = pypi.Fetcher(cache_dir=tmp_path / "http", use_cache=False)

        def fetch() -> str:
            try:
                fetcher.get(f"http://127.0.0.1:{server.port}/simple/torch/", what="the index")
            except SourceUnreachableError as err:
                return str(err)
            return "answered"

        assert "did not arrive in time" in finishes(fetch)
    finally:
        server.close()


# --- validate --hosts: linear in the hosts (the figures: benchmarks/RESULTS.md, section 2) -----


def test_a_fleet_parses_each_gpu_name_and_the_arch_rules_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work per host is the host's own: the matrix's arch rules are built once per fleet and
    a GPU name is looked up once, not once per host (no timing here)."""
    import json

    from envbuild.cuda import archs
    from envbuild.preflight import validate as pre

    from_archs = archs.ArchRules.from_archs
    counts = {"rules": 0, "names": 0}

    def counting_rules(*args: Any, **kwargs: Any) -> Any:
        counts["rules"] += 1
        return from_archs(*args, **kwargs)

    parse_gpu = pre.parse_gpu  # type: ignore[attr-defined]

    def counting_parse(*args: Any, **kwargs: Any) -> Any:
        counts["names"] += 1
        return parse_gpu(*args, **kwargs)

    lines = (Path(__file__).parents[1] / "fixtures/hosts/fleet-handwritten.jsonl").read_text()
    docs = [json.loads(line) for line in lines.splitlines()]
    hosts = tmp_path / "hosts.jsonl"
    hosts.write_text(
        "".join(
            json.dumps({**docs[i % len(docs)], "name": f"node-{i}"}) + "\n" for i in range(2000)
        )
    )
    monkeypatch.setattr(archs.ArchRules, "from_archs", staticmethod(counting_rules))
    monkeypatch.setattr(pre, "parse_gpu", counting_parse)
    image = copy_example(tmp_path, "torch-train")
    out = run("validate", "--hosts", str(hosts), "--lock", str(image), "--json")
    assert out.code in (0, 1), out.text
    assert len(json.loads(out.out)["results"]) == 2000
    assert counts["rules"] <= 2, counts  # the fleet's, and validate's own start
    names = {g["name"] for d in docs for g in d.get("gpus", []) if "cc" not in g}
    assert counts["names"] <= len(names), counts

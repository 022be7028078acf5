"""A slow engine is not a dead engine (envbuild.engine.docker `answered_by`, `_wait`).

The defect: under load `make e2e` failed once with exit 4: one poll of the smoke container
got no answer within docker-py's 120 s read timeout and the whole gate was given up, though
the smoke's own deadline had not passed. Now a poll that times out is asked again until that
deadline; only a refused connection or the deadline ends the run.

The engine case is real: docker-py talks to the local engine through a small proxy on a unix
socket that holds the first inspect requests longer than the client's read timeout (lowered
to 1 s for the test, the only change from production). The retry rule itself is unit-tested
with a stepped clock.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests.exceptions
import urllib3
import urllib3.exceptions

from envbuild.core.errors import EngineError
from envbuild.engine.docker import DockerEngine, answered_by, stalled
from envbuild.engine.protocol import RunSpec
from tests.reliability.helpers import E2E_BASE, docker_ok

ENGINE_SOCKET = "/var/run/docker.sock"


class Clock:
    """A clock that moves on by `step` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _asker(*answers: BaseException | str) -> tuple[list[int], Callable[[], str]]:
    calls = [0]

    def ask() -> str:
        answer = answers[min(calls[0], len(answers) - 1)]
        calls[0] += 1
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return calls, ask


def test_a_timed_out_poll_is_asked_again_until_it_is_answered() -> None:
    calls, ask = _asker(
        requests.exceptions.ReadTimeout("slow"), requests.exceptions.ReadTimeout("slow"), "running"
    )
    assert answered_by(100.0, ask, clock=Clock(1.0)) == (True, "running")
    assert calls[0] == 3


def test_a_poll_that_times_out_until_the_deadline_is_no_answer() -> None:
    calls, ask = _asker(requests.exceptions.ReadTimeout("slow"))
    assert answered_by(10.0, ask, clock=Clock(1.0)) == (False, None)
    assert calls[0] == 10  # asked again at every clock reading before the deadline


def test_a_refused_connection_ends_it_at_once() -> None:
    refused = requests.exceptions.ConnectionError("Connection refused")
    calls, ask = _asker(requests.exceptions.ReadTimeout("slow"), refused)
    with pytest.raises(requests.exceptions.ConnectionError):
        answered_by(100.0, ask, clock=Clock(1.0))
    assert calls[0] == 2


def test_a_stall_while_reading_the_body_is_a_stall() -> None:
    # requests raises a body read timeout as ConnectionError(ReadTimeoutError) (iter_content).
    pool = urllib3.HTTPConnectionPool("localhost")
    inner = urllib3.exceptions.ReadTimeoutError(pool, "/containers/x/json", "Read timed out.")
    assert stalled(requests.exceptions.ConnectionError(inner))
    assert stalled(requests.exceptions.ConnectTimeout("backlog full"))
    assert not stalled(requests.exceptions.ConnectionError("Connection refused"))
    assert not stalled(ValueError("no"))


# --- the real engine behind a proxy that stalls ---------------------------------------------


class StallingProxy:
    """A unix-socket proxy to the engine that holds the first `stalls` container-inspect
    requests after a container start (the smoke's polls) for `hold_s` seconds and then drops
    them (the client has given up by then)."""

    def __init__(
        self, path: Path, *, stalls: int, hold_s: float, window_s: float = float("inf")
    ) -> None:
        self.path = path
        self.stalls = stalls
        self.hold_s = hold_s
        self.held = 0
        self.started = False
        self.window_s = window_s
        """Seconds after the start during which polls are held; later ones are answered."""
        self.start_at = 0.0
        self.lock = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _hold(self, data: bytes) -> bool:
        line = data.split(b"\r\n", 1)[0]
        if line.startswith(b"POST ") and b"/start" in line:
            self.started, self.start_at = True, time.monotonic()
        if time.monotonic() - self.start_at > self.window_s:
            return False
        if not self.started or not (
            line.startswith(b"GET ") and b"/containers/" in line and b"/json" in line
        ):
            return False
        with self.lock:
            if self.held >= self.stalls:
                return False
            self.held += 1
            return True

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(ENGINE_SOCKET)
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self._hold(data):
                    time.sleep(self.hold_s)
                    break
                upstream.sendall(data)
        for s in (client, upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)

    def close(self) -> None:
        self.server.close()


def _ours(marker: str) -> list[str]:
    """The containers (any state) this test labelled: other users share the engine."""
    done = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label=envbuild.test={marker}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[StallingProxy]:
    if not (os.path.exists(ENGINE_SOCKET) and docker_ok()):
        pytest.skip(f"no Docker engine at {ENGINE_SOCKET}, or {E2E_BASE} is missing")
    p = StallingProxy(tmp_path / "slow.sock", stalls=2, hold_s=2.5)
    yield p
    p.close()


@pytest.mark.engine
def test_a_smoke_run_survives_polls_the_engine_answers_too_late(proxy: StallingProxy) -> None:
    engine = DockerEngine(base_url=f"unix://{proxy.path}")
    engine.client.api.timeout = 1  # docker-py's read timeout, 120 s in production
    marker = f"slow-engine-{uuid.uuid4().hex}"
    spec = RunSpec(
        image=E2E_BASE,
        command=("sh", "-c", "sleep 2; echo smoke-done"),
        gpus=False,
        timeout_s=60,
        labels={"envbuild.role": "smoke", "envbuild.test": marker},
    )
    result = engine.run(spec)
    assert proxy.held == 2  # two polls were held past the client's timeout
    assert (result.exit_code, result.timed_out) == (0, False), result
    assert "smoke-done" in result.stdout
    assert _ours(marker) == [], "the smoke container was left"


@pytest.mark.engine
def test_the_smoke_deadline_still_ends_a_run_whose_polls_all_stall(tmp_path: Path) -> None:
    if not (os.path.exists(ENGINE_SOCKET) and docker_ok()):
        pytest.skip(f"no Docker engine at {ENGINE_SOCKET}, or {E2E_BASE} is missing")
    # Every poll until past the deadline is held; then the engine answers again.
    proxy = StallingProxy(tmp_path / "dead.sock", stalls=10**6, hold_s=1.5, window_s=5)
    marker = f"slow-engine-{uuid.uuid4().hex}"
    try:
        engine = DockerEngine(base_url=f"unix://{proxy.path}")
        engine.client.api.timeout = 1
        spec = RunSpec(
            image=E2E_BASE,
            command=("sleep", "30"),
            gpus=False,
            timeout_s=3,
            labels={"envbuild.role": "smoke", "envbuild.test": marker},
        )
        started = time.monotonic()
        result = engine.run(spec)
        # Every poll stalled: the deadline, not the first stall, ended it (killed; `image`
        # reports a smoke timeout, exit 6).
        assert result.timed_out and result.exit_code is None
        assert proxy.held >= 2
        assert 3 <= time.monotonic() - started < 30
        assert _ours(marker) == [], "the smoke container was left"
    except EngineError as err:
        raise AssertionError(f"a stalled poll ended the run: {err}") from None
    finally:
        proxy.close()

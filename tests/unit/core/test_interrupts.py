"""A signal inside a child's start is held and delivered once the child is the caller's."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.cli.main import Terminated, raise_terminated
from envbuild.core import interrupts
from envbuild.lock.pins import run_subprocess


@pytest.fixture
def handler() -> object:
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_inside_the_start_is_raised_at_release(handler: object) -> None:
    held = interrupts.start_child()
    signal.raise_signal(signal.SIGTERM)  # lands inside the window: noted, not raised
    with pytest.raises(Terminated) as info:
        held.release()
    assert info.value.exit_code == 143
    held.release()  # idempotent: nothing pending any more


def test_without_a_window_the_handler_raises_at_once(handler: object) -> None:
    with pytest.raises(Terminated):
        signal.raise_signal(signal.SIGTERM)


def test_a_sigterm_during_the_start_of_uv_still_stops_it(
    handler: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal arrives while Popen is starting the child (here: from inside Popen's own
    call, the window the real race hits); the child is killed, never left running."""
    started: list[subprocess.Popen[str]] = []
    real = subprocess.Popen

    class Starting(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(subprocess, "Popen", Starting)
    with pytest.raises(Terminated):
        run_subprocess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, {})
    (child,) = started
    assert child.wait(timeout=10) != 0  # killed, not left sleeping

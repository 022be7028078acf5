"""SIGTERM and SIGHUP held while a child process starts.

envbuild's handler (`envbuild.cli.main.raise_terminated`) raises an exception where the signal
lands, so that every `finally` stops what was started. One place it must not land: inside
`subprocess.Popen(...)` after the fork, before the Popen object is returned. There the
exception leaves the constructor, nobody holds the child, and a uv started for a lock keeps
running after envbuild is gone (tests/reliability/test_signals_round3.py caught it).

`start_child` is that window: a signal arriving inside it is noted (`deferred`) and sent
again to this process when the caller says the child is held (`Held.release`), so it lands
where the caller's `except` kills the child.
"""

from __future__ import annotations

import os
import signal
import threading

_lock = threading.Lock()
_holders = 0
_pending: list[int] = []


def deferred(signum: int) -> bool:
    """Called by the signal handler first: True when a child is being started (the signal is
    kept for later and the handler must return without raising)."""
    if _holders > 0:
        _pending.append(signum)
        return True
    return False


class Held:
    """The window of one child's start; `release()` once the child is in the caller's hands
    (idempotent, and also what leaving a `with` does)."""

    def __init__(self) -> None:
        global _holders
        with _lock:
            _holders += 1
        self._open = True

    def release(self) -> None:
        global _holders
        if not self._open:
            return
        self._open = False
        with _lock:
            _holders -= 1
            signum = _pending[0] if _holders == 0 and _pending else None
            if _holders == 0:
                _pending.clear()
        if signum is not None:
            os.kill(os.getpid(), signum)  # delivered now: the handler raises where we are
            signal.getsignal(signum)  # a bytecode boundary for the handler to run at

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def start_child() -> Held:
    return Held()

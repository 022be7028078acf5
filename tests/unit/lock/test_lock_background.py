"""envbuild/app/lock_background.py `in_background`: the daemon thread of the lock's side jobs."""

from __future__ import annotations

import threading

import pytest

from envbuild.app import lock_background as lock


def test_a_job_waiting_for_uv_ends_when_uv_never_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock that fails before it starts uv never sets the event: the thread still ends."""
    monkeypatch.setattr(lock, "AFTER_WAIT_S", 0.01)
    ran = threading.Event()
    lock.in_background(ran.set, after=threading.Event())  # nobody asks for the result
    assert ran.wait(timeout=30), "the job never ran: its thread waits forever"


def test_a_job_hands_over_its_value_or_its_error() -> None:
    assert lock.in_background(lambda: 42)() == 42

    def fails() -> None:
        raise ValueError("the registry answered nonsense")

    with pytest.raises(ValueError, match="nonsense"):
        lock.in_background(fails)()

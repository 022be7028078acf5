"""The lock's side jobs in daemon threads (the base image's digest, the matrix rows'
fingerprints) while uv pins, and the runner that says when uv starts (envbuild.app.lock)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envbuild.lock import pins as pydeps


def signalling(runner: pydeps.Runner, started: threading.Event) -> pydeps.Runner:
    """`runner` that sets `started` as it starts the resolver's process."""

    def run(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> pydeps.RunResult:
        started.set()
        return runner(argv, cwd, env)

    return run


AFTER_WAIT_S = 30.0


def in_background(
    fn: Callable[[], Any], *, after: threading.Event | None = None
) -> Callable[[], Any]:
    """Run `fn` in a daemon thread (once `after` is set, if given: asking for the result sets
    it); the returned callable waits for its result (or raises its error). Daemon: a registry
    that hangs cannot hold the process after a failed pin."""
    box: dict[str, Any] = {}

    def run() -> None:
        if after is not None:
            # Bounded: a lock that fails before it starts uv never sets `after`, and the
            # thread must still end (a test session runs many such locks in one process).
            after.wait(timeout=AFTER_WAIT_S)
        try:
            box["value"] = fn()
            import tomlkit  # noqa: F401  (what `dumps` needs, loaded while uv still runs)
        except BaseException as exc:  # handed to the caller
            box.setdefault("error", exc)

    thread = threading.Thread(target=run, name="envbuild-lock-background", daemon=True)
    thread.start()

    def result() -> Any:
        if after is not None:
            after.set()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    return result

"""The project's own smoke step (`[smoke] command`): run in the candidate after the built-in
payload passed, in a second container attached exactly like the payload's (same GPUs, /dev/shm
and time limit: `envbuild.smoke.plan.kill_after_s`), before anything is tagged.

No docker here: it runs through any `ContainerEngine`. Its record (command, exit code, time,
the tail of its output) goes into the `envbuild.smoke.report` label and `image --json`.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from envbuild.core.documents import json_loads
from envbuild.core.errors import EnvbuildError, SmokeFailed
from envbuild.engine.protocol import ContainerEngine, ProgressFn, RunResult, RunSpec
from envbuild.smoke.container import left_behind_note
from envbuild.smoke.plan import PAYLOAD_DIR

WATCH_MARK = "ENVBUILD-WATCH-REPORT "
"""The line the payload's watcher (envbuild/payload/watch.py, `--out -`) ends stderr with."""

TAIL_LINES = 20
SMOKE_ENV = "ENVBUILD_SMOKE"
"""Set to 1 in the container, so a project can tell a smoke run from a real one."""


def _tail(text: str, n: int = TAIL_LINES) -> list[str]:
    return [line for line in text.splitlines() if line.strip()][-n:]


# What a failed write prints: OSError's strerror (Python), its class name, the errno name (C).
_PERMISSION = re.compile(r"Permission denied|PermissionError|EACCES")
PERMISSION_HINT = (
    "it could not write a file (Permission denied): the image runs as uid 1000, which owns "
    "/app (the working directory, where the project's code is) and may write /tmp and a "
    "mounted volume; write checkpoints and logs there (a relative path lands in /app), not "
    "under /opt/venv or /"
)


def watched(command: Sequence[str]) -> tuple[str, ...]:
    """The command under the payload's watcher, which samples the GPUs (utilisation, memory,
    power, temperature, clocks, throttling) and the command's CPU while it runs, passes its
    output through and exits with its exit code."""
    return ("python", f"{PAYLOAD_DIR}/watch.py", "--out", "-", "--", *command)


def split_watch(stderr: str) -> tuple[str, dict[str, Any] | None]:
    """The command's own stderr, and the watcher's record (None when it wrote none)."""
    head, sep, tail = stderr.rpartition(WATCH_MARK)
    if not sep:
        return stderr, None
    line, _, rest = tail.partition("\n")
    try:
        found = json_loads(line)
    except (EnvbuildError, ValueError):
        return stderr, None
    if not isinstance(found, dict):
        return stderr, None
    return head + rest, found


def record(command: Sequence[str], result: RunResult) -> dict[str, Any]:
    """What the report keeps of one run of the command (its output without the watcher's
    line, and the watcher's GPU series as `watch`); a failed run that could not write a file
    also keeps a `hint` that says where the runtime user may write."""
    stderr, watch = split_watch(result.stderr)
    done: dict[str, Any] = {
        "command": list(command),
        "ok": result.exit_code == 0 and not result.timed_out,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "duration_s": round(result.duration_s, 3),
        "stdout_tail": _tail(result.stdout),
        "stderr_tail": _tail(stderr),
    }
    if watch is not None:
        done["watch"] = {k: watch[k] for k in ("peaks", "telemetry", "readings") if k in watch}
    if not done["ok"] and any(_PERMISSION.search(line) for line in done["stderr_tail"]):
        done["hint"] = PERMISSION_HINT
    return done


def run_command(
    engine: ContainerEngine,
    payload_spec: RunSpec,
    command: Sequence[str],
    *,
    name: str,
    keep_failed: bool,
    candidate: str,
    progress: ProgressFn,
    report: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the project's smoke `command` like the payload ran (`payload_spec` with another
    command); its record, or SmokeFailed (exit 6) when it fails or runs out of time. Takes
    the job's fields, not the job: the smoke stage sits below the build stage. `report` is
    the payload's, which passed before this step ran: a failure keeps it in its fields, so
    envbuild's own checks are not lost with the project's step."""
    shown = shlex.join(command)
    progress(f"running the project's smoke command: {shown}")
    spec = dataclasses.replace(
        payload_spec,
        command=watched(command),
        environment={**payload_spec.environment, SMOKE_ENV: "1"},
    )
    result = engine.run(spec)
    if note := left_behind_note(result):
        progress(note)
    done = record(command, result)
    if done["ok"]:
        # The command's part of the smoke time (`smoke_command.duration_s`), named as such.
        progress(f"the project's smoke command passed in {done['duration_s']:.1f} s")
        return done
    keep_note = (
        f"the candidate is kept as {candidate} (docker run --rm -it {candidate} {shown})"
        if keep_failed
        else "rerun with --keep-failed to keep the candidate and run the command by hand"
    )
    if result.timed_out:
        why = f"did not finish within {spec.timeout_s} s and was killed"
        hint = f"make the smoke command shorter, or raise smoke.timeout_s; {keep_note}"
    else:
        why = f"exited {result.exit_code} after {result.duration_s:.1f} s"
        hint = f"read its output above (stdout_tail/stderr_tail in --json); {keep_note}"
        if "hint" in done:
            why += ": " + done["hint"]
            hint = f"write to /app, /tmp or a mounted volume; {keep_note}"
    raise SmokeFailed(
        f"the project's smoke command `{shown}` of {name} {why}; no tag was written",
        hint=hint,
        fields={
            "tag": None,
            "candidate_id": candidate if keep_failed else None,
            "kept": keep_failed,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration_s": result.duration_s,
            "stderr_tail": done["stderr_tail"],
            "stdout_tail": done["stdout_tail"],
            "failed": [],
            "report": dict(report) if report is not None else None,
            "smoke_command": done,
        },
    )

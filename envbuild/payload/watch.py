"""Watch the GPUs while a command runs: `python -m envbuild.payload.watch --out FILE -- CMD ...`
(or `python /opt/envbuild/payload/watch.py --out FILE -- CMD ...` inside an image).

Runs CMD as a child (stdin/stdout/stderr passed through), samples every GPU and the child's CPU
use while it runs (telemetry.Sampler), writes {"schema", "command", "exit_code", "duration_s",
"peaks", "telemetry", "readings"} to FILE, and exits with the child's exit code (128 + N when a
signal N ended it, 127 when it could not start). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

if not __package__:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    from . import gpu_read, telemetry
    from . import readings as rd
except ImportError:  # run as a file inside an image: siblings are top-level
    import gpu_read  # type: ignore[no-redef,import-not-found]
    import readings as rd  # type: ignore[no-redef,import-not-found]
    import telemetry  # type: ignore[no-redef,import-not-found]

WATCH_SCHEMA = 1
REPORT_MARK = "ENVBUILD-WATCH-REPORT "
"""With `--out -`: the record's line on stderr (envbuild.smoke.project_step reads it back from
the container's output, which is all a runner keeps of a container that is gone)."""
FORWARDED = (signal.SIGINT, signal.SIGTERM)


def _args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m envbuild.payload.watch",
        description="Run a command and record a GPU/CPU time series while it runs.",
    )
    parser.add_argument(
        "--out",
        required=True,
        help=f"where the series JSON goes; '-': one line '{REPORT_MARK}JSON' on stderr at the end",
    )
    parser.add_argument("--interval", type=float, default=None, help="seconds (default: measured)")
    parser.add_argument("--max-samples", type=int, default=telemetry.MAX_SAMPLES)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    ns = parser.parse_args(list(argv))
    if ns.cmd and ns.cmd[0] == "--":
        ns.cmd = ns.cmd[1:]
    if not ns.cmd:
        parser.error("no command to watch: add -- CMD ARGS...")
    return ns


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run(
    cmd: Sequence[str],
    out: str,
    *,
    interval: float | None = None,
    max_samples: int = telemetry.MAX_SAMPLES,
    open_reader: Callable[[], tuple[Any, str | None]] = gpu_read.open_reader,
) -> int:
    """Run `cmd` under the sampler, write the record to `out`; the exit code to pass on."""
    t0 = time.monotonic()
    try:
        child = subprocess.Popen(list(cmd))
    except OSError as exc:
        why = f"cannot start {cmd[0]!r}: {exc}"
        _write(out, {"schema": WATCH_SCHEMA, "command": list(cmd), "exit_code": 127, "error": why})
        print(f"watch: {why}", file=sys.stderr)
        return 127
    sampler = telemetry.Sampler(
        open_reader=open_reader,
        cpu_seconds=lambda: telemetry.proc_cpu_seconds(child.pid),
        interval=interval,
        max_samples=max_samples,
    )
    sampler.start()
    previous = {s: signal.signal(s, lambda n, _f: child.send_signal(n)) for s in FORWARDED}
    try:
        returncode = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    got = sampler.stop()
    record = {
        "schema": WATCH_SCHEMA,
        "command": list(cmd),
        "exit_code": _exit_code(returncode),
        "duration_s": round(time.monotonic() - t0, 3),
        "peaks": got["peaks"],
        "telemetry": got["telemetry"],
        "readings": rd.readings(got["telemetry"]["series"]) if got["peaks"]["samples"] else [],
    }
    _write(out, record)
    return int(record["exit_code"])


def _write(path: str, record: dict[str, Any]) -> None:
    """The record to `path`, or on stderr for "-". A path that cannot be written (no such
    folder, read-only, full) puts the record on stderr instead: the watcher must pass the
    child's exit code on, not end a finished training run with a traceback."""
    if path != "-":
        tmp = f"{path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(record, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, path)
            return
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            print(
                f"watch: cannot write {path}: {exc}; the record follows on stderr", file=sys.stderr
            )
    sys.stderr.write(REPORT_MARK + json.dumps(record, sort_keys=True, separators=(",", ":")))
    sys.stderr.write("\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    ns = _args(sys.argv[1:] if argv is None else argv)
    return run(ns.cmd, ns.out, interval=ns.interval, max_samples=ns.max_samples)


if __name__ == "__main__":
    sys.exit(main())

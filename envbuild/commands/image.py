"""`envbuild image DIR`: build, smoke-test in the container, tag only on pass."""

from __future__ import annotations

import shutil
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import click

from envbuild import console
from envbuild.commands.options import build_inputs
from envbuild.errors import SmokeFailed

WIDTH_FALLBACK = 100


class Progress:
    """Build output on stderr: plain lines when not a terminal (CI logs keep everything); on a
    terminal, step lines stay and each step's output shows on one line that is overwritten."""

    def __init__(self, stream: TextIO, *, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self._transient = False
        self.width = shutil.get_terminal_size((WIDTH_FALLBACK, 20)).columns

    def __call__(self, line: str) -> None:
        if not self.tty:
            click.echo(line, file=self.stream)
            return
        permanent = line.startswith(("Step ", "candidate ", "#")) and " ---> " not in line
        if permanent:
            self._clear()
            click.echo(line[: self.width - 1], file=self.stream)
        else:
            text = "  " + line.strip()
            click.echo("\r\x1b[K" + text[: self.width - 1], file=self.stream, nl=False, color=True)
            self._transient = True

    def _clear(self) -> None:
        if self._transient:
            click.echo("\r\x1b[K", file=self.stream, nl=False, color=True)
            self._transient = False

    def close(self) -> None:
        self._clear()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _print_outcome(doc: dict[str, Any]) -> None:
    smoke = doc.get("smoke") or {}
    checks = smoke.get("checks") or []
    # Counted per status: on the CPU path most GPU checks are skipped or warn, and "2/9
    # passed" would read like a failure.
    counts: dict[str, int] = {}
    for c in checks:
        if isinstance(c, dict):
            counts[str(c.get("status"))] = counts.get(str(c.get("status")), 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    console.line(f"tagged {doc['tag']} ({doc['image_id']})")
    if doc.get("smoke_summary"):
        console.line(f"  {doc['smoke_summary']}")
    device = doc.get("device") or "?"
    console.line(
        f"  smoke:  pass on {device}"
        + (f", checks: {tally}" if tally else "")
        + f" in {doc['smoke_s']:.1f} s (build {doc['build_s']:.0f} s)"
    )
    if doc["base_image_replaced"]:
        console.line(f"  base:   {doc['base_image']} (replaces {doc['locked_base_image']})")
    else:
        console.line(f"  base:   {doc['base_image']}")
    console.line(f"  labels: {', '.join(doc['labels'])}")


def _print_failure(err: SmokeFailed) -> None:
    failed = err.fields.get("failed") or []
    for check in failed:
        figure = f" ({check['figure']})" if check.get("figure") else ""
        console.warn(f"failed check {check.get('name')}{figure}")
        if check.get("hint"):
            click.echo(f"    fix: {check['hint']}", err=True)
    tail = err.fields.get("stderr_tail") or []
    if not failed and tail:
        click.echo("last lines of the payload's stderr:", err=True)
        for line in tail[-10:]:
            click.echo(f"  | {line}", err=True)


@click.command("image")
@click.argument("image_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--tag", "tag", help="Tag for the passing image [envbuild/<name>:<lock sha>].")
@click.option("--allow-cpu", is_flag=True, help="Run the smoke test's CPU path (no GPU here).")
@click.option(
    "--smoke-timeout",
    type=click.IntRange(min=1),
    help="Seconds before the smoke container is killed [the lock's smoke.timeout_s].",
)
@click.option("--keep-failed", is_flag=True, help="Keep the candidate image when smoke fails.")
@build_inputs
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def command(
    image_dir: Path,
    tag: str | None,
    base_image: str | None,
    allow_cpu: bool,
    ca_cert: Path | None,
    find_links: Path | None,
    index_url: str | None,
    smoke_timeout: int | None,
    keep_failed: bool,
    buildkit: bool,
    as_json: bool,
) -> None:
    """Build IMAGE_DIR's locked image, smoke-test it in a container, tag it only on pass.

    Exit codes: 0 tagged; 1 stale lock; 2 bad input; 3 disk full; 4 engine; 5 build step
    failed; 6 smoke test failed; 7 GPU image but no GPU runtime (pass --allow-cpu).
    """
    from envbuild import api

    progress = Progress(sys.stderr, tty=sys.stderr.isatty())
    # A CI runner stops jobs with SIGTERM: turn it into the Ctrl-C path, whose `finally`
    # blocks remove the smoke container and the candidate (Python's default dies without them).
    main = threading.current_thread() is threading.main_thread()  # signal() needs main
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        outcome = api.build_image(
            image_dir=image_dir,
            tag=tag,
            base_image=base_image,
            allow_cpu=allow_cpu,
            ca_cert=ca_cert,
            find_links=find_links,
            index_url=index_url,
            smoke_timeout=smoke_timeout,
            keep_failed=keep_failed,
            buildkit=buildkit,
            progress=progress,
        )
    except SmokeFailed as err:
        progress.close()
        if not as_json:
            _print_failure(err)
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        progress.close()
    doc = outcome.to_json()
    if as_json:
        console.emit_json(doc)
    else:
        _print_outcome(doc)

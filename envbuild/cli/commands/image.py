"""`envbuild image DIR`: build, smoke-test in the container, tag only on pass."""

from __future__ import annotations

import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

import click

from envbuild.cli import console
from envbuild.cli.main import raise_terminated
from envbuild.cli.options import (
    build_inputs,
    gpu_choice,
    help_epilog,
    matrix_overlay,
    report_page,
)
from envbuild.core.errors import EnvbuildError, SmokeFailed
from envbuild.engine import select as engines
from envbuild.host.gpu_attach import GpuChoice
from envbuild.render.dockerfile import BuildInputs

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
        permanent = (
            line.startswith(("Step ", "STEP ", "candidate ", "#", "saving ", "pushing "))
            and " ---> " not in line
        )
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
    reused = doc.get("smoke_reused")
    if reused and reused.get("scope") == "environment":
        console.line(
            f"  smoke:  environment passed on {device} at {reused.get('passed_at')} "
            f"({reused.get('where')}); only the project's code changed since, so only its "
            f"smoke step ran (--resmoke runs the whole test) (build {doc['build_s']:.0f} s)"
        )
    elif reused:
        console.line(
            f"  smoke:  passed on {device} at {reused.get('passed_at')} ({reused.get('where')}); "
            f"this image id was not tested again (--resmoke runs it) (build {doc['build_s']:.0f} s)"
        )
    else:
        console.line(
            f"  smoke:  pass on {device}"
            + (f", checks: {tally}" if tally else "")
            + f" in {_smoke_time(doc)} (build {doc['build_s']:.0f} s)"
        )
    command = doc.get("smoke_command")
    if command:
        console.line(f"  command: pass `{' '.join(command['command'])}`")
    if doc["base_image_replaced"]:
        console.line(f"  base:   {doc['base_image']} (replaces {doc['locked_base_image']})")
    else:
        console.line(f"  base:   {doc['base_image']}")
    console.line(f"  labels: {', '.join(doc['labels'])}")
    fit = doc.get("memory_fit")
    if fit:
        console.line(f"  memory: {fit['summary']}")
    attached = doc.get("gpu_attach")
    if attached:
        devices = ", ".join(attached["devices"])
        console.line(f"  gpus:   {attached['way']} ({devices}): {attached['reason']}")
    if doc.get("builder"):
        console.line(f"  builder: {doc['builder']}")
    saved = doc.get("saved")
    if saved:
        console.line(f"  saved:  {saved['path']} ({saved['bytes'] / 1e6:.0f} MB, docker-archive)")
    pushed = doc.get("pushed")
    if pushed:
        console.line(f"  pushed: {pushed['repo_digest']}")
    evidence = doc.get("evidence")
    if evidence and evidence.get("bundle"):
        console.line(f"  signed: {evidence['bundle']} (smoke attestation, SBOM {evidence['sbom']})")


def _smoke_time(doc: dict[str, Any]) -> str:
    """`smoke_s`, the one smoke time, with its parts named when the project has a step."""
    total = f"{doc['smoke_s']:.1f} s"
    command = doc.get("smoke_command")
    if not command:
        return total
    return (
        f"{total} (payload {doc['smoke_payload_s']:.1f} s + command {command['duration_s']:.1f} s)"
    )


def _print_failure(err: SmokeFailed) -> None:
    failed = err.fields.get("failed") or []
    for check in failed:
        figure = f" ({check['figure']})" if check.get("figure") else ""
        console.warn(f"failed check {check.get('name')}{figure}")
        if check.get("hint"):
            click.echo(f"    fix: {check['hint']}", err=True)
    # The project's smoke command (its stdout too), or the payload.
    who = "the smoke command's" if err.fields.get("smoke_command") else "the payload's"
    out = err.fields.get("stdout_tail") or []
    if not failed and out:
        click.echo(f"last lines of {who} stdout:", err=True)
        for line in out[-10:]:
            click.echo(f"  | {line}", err=True)
    tail = err.fields.get("stderr_tail") or []
    if not failed and tail:
        click.echo(f"last lines of {who} stderr:", err=True)
        for line in tail[-10:]:
            click.echo(f"  | {line}", err=True)


@click.command(
    "image",
    epilog=help_epilog(
        [
            "envbuild image images/torch-train",
            "envbuild image images/torch-train --tag registry.example.com/ml/torch:1 --json",
            "envbuild image images/torch-cpu --allow-cpu --keep-failed",
            "envbuild image images/torch-train --push registry.example.com/ml/torch:1 --json",
            "envbuild image images/torch-train --buildkit --cache-to type=inline",
            "envbuild image images/torch-train --save torch-train.tar --engine podman",
        ],
        [
            (0, "tagged"),
            (1, "stale lock"),
            (2, "bad input"),
            (3, "disk full"),
            (4, "engine"),
            (5, "build step failed"),
            (6, "smoke test failed"),
            (7, "GPU image but no way to attach a GPU (envbuild doctor; or --allow-cpu)"),
            (8, "passed and tagged, but the registry refused the push"),
        ],
    ),
)
@click.argument("image_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--tag", "tag", help="Tag for the passing image [envbuild/<name>:<lock sha>].")
@click.option("--allow-cpu", is_flag=True, help="Run the smoke test's CPU path (no GPU here).")
@click.option(
    "--smoke-timeout",
    type=click.IntRange(min=1),
    help="Seconds before the smoke container is killed [the lock's smoke.timeout_s + 60].",
)
@click.option("--keep-failed", is_flag=True, help="Keep the candidate image when smoke fails.")
@click.option(
    "--resmoke",
    is_flag=True,
    help="Run the smoke test even if this image id already passed it on this host.",
)
@click.option(
    "--push",
    "push",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[REF]",
    help="After a pass only: push to REF (default: the tag); prints the pushed digest.",
)
@click.option(
    "--save",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="After a pass only: write the image as a docker-archive "
    "(apptainer build x.sif docker-archive://FILE).",
)
@click.option(
    "--sign-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="ENVBUILD_SIGNING_KEY",
    metavar="KEY",
    help="After a pass only: sign a smoke attestation and the SBOM with this PEM private key "
    "(docs/evidence.md); written beside --save, into --evidence.",
)
@click.option(
    "--evidence",
    "evidence_dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="With --sign-key: also write NAME.intoto.jsonl and NAME.cdx.json into DIR.",
)
@click.option(
    "--engine",
    type=click.Choice(list(engines.ENGINE_NAMES)),
    default=engines.DEFAULT_ENGINE,
    envvar="ENVBUILD_ENGINE",
    help=" or ".join(k.summary for k in engines.ENGINES.values()) + f" [{engines.DEFAULT_ENGINE}].",
)
@click.option(
    "--cache-from",
    multiple=True,
    metavar="SPEC",
    help="BuildKit cache source for buildx, e.g. type=registry,ref=REG/IMG:cache.",
)
@click.option(
    "--cache-to",
    multiple=True,
    metavar="SPEC",
    help="BuildKit cache export for buildx, e.g. type=inline.",
)
@build_inputs
@gpu_choice
@report_page
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def command(
    image_dir: Path,
    tag: str | None,
    allow_cpu: bool,
    smoke_timeout: int | None,
    keep_failed: bool,
    resmoke: bool,
    push: str | None,
    save: Path | None,
    sign_key: Path | None,
    evidence_dir: Path | None,
    engine: str,
    cache_from: tuple[str, ...],
    cache_to: tuple[str, ...],
    build_inputs: BuildInputs,
    gpu: GpuChoice,
    report_path: Path | None,
    as_json: bool,
) -> None:
    """Build IMAGE_DIR's locked image, smoke-test it in a container, tag it only on pass."""
    from envbuild.app import image
    from envbuild.app import report as page

    page.check_path(report_path)

    progress = Progress(sys.stderr, tty=sys.stderr.isatty())
    # A CI runner stops jobs with SIGTERM: the Ctrl-C path, whose `finally` blocks remove
    # the smoke container and the candidate, then exit 143 (`main`'s handler; set here too
    # for a caller that runs the command in process).
    main = threading.current_thread() is threading.main_thread()  # signal() needs main
    previous = signal.signal(signal.SIGTERM, raise_terminated) if main else None
    try:
        outcome = image.build_image(
            image_dir=image_dir,
            request=image.ImageRequest(
                tag=tag,
                allow_cpu=allow_cpu,
                smoke_timeout=smoke_timeout,
                keep_failed=keep_failed,
                resmoke=resmoke,
                push=push,
                save=save,
                sign_key=sign_key,
                evidence=evidence_dir,
                engine=engine,
                cache_from=cache_from,
                cache_to=cache_to,
                gpu=gpu,
            ),
            build_inputs=build_inputs,
            progress=progress,
            matrix_overlay=matrix_overlay(),
        )
    except SmokeFailed as err:
        progress.close()
        if not as_json:
            _print_failure(err)
        _failed_page(report_path, image_dir, err, err.fields.get("report"))
        raise
    except EnvbuildError as err:
        _failed_page(report_path, image_dir, err, None)
        raise
    finally:
        # Not while a SIGTERM's cleanup runs (its handler is then `_cleaning_up`).
        if main and signal.getsignal(signal.SIGTERM) is raise_terminated:
            signal.signal(signal.SIGTERM, previous)
        progress.close()
    doc = _passed_doc(outcome, report_path)
    if as_json:
        console.emit_json(doc)
    else:
        _print_outcome(doc)


def _passed_doc(outcome: Any, report_path: Path | None) -> dict[str, Any]:
    """`image --json` of a pass, with its memory fit; the --report page written."""
    from envbuild.app import report as page

    doc: dict[str, Any] = outcome.to_json()
    doc["memory_fit"] = page.memory_fit(
        outcome.report,
        matrix_overlay(),
        targets=doc["target_gpus"],
        command=doc["smoke_command"],
    )
    if report_path is not None:
        page.write(
            report_path,
            title=f"envbuild image {doc['tag']}",
            ok=True,
            report=outcome.report,
            fit=doc["memory_fit"],
            command=doc["smoke_command"],
        )
    return doc


def _failed_page(
    path: Path | None, image_dir: Path, err: EnvbuildError, report: dict[str, Any] | None
) -> None:
    """A --report page of the failure: what the payload reported (if anything) and the error."""
    if path is None:
        return
    from envbuild.app import report as page

    page.write(
        path,
        title=f"envbuild image {image_dir}",
        ok=False,
        report=report,
        fit=page.memory_fit(report, matrix_overlay(), command=err.fields.get("smoke_command")),
        error=err.message,
        command=err.fields.get("smoke_command"),
    )

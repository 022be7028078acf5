"""The command line: parse, call one use case (`envbuild.app`), print.

Commands live one per module in `envbuild/cli/commands/` and are imported only when invoked, so
`envbuild --help` starts without importing jinja2, tomlkit, docker, pynvml or torch. This is
the one place that maps errors to exit codes (see `envbuild.core.errors`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from envbuild import __version__
from envbuild.cli.lazy import LazyGroup

if TYPE_CHECKING:
    from envbuild.core.errors import EnvbuildError

# name -> (module, one-line help). Help is duplicated here so `--help` needs no imports.
COMMANDS: dict[str, tuple[str, str]] = {
    "resolve": (
        "envbuild.cli.commands.resolve",
        "Pick a driver/CUDA/framework stack for the targets.",
    ),
    "lock": (
        "envbuild.cli.commands.lock",
        "Pin the whole stack of an image folder into envbuild.lock.",
    ),
    "render": (
        "envbuild.cli.commands.render",
        "Print or write the Dockerfile of a locked image folder.",
    ),
    "image": (
        "envbuild.cli.commands.image",
        "Build, smoke-test in the container, tag only on pass.",
    ),
    "smoke": ("envbuild.cli.commands.smoke", "Run the smoke payload on this host."),
    "doctor": (
        "envbuild.cli.commands.doctor",
        "Check this GPU host: driver, GPUs, engine, /dev/shm.",
    ),
    "validate": (
        "envbuild.cli.commands.validate",
        "Check that an image or lock runs on this host or fleet.",
    ),
    "verify": (
        "envbuild.cli.commands.verify",
        "Check an image's signed smoke attestation and SBOM.",
    ),
    "matrix": ("envbuild.cli.commands.matrix", "Check or refresh the compatibility matrix."),
    "promote": (
        "envbuild.cli.commands.promote",
        "Push a multi-arch index of images whose smoke test passed.",
    ),
    "fleet": (
        "envbuild.cli.commands.fleet",
        "Smoke-test an image on a Slurm or Kubernetes fleet; read the verdicts back.",
    ),
}

EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in envbuild, not in the user's input
# What a shell reports for a process killed by SIGPIPE (128 + 13): `envbuild render x | head`
# ends like `cat file | head` would, not as "a bug in envbuild" (exit 70).
EXIT_BROKEN_PIPE = 141
EXIT_TERMINATED = 143  # what a shell reports for a process ended by SIGTERM (128 + 15)


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, timeout, systemd, a CI runner) or SIGHUP (the terminal went away) raised
    as an exception, so every `finally` and `with` on the way out runs: temp folders go, uv and
    containers are stopped (whatever cleans up after Ctrl-C cleans up after these too)."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(signum)
        self.exit_code = 128 + signum


def _cleaning_up(signum: int, frame: object) -> None:
    """A second SIGTERM or SIGHUP while the first one's cleanup runs: the cleanup goes on (a
    CI runner sends SIGTERM twice before SIGKILL). Not SIG_IGN: that would be inherited by the
    programs the cleanup starts."""


def raise_terminated(signum: int, frame: object) -> None:
    """The SIGTERM and SIGHUP handler of every command (`main`, `envbuild image` in process).
    Inside a child's start it only notes the signal (`envbuild.core.interrupts`)."""
    import signal

    from envbuild.core import interrupts

    if interrupts.deferred(signum):
        return
    signal.signal(signal.SIGTERM, _cleaning_up)
    signal.signal(signal.SIGHUP, _cleaning_up)
    raise Terminated(signum)


def report_error(err: EnvbuildError, *, as_json: bool) -> None:
    """Print one error: JSON on stdout for --json, else a message and its next step on stderr."""
    import json

    from envbuild.core.documents import printable

    if as_json:
        click.echo(json.dumps(err.to_json(), sort_keys=True))
        return

    def safe(text: str) -> str:  # no terminal escapes from a quoted value (docs/reliability.md)
        return "\n".join(printable(part) for part in text.split("\n"))

    click.echo(f"error: {safe(err.message)}", err=True)
    if err.hint:
        click.echo(f"  next: {safe(err.hint)}", err=True)


def redact_usage(err: click.UsageError) -> None:
    """Click quotes the value it refused (`'https://me:token@host' is not a valid integer`):
    its message is redacted and made printable like every envbuild error (`errors.redact`)."""
    from envbuild.core.documents import printable
    from envbuild.core.errors import redact

    # Typed Final by click, but a plain attribute that its own `show` and `format_message` read.
    err.message = printable(redact(err.message))  # type: ignore[misc]


def report_usage_error(err: click.UsageError) -> None:
    """A Click usage error (unknown option, missing argument, bad value) under --json: the same
    error object every command prints, so a CI job parsing stdout gets JSON, not nothing."""
    import json

    where = err.ctx.command_path if err.ctx is not None else "envbuild"
    doc = {
        "ok": False,
        "error": "UsageError",
        "message": err.format_message(),
        "hint": f"see `{where} --help`",
    }
    click.echo(json.dumps(doc, sort_keys=True))


def report_bug(exc: Exception, *, as_json: bool) -> None:
    """Exit 70's message: plain on stderr, or (--json) the one JSON object on stdout that a CI
    job parsing it expects from every failure."""
    import json

    from envbuild.core.errors import redact

    message = redact(f"{type(exc).__name__}: {exc}")
    hint = "this is a bug in envbuild; rerun with ENVBUILD_DEBUG=1 for the traceback and report it"
    if as_json:
        doc = {"ok": False, "error": "InternalError", "message": message, "hint": hint}
        click.echo(json.dumps(doc, sort_keys=True))
        return
    click.echo(f"internal error: {message}", err=True)
    click.echo(f"  next: {hint}", err=True)


EXIT_NO_OUTPUT = 3  # an environment failure (errors.EnvironmentFailure): stdout took nothing


class _ClosedStdout:
    """sys.stdout when the process started with file descriptor 1 closed (`>&-`): Python sets
    it to None and click would drop every line silently; a write fails here instead."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        return None


def _output_failed(exc: OSError) -> bool:
    """True when `exc` is stdout refusing a write (full disk, closed descriptor, I/O error):
    raised from click.echo or from the final flush of `main`, not from envbuild's own files
    (those are typed errors already: `envbuild.core.fsio.write_error`)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code if tb is not None else None
    where = (code.co_filename, code.co_name) if code is not None else ("", "")
    return where[1] in ("echo", "write", "flush", "main") and (
        where[0].endswith(("click/utils.py", "cli/main.py")) or exc.errno == errno.EBADF
    )


def report_no_output(exc: OSError) -> None:
    """The one line (and next step) for output that could not be written: on stderr, the
    only channel left (also under --json: stdout is what failed)."""
    reason = exc.strerror or str(exc)
    hint = (
        "run it with stdout open (not `>&-`), or send it to a file: > out.txt"
        if exc.errno == errno.EBADF
        else "free space where stdout goes, or send it to a file or pipe that takes it"
    )
    with contextlib.suppress(OSError, ValueError):
        click.echo(f"error: cannot write the output to stdout: {reason}", err=True)
        click.echo(f"  next: {hint}", err=True)


def _silence_stdout() -> None:
    # Python's documented recipe for SIGPIPE: point stdout at devnull so the interpreter's
    # final flush does not raise again (docs.python.org/3/library/signal.html#note-on-sigpipe).
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no descriptor to point (stdout closed)
        sys.stdout = os.fdopen(devnull, "w")


class EnvbuildGroup(LazyGroup):
    """The top-level group: lazy commands, and the one place errors become exit codes."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        # The group's own options are parsed here, before `invoke`: redacted the same way.
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as err:
            redact_usage(err)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        # Imported here, not at the top: `envbuild --help` exits before invoking anything.
        from envbuild.core.errors import EnvbuildError

        # Read before invoking: click empties ctx.args once the subcommand is resolved.
        wants_json = _wants_json(ctx)
        try:
            return super().invoke(ctx)
        except EnvbuildError as err:
            report_error(err, as_json=wants_json)
            ctx.exit(err.exit_code)
        except Terminated as stop:
            with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
                click.echo("terminated", err=True)
            ctx.exit(stop.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(EXIT_BROKEN_PIPE)
        except OSError as exc:
            if not _output_failed(exc) or os.environ.get("ENVBUILD_DEBUG"):
                report_bug(exc, as_json=wants_json)
                ctx.exit(EXIT_INTERNAL)
            report_no_output(exc)
            _silence_stdout()
            ctx.exit(EXIT_NO_OUTPUT)
        except click.UsageError as err:
            redact_usage(err)
            if not wants_json:
                raise
            report_usage_error(err)
            ctx.exit(err.exit_code)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # a bug: say so plainly, no traceback unless asked
            if os.environ.get("ENVBUILD_DEBUG"):
                raise
            report_bug(exc, as_json=wants_json)
            ctx.exit(EXIT_INTERNAL)


def _wants_json(ctx: click.Context) -> bool:
    # The subcommand's own --json flag, seen from the group: its raw args (CliRunner) or argv.
    raw = list(getattr(ctx, "_protected_args", [])) + list(ctx.args)
    return "--json" in raw or "--json" in sys.argv[1:]


def terminal_width() -> int:
    """The width click's help formatter would pick (its terminal's columns, at most 80, less 2,
    at least 50), with the columns found as `shutil.get_terminal_size` finds them ($COLUMNS,
    else the terminal of stdout, else 80): click imports shutil for it otherwise, and with it
    bz2, lzma and zlib, a visible part of `envbuild --help`'s start."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return max(min(columns if columns > 0 else 80, 80) - 2, 50)


@click.group(
    cls=EnvbuildGroup,
    table=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "terminal_width": terminal_width()},
)
@click.version_option(__version__, prog_name="envbuild")
def cli() -> None:
    """envbuild: GPU training images that run on your hosts.

    resolve -> lock -> render -> image (build, smoke, tag); doctor and validate on hosts.
    """


def main() -> None:
    """The console script (`envbuild = "envbuild.cli.main:main"` in pyproject.toml)."""
    import signal

    signal.signal(signal.SIGTERM, raise_terminated)
    signal.signal(signal.SIGHUP, raise_terminated)
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    try:
        try:
            cli(prog_name="envbuild")
        finally:
            # The reader may go away after the last line (`| head -1`): flush here, where a
            # broken pipe can still be handled, not in the interpreter's shutdown.
            sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(EXIT_BROKEN_PIPE)
    except OSError as exc:  # the last flush: stdout full or gone
        report_no_output(exc)
        _silence_stdout()
        sys.exit(EXIT_NO_OUTPUT)

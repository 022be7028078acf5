"""The command line: parse, call one keyword-only API function, print.

Commands live one per module in `envbuild/commands/` and are imported only when invoked, so
`envbuild --help` starts without importing jinja2, tomlkit, docker, pynvml or torch. This is
the one place that maps errors to exit codes (see `envbuild.errors`).
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

import click

from envbuild import __version__
from envbuild.errors import EnvbuildError

# name -> (module, one-line help). Help is duplicated here so `--help` needs no imports.
COMMANDS: dict[str, tuple[str, str]] = {
    "resolve": ("envbuild.commands.resolve", "Pick a driver/CUDA/framework stack for the targets."),
    "lock": (
        "envbuild.commands.lock",
        "Pin the whole stack of an image folder into envbuild.lock.",
    ),
    "render": (
        "envbuild.commands.render",
        "Print or write the Dockerfile of a locked image folder.",
    ),
    "image": ("envbuild.commands.image", "Build, smoke-test in the container, tag only on pass."),
    "smoke": ("envbuild.commands.smoke", "Run the smoke payload on this host."),
    "doctor": ("envbuild.commands.doctor", "Check this GPU host: driver, GPUs, engine, /dev/shm."),
    "validate": (
        "envbuild.commands.validate",
        "Check that an image or lock runs on this host or fleet.",
    ),
    "matrix": ("envbuild.commands.matrix", "Check or refresh the compatibility matrix."),
}

EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in envbuild, not in the user's input
# What a shell reports for a process killed by SIGPIPE (128 + 13): `envbuild render x | head`
# ends like `cat file | head` would, not as "a bug in envbuild" (exit 70).
EXIT_BROKEN_PIPE = 141


def report_error(err: EnvbuildError, *, as_json: bool) -> None:
    """Print one error: JSON on stdout for --json, else a message and its next step on stderr."""
    if as_json:
        click.echo(json.dumps(err.to_json(), sort_keys=True))
        return
    click.echo(f"error: {err.message}", err=True)
    if err.hint:
        click.echo(f"  next: {err.hint}", err=True)


def report_usage_error(err: click.UsageError) -> None:
    """A Click usage error (unknown option, missing argument, bad value) under --json: the same
    error object every command prints, so a CI job parsing stdout gets JSON, not nothing."""
    where = err.ctx.command_path if err.ctx is not None else "envbuild"
    doc = {
        "ok": False,
        "error": "UsageError",
        "message": err.format_message(),
        "hint": f"see `{where} --help`",
    }
    click.echo(json.dumps(doc, sort_keys=True))


def no_such_command(ctx: click.Context, name: str, known: Iterable[str]) -> click.UsageError:
    """The "No such command" error with the closest names (Click's own suggestions read
    `self.commands`, which lazy groups leave empty)."""
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
    message = f"No such command {name!r}."
    if close:
        message += " Did you mean " + " or ".join(repr(c) for c in close) + "?"
    return click.UsageError(message, ctx=ctx)


def _silence_stdout() -> None:
    # Python's documented recipe for SIGPIPE: point stdout at devnull so the interpreter's
    # final flush does not raise again (docs.python.org/3/library/signal.html#note-on-sigpipe).
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        if ctx.resilient_parsing or "--help" in sys.argv[1:2]:
            # `envbuild --help` lists commands without importing them.
            return click.Command(cmd_name, help=entry[1], short_help=entry[1])
        module = importlib.import_module(entry[0])
        command: click.Command = module.command
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            raise no_such_command(ctx, name, COMMANDS)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        # Read before invoking: click empties ctx.args once the subcommand is resolved.
        wants_json = _wants_json(ctx)
        try:
            return super().invoke(ctx)
        except EnvbuildError as err:
            report_error(err, as_json=wants_json)
            ctx.exit(err.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(EXIT_BROKEN_PIPE)
        except click.UsageError as err:
            if not wants_json:
                raise
            report_usage_error(err)
            ctx.exit(err.exit_code)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # a bug: say so plainly, no traceback unless asked
            if os.environ.get("ENVBUILD_DEBUG"):
                raise
            click.echo(f"internal error: {type(exc).__name__}: {exc}", err=True)
            click.echo(
                "  next: this is a bug in envbuild; rerun with ENVBUILD_DEBUG=1 for the "
                "traceback and report it",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


def _wants_json(ctx: click.Context) -> bool:
    # The subcommand's own --json flag, seen from the group: its raw args (CliRunner) or argv.
    raw = list(getattr(ctx, "_protected_args", [])) + list(ctx.args)
    return "--json" in raw or "--json" in sys.argv[1:]


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envbuild")
def cli() -> None:
    """envbuild: GPU training images that run on your hosts.

    resolve -> lock -> render -> image (build, smoke, tag); doctor and validate on hosts.
    """


def main() -> None:
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

"""The CLI starts without heavy imports, and every module imports on its own (pip-tools' check)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import envbuild
from envbuild.cli.main import COMMANDS, cli

HEAVY = ("torch", "docker", "pynvml", "jinja2", "tomlkit", "requests", "jax", "tensorflow")


def _modules_after(code: str) -> set[str]:
    """The modules loaded after `code` runs (its own output, e.g. "torch 2.10.0", kept apart)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code + "\nimport sys; print('\\nMODULES:', ' '.join(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.rpartition("\nMODULES:")[2].split())


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys; sys.argv=['envbuild','--help']\n"
        "from envbuild.cli.main import cli\n"
        "try:\n    cli(prog_name='envbuild')\nexcept SystemExit:\n    pass"
    )
    loaded = _modules_after(code)
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}


@pytest.mark.parametrize(
    "argv",
    [
        ["resolve", "--framework", "torch", "--gpu", "H100", "--driver", "570.124.06"],
        ["lock", "--check", "images/torch-train"],
    ],
)
def test_resolve_and_lock_check_import_nothing_heavy(argv: list[str]) -> None:
    # The two commands CI and editors run most: they read TOML with the stdlib (tomllib) and
    # never render, build, probe or fetch (docs/design.md).
    root = Path(__file__).resolve().parents[3]
    code = (
        f"import os, sys; os.chdir({str(root)!r}); sys.argv=['envbuild', *{argv!r}]\n"
        "from envbuild.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code"
    )
    loaded = _modules_after(code)
    assert {
        "envbuild.app.resolve",
        "envbuild.app.lock",
    } & loaded and "envbuild.matrix" in loaded  # the command really ran
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["frobnicate"])
    assert result.exit_code == 2
    assert "No such command 'frobnicate'" in result.output


def _all_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(envbuild.__path__, "envbuild."):
        if ".payload" in info.name:
            continue  # the payload runs as a folder inside images, not as a package
        names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("module", _all_modules())
def test_module_imports_alone(module: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_module_exposes_a_command(name: str) -> None:
    import click

    module = importlib.import_module(COMMANDS[name][0])
    assert isinstance(module.command, click.Command)
    assert module.command.name == name


@pytest.mark.parametrize(
    "argv",
    [[name] for name in sorted(COMMANDS) if name != "matrix"]
    + [["matrix"], ["matrix", "check"], ["matrix", "refresh"]],
)
def test_every_help_shows_an_example_and_the_exit_codes(argv: list[str]) -> None:
    result = CliRunner().invoke(cli, [*argv, "--help"])
    assert result.exit_code == 0, result.output
    examples = result.output.split("Examples:\n", 1)[1]
    assert examples.startswith(f"    envbuild {argv[0]}") or "envbuild" in examples.splitlines()[0]
    assert "Exit codes:\n    0  " in result.output


def test_help_imports_no_envbuild_module_it_does_not_run() -> None:
    # `--help` prints the command table: the error classes, JSON and difflib are not needed.
    code = (
        "import sys; sys.argv=['envbuild','--help']\n"
        "from envbuild.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    loaded = _modules_after(code)
    assert {m for m in loaded if m.startswith("envbuild")} == {
        "envbuild",
        "envbuild.cli",
        "envbuild.cli.main",
        "envbuild.cli.lazy",
    }
    assert not {"envbuild.core.errors", "json", "difflib", "dataclasses"} & loaded


def test_resolve_imports_only_what_resolving_uses() -> None:
    root = Path(__file__).resolve().parents[3]
    argv = ["resolve", "--json", "--gpu", "H100", "--gpu", "L4", "--driver", "570.124.06"]
    code = (
        f"import os, sys; os.chdir({str(root)!r}); sys.argv=['envbuild', *{argv!r}]\n"
        "from envbuild.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code"
    )
    _modules_after(code)  # fills the user cache (compiled matrix), as a first run does
    loaded = _modules_after(code)
    assert "envbuild.resolver" in loaded  # the command really ran
    assert "envbuild.matrix.parse" not in loaded  # the compiled matrix was read
    unused = {
        "envbuild.host.probe",  # only --host / --hosts
        "envbuild.render.dockerfile",
        "envbuild.lock.format",
        "envbuild.smoke.plan",
        "envbuild.host.gpu_attach",
        # envbuild.core.fsio is imported: the compiled matrix is read through its input
        # reader (docs/reliability.md, "Caches that cannot hurt"); its writers' imports
        # (tempfile, pathlib, shutil) stay out, below.
        "shutil",
        "http.client",
        "ssl",
        "subprocess",
        "tempfile",
        "hashlib",
        "packaging.tags",
        "logging",
        "pathlib",  # with urllib.parse and ipaddress: only --hosts and an overlay need it
        "urllib.parse",
        "envbuild.cuda.extensions",  # only --compile-extensions
        "envbuild.cuda.wheels",
    }
    assert sorted(unused & loaded) == []

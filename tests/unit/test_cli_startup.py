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
from envbuild.cli import COMMANDS, cli

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
        "from envbuild.cli import cli\n"
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
    # never render, build, probe or fetch (DESIGN.md; issue brief).
    root = Path(__file__).resolve().parents[2]
    code = (
        f"import os, sys; os.chdir({str(root)!r}); sys.argv=['envbuild', *{argv!r}]\n"
        "from envbuild.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code"
    )
    loaded = _modules_after(code)
    assert "envbuild.api" in loaded and "envbuild.matrix" in loaded  # the command really ran
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

"""The engine registry: the one list of engine names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from envbuild.cli.main import cli
from envbuild.core.errors import UserError
from envbuild.engine import select

PACKAGE = Path(__file__).resolve().parents[3] / "envbuild"


def _engine_option() -> click.Option:
    command = cli.get_command(click.Context(cli), "image")
    assert command is not None
    (option,) = [p for p in command.params if p.name == "engine"]
    assert isinstance(option, click.Option)
    return option


def test_every_engine_the_cli_offers_is_in_the_registry() -> None:
    option = _engine_option()
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == select.ENGINE_NAMES
    assert option.default == select.DEFAULT_ENGINE in select.ENGINES


def test_the_engine_names_are_listed_nowhere_else() -> None:
    # A tuple or list of engine names outside the registry is a second registry.
    names = "|".join(re.escape(n) for n in select.ENGINE_NAMES)
    listed = re.compile(rf"[\[(]\s*\"({names})\",\s*\"({names})\"")
    found = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "select.py" and listed.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_unknown_engine_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown engine 'rkt'") as info:
        select.make_engine("rkt")
    assert info.value.hint == "pick one of docker, podman"


def test_podman_refuses_buildkit_before_touching_anything() -> None:
    with pytest.raises(UserError, match="Buildah"):
        select.make_engine("podman", buildkit=True)


def test_each_engine_says_where_it_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert select.kind_of("docker").address() == "unix:///var/run/docker.sock"
    monkeypatch.setenv("CONTAINER_HOST", "unix:///tmp/p.sock")
    assert select.kind_of("podman").address() == "unix:///tmp/p.sock"


def test_the_registry_does_not_load_docker_py() -> None:
    # The CLI reads the names to build its options: importing the registry loads no client.
    code = "import sys, envbuild.engine.select; print('docker' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    assert done.stdout.strip() == "False", done.stderr

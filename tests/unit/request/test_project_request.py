"""The request keys of a project: `[packages] files/extras/groups`, `[project]`, `[smoke]
command` (envbuild/request/project.py), parsed strictly like the rest of envbuild.toml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuild.core.errors import RequestError
from envbuild.core.models import DependencyFiles, ProjectSettings, Request
from envbuild.request.parse import canonical_request_json, parse_request
from envbuild.request.project import template_values

HEAD = '[framework]\nrequirement = "torch"\n'


def parse(body: str) -> Request:
    return parse_request((HEAD + body).encode(), path="e/envbuild.toml", default_name="demo")


def refused(body: str) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse(body)
    return info.value


def test_full_project_request() -> None:
    request = parse(
        '[packages]\nfiles = ["pyproject.toml", "requirements-extra.txt"]\n'
        'extras = ["train"]\ngroups = ["eval"]\n'
        '[project]\npath = "../app"\ninstall = false\n'
        'command = ["python", "-m", "app.train"]\nignore = ["notebooks", "!data/vocab.txt"]\n'
        '[smoke]\ncommand = "python -m app.train  --steps 5"\n'
    )
    assert request.dependency_files == DependencyFiles(
        files=("pyproject.toml", "requirements-extra.txt"), extras=("train",), groups=("eval",)
    )
    assert request.project == ProjectSettings(
        path="../app",
        install=False,
        command=("python", "-m", "app.train"),
        ignore=("notebooks", "!data/vocab.txt"),
    )
    # A string command is split like a shell would (shlex), then run without one.
    assert request.smoke.command == ("python", "-m", "app.train", "--steps", "5")


def test_commands_take_any_argument_but_control_characters() -> None:
    request = parse(
        '[project]\ncommand = ["python", "-c", "print(\'hi\')", "$HOME", "a\\\\b", ""]\n'
        '[smoke]\ncommand = "python -c \'print(\\"hi there\\")\' --name=\\"x y\\""\n'
    )
    assert request.project is not None
    assert request.project.command == ("python", "-c", "print('hi')", "$HOME", "a\\b", "")
    assert request.smoke.command == ("python", "-c", 'print("hi there")', "--name=x y")
    # The CMD is a JSON array: quotes and backslashes escaped, nothing for a shell to expand.
    values = template_values(request.project)
    assert values["command"] == '["python", "-c", "print(\'hi\')", "$HOME", "a\\\\b", ""]'
    assert json.loads(values["command"]) == list(request.project.command)


def test_defaults_leave_the_canonical_request_unchanged() -> None:
    # Locks made before these keys existed stay fresh: defaults are not in the hash input.
    assert canonical_request_json(parse("")) == '{"framework":"torch","name":"demo"}'
    empty_project = parse("[project]\n")
    assert empty_project.project == ProjectSettings()
    assert canonical_request_json(empty_project) == (
        '{"framework":"torch","name":"demo","project":{}}'
    )


@pytest.mark.parametrize(
    ("body", "message", "hint"),
    [
        (
            '[packages]\nfiles = ["setup.cfg"]\n',
            "e/envbuild.toml: [packages] files: 'setup.cfg' is not a pyproject.toml, a "
            "setup.py, a requirements file (.txt, .in) or a uv.lock",
            'name the project\'s own file, for example files = ["pyproject.toml"]',
        ),
        (
            '[packages]\nfiles = ["/srv/app/requirements.txt"]\n',
            "e/envbuild.toml: [packages] files: '/srv/app/requirements.txt' is not a path "
            "relative to the image folder",
            "write it relative to the folder that holds envbuild.toml, for example "
            '"pyproject.toml" or "../../app"',
        ),
        (
            '[packages]\nfiles = ["a/pyproject.toml", "b/pyproject.toml"]\n',
            "e/envbuild.toml: [packages] files: 'a/pyproject.toml' and 'b/pyproject.toml' both "
            "describe a project",
            "lock one project per image: name one of them (the pyproject.toml when it has "
            "[project] dependencies)",
        ),
        (
            '[packages]\nfiles = ["pyproject.toml", "uv.lock"]\n',
            "e/envbuild.toml: [packages] files: 'pyproject.toml' and 'uv.lock' both describe "
            "the project",
            "name the uv.lock to keep its pins (its pyproject.toml is read with it), or the "
            "pyproject.toml to let envbuild pick versions",
        ),
        (
            '[packages]\nfiles = ["requirements.txt"]\nextras = ["train"]\n',
            "e/envbuild.toml: [packages] extras: extras are chosen, but files names no "
            "pyproject.toml or uv.lock to take them from",
            'add the project\'s file, for example files = ["pyproject.toml"]',
        ),
        (
            '[packages]\nfiles = ["uv.lock"]\ngroups = ["dev", "Dev"]\n',
            "e/envbuild.toml: [packages] groups: names the same one twice",
            "list each once",
        ),
        (
            '[project]\ninstall = "yes"\n',
            "e/envbuild.toml: [project] install: expected true or false, got a string 'yes'",
            "write install = true or install = false (no quotes)",
        ),
        (
            "[project]\ncommand = 5\n",
            "e/envbuild.toml: [project] command: expected a string or an array of strings, got "
            "an integer 5",
            'write command = "python -m train --steps 5" or command = ["python", "-m", "train"]',
        ),
        (
            '[smoke]\ncommand = "   "\n',
            "e/envbuild.toml: [smoke] command: is empty",
            "remove command or give it a command",
        ),
        (
            '[smoke]\ncommand = ["", "x"]\n',
            "e/envbuild.toml: [smoke] command: '' is not a program",
            'write command = "python -m train --steps 5" or command = ["python", "-m", "train"]',
        ),
        (
            "[smoke]\ncommand = []\n",
            "e/envbuild.toml: [smoke] command: is empty",
            "remove command or give it a command",
        ),
        (
            '[smoke]\ncommand = "python -c \'import x"\n',
            'e/envbuild.toml: [smoke] command: "python -c \'import x" cannot be split (No '
            "closing quotation)",
            'write command = "python -m train --steps 5" or command = ["python", "-m", "train"]',
        ),
        (
            '[smoke]\ncommand = ["python", "-c", "print(1)\\nprint(2)"]\n',
            "e/envbuild.toml: [smoke] command: 'print(1)\\nprint(2)' contains '\\n'",
            "write the command on one line without control, invisible or bidi characters "
            "(quotes, '$' and backslashes are fine: it runs without a shell)",
        ),
        (
            '[project]\ncommand = "python\\ttrain.py"\n',
            "e/envbuild.toml: [project] command: 'python\\ttrain.py' contains '\\t'",
            "write the command on one line without control, invisible or bidi characters "
            "(quotes, '$' and backslashes are fine: it runs without a shell)",
        ),
        (
            '[project]\npath = "~/code"\n',
            "e/envbuild.toml: [project] path: '~/code' is not a path relative to the image folder",
            "write it relative to the folder that holds envbuild.toml, for example "
            '"pyproject.toml" or "../../app"',
        ),
        (
            "[project]\nentrypoint = []\n",
            "e/envbuild.toml: [project] entrypoint: unknown key",
            "keys of [project]: path, install, command, ignore",
        ),
    ],
)
def test_refused(body: str, message: str, hint: str) -> None:
    err = refused(body)
    assert (err.message, err.hint) == (message, hint)
    assert err.exit_code == 2


def test_framework_base_takes_project_files_and_install() -> None:
    # The base's installed versions are the constraints; the project goes in with --no-deps.
    base = '[image]\nbase = "nvcr.io/nvidia/pytorch:25.01-py3"\n'
    ok = parse(base + '[packages]\nfiles = ["requirements.txt"]\n\n[project]\n')
    assert ok.dependency_files.files == ("requirements.txt",)
    assert ok.project == ProjectSettings(install=True)


def test_an_unparsable_pyproject_counts_as_installable(tmp_path: Path) -> None:
    # Bad TOML raised DocumentError (a ValueError) out of request loading: exit 70 on `lock`;
    # the lock reads the file again and says what is wrong with it.
    from envbuild.request.parse import _installable

    (tmp_path / "pyproject.toml").write_text("name = = 1\n")
    assert _installable(tmp_path) is True
    (tmp_path / "pyproject.toml").write_bytes(b"\xff\xfe")
    assert _installable(tmp_path) is True

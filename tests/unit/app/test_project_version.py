"""The version a project whose build reads it from git is given in the image
(envbuild/app/project_version.py): setuptools-scm's own answer on the host, pinned to the
lock's release, or SETUPTOOLS_SCM_PRETEND_VERSION where it is set; a clear exit 2 otherwise.
The image side (the install step finds the version) is tests/e2e.sh step 7d."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from envbuild.app.project_version import project_version
from envbuild.core.errors import UserError
from envbuild.core.models import Lock, LockedPackage, ProjectSettings
from envbuild.lock.pins import RunResult
from envbuild.render.dockerfile import RenderOptions, render_dockerfile
from envbuild.request.project import VERSION_ARG
from tests.golden import fixtures

FIXTURE = Path(__file__).parents[2] / "fixtures" / "projects" / "scm-version"
SCM_PIN = LockedPackage(
    name="setuptools-scm",
    version="10.3.4",
    hashes=("sha256:" + "0" * 64,),
    source="https://pypi.org/simple",
)


def _lock(*, pinned: bool = True, install: bool = True) -> Lock:
    lock = fixtures.cpu_lock()
    return dataclasses.replace(
        lock,
        project=ProjectSettings(path=".", install=install),
        packages=(*lock.packages, SCM_PIN) if pinned else lock.packages,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "scm-version"
    shutil.copytree(FIXTURE, folder)
    return folder


class _Runner:
    def __init__(self, code: int = 0, out: str = "1.2.3\n", err: str = "") -> None:
        self.answer = (code, out, err)
        self.calls: list[tuple[list[str], Path]] = []

    def __call__(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> RunResult:
        self.calls.append((list(argv), cwd))
        return RunResult(*self.answer)


def test_setuptools_scm_of_the_locked_release_reads_the_projects_git(project: Path) -> None:
    run = _Runner(out="1.2.4.dev0+g0c116f88f\n")
    version = project_version(_lock(), project, {"PATH": "/usr/bin"}, run)
    assert version is not None
    assert (version.value, version.source, version.arg) == (
        "1.2.4.dev0+g0c116f88f",
        "setuptools-scm 10.3.4",
        VERSION_ARG,
    )
    argv, cwd = run.calls[0]
    assert cwd == project
    assert argv[argv.index("--with") + 1] == "setuptools-scm==10.3.4"
    assert argv[argv.index("--default-index") + 1] == "https://pypi.org/simple"
    assert argv[-3:] == ["python", "-m", "setuptools_scm"]


def test_the_variable_set_here_wins_and_nothing_runs(project: Path) -> None:
    run = _Runner()
    version = project_version(_lock(), project, {VERSION_ARG: "2.0.0"}, run)
    assert version is not None and version.value == "2.0.0" and run.calls == []


def test_no_version_is_asked_for_a_static_one_or_an_uninstalled_project(project: Path) -> None:
    run = _Runner()
    assert project_version(_lock(install=False), project, {}, run) is None
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text.replace('dynamic = ["version"]', 'version = "1"'))
    assert project_version(_lock(), project, {}, run) is None
    assert project_version(fixtures.cpu_lock(), project, {}, run) is None  # no project at all
    assert run.calls == []


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ((1, "", "LookupError: setuptools-scm was unable to detect version for /x\n"), "unable"),
        ((0, "", ""), "exit 0"),
    ],
)
def test_no_version_from_git_is_exit_2_with_the_way_out(
    project: Path, answer: tuple[int, str, str], said: str
) -> None:
    with pytest.raises(UserError) as err:
        project_version(_lock(), project, {}, _Runner(*answer))
    assert err.value.exit_code == 2
    assert said in err.value.message and "setuptools-scm 10.3.4" in err.value.message
    assert VERSION_ARG in (err.value.hint or "") and "git checkout" in (err.value.hint or "")


@pytest.mark.parametrize("value", ["1.0\nRUN id", "$(id)", "latest"])
def test_a_version_that_is_not_pep_440_never_reaches_the_dockerfile(
    project: Path, value: str
) -> None:
    with pytest.raises(UserError) as err:
        project_version(_lock(), project, {}, _Runner(out=value + "\n"))
    assert err.value.exit_code == 2
    with pytest.raises(UserError):
        project_version(_lock(), project, {VERSION_ARG: value}, _Runner())


def test_the_install_step_is_given_the_version_as_setuptools_scms_argument(project: Path) -> None:
    lock = _lock()
    version = project_version(lock, project, {}, _Runner(out="1.2.3\n"))
    text = render_dockerfile(
        lock, options=RenderOptions(), template_dir=project, project_version=version
    )
    lines = text.splitlines()
    install = next(i for i, line in enumerate(lines) if "--no-build-isolation" in line)
    assert lines[install - 1] == f"ARG {VERSION_ARG}=1.2.3"
    assert "setuptools-scm 10.3.4" in lines[install - 2]
    # Without a version the step is as before: the ARG is there only when one is given.
    plain = render_dockerfile(lock, options=RenderOptions(), template_dir=project)
    assert VERSION_ARG not in plain


@pytest.mark.network
def test_real_setuptools_scm_reads_a_real_tag(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.delenv(VERSION_ARG, raising=False)
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "fixture"], check=True)
    subprocess.run([*git, "tag", "v1.2.3"], check=True)
    version = project_version(_lock(), project, dict(os.environ))
    assert version is not None and version.value == "1.2.3"
    (project / "src" / "scmdemo" / "__init__.py").write_text("# edited\n")
    edited = project_version(_lock(), project, dict(os.environ))
    assert edited is not None and edited.value.startswith("1.2.4.dev0+g")


@pytest.mark.parametrize(
    "setting",
    [
        'git_describe_command = "touch /tmp/pwned"',
        'scm.git.describe_command = ["sh", "-c", "touch /tmp/pwned"]',
    ],
)
def test_a_command_the_project_names_is_never_run_here(project: Path, setting: str) -> None:
    # setuptools-scm runs these as written (its config docs): envbuild asks for the version.
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text + setting + "\n")
    run = _Runner()
    with pytest.raises(UserError) as err:
        project_version(_lock(), project, {}, run)
    assert run.calls == [] and err.value.exit_code == 2
    assert "does not run" in err.value.message and VERSION_ARG in (err.value.hint or "")
    # Given by the user, nothing runs and the version is used.
    given = project_version(_lock(), project, {VERSION_ARG: "3.0"}, run)
    assert given is not None and given.value == "3.0" and run.calls == []


def test_a_version_past_pythons_integer_limit_is_exit_2(project: Path) -> None:
    with pytest.raises(UserError) as err:
        project_version(_lock(), project, {VERSION_ARG: "1" * 5000}, _Runner())
    assert err.value.exit_code == 2 and "5000 characters" in err.value.message

"""A project in the image: which files go into the build context (envbuild/request/sourcetree.py),
the Dockerfile values of `[project]` (envbuild/request/project.py), and the project's own smoke step
run after the payload over a fake engine (envbuild/smoke/project_step.py through build.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from envbuild.build.pipeline import REPORT_LABEL, build_and_verify
from envbuild.core.errors import RequestError, SmokeFailed, UserError
from envbuild.core.models import ProjectSettings
from envbuild.engine.protocol import RunResult, RunSpec
from envbuild.render.dockerfile import RenderOptions, build_context, render_dockerfile
from envbuild.request import sourcetree
from envbuild.request.project import template_values
from tests.golden import fixtures
from tests.unit.test_build import OK_RUN, FakeEngine, make_job, passing
from tests.unit.test_lockfile import demo_matrix


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


PROJECT = {
    "pyproject.toml": "[project]\nname = 'x'\n",
    "src/x/__init__.py": "",
    "src/x/data/__init__.py": "",  # a package named data is code, not data
    "src/x/__pycache__/a.cpython-312.pyc": "",
    "data/train.csv": "1,2\n",
    "data/vocab.txt": "a\n",
    "notebooks/explore.ipynb": "{}",
    ".git/HEAD": "ref",
    ".venv/bin/python": "",
    "sub/.env": "TOKEN=1",
    "model.safetensors": "weights",
    "envbuild.toml": "",
    "envbuild.lock": "",
    ".dockerignore": "# the project's own\nnotebooks\n",
}


def test_collect_keeps_code_and_drops_vcs_venvs_caches_data_and_secrets(tmp_path: Path) -> None:
    source = sourcetree.collect(tree(tmp_path, PROJECT), ["!data/vocab.txt"])
    assert list(source.files) == [
        "data/vocab.txt",  # re-included by the user's rule (the last matching rule wins)
        "pyproject.toml",
        "src/x/__init__.py",
        "src/x/data/__init__.py",
    ]
    assert source.rules[-2:] == ("notebooks", "!data/vocab.txt")


def test_dockerignore_is_prefixed_with_the_context_folder() -> None:
    text = sourcetree.dockerignore_text(["data", "**/*.ckpt", "!data/vocab.txt", "/build/"])
    assert text.splitlines()[1:] == [
        "project/data",
        "project/**/*.ckpt",
        "!project/data/vocab.txt",
        "project/build",
    ]


def test_symlinks_inside_are_files_outside_are_refused(tmp_path: Path) -> None:
    project = tree(tmp_path / "p", {"train.py": "print(1)\n"})
    (project / "alias.py").symlink_to(project / "train.py")
    assert sourcetree.collect(project, []).files["alias.py"] == b"print(1)\n"
    (tmp_path / "secret").write_text("key")
    (project / "key").symlink_to(tmp_path / "secret")
    with pytest.raises(UserError) as info:
        sourcetree.collect(project, [])
    assert info.value.message == (
        f"the project file key is a symlink to {(tmp_path / 'secret').resolve()}, outside the "
        "project folder or not a file"
    )
    assert not sourcetree.collect(project, ["key"]).files.get("key")


def test_large_or_empty_projects_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tree(tmp_path, {"a.bin": "x" * 3000, "b.py": "y" * 10})
    monkeypatch.setattr(sourcetree, "MAX_BYTES", 2048)
    with pytest.raises(UserError) as info:
        sourcetree.collect(project, [])
    assert "the largest: a.bin (0 MB), b.py (0 MB)" in info.value.message
    assert info.value.hint.startswith("add data, checkpoints and other large files")
    with pytest.raises(UserError) as info:
        sourcetree.collect(project, ["*"])
    assert info.value.message.endswith("has no files left after the ignore rules")


def test_project_path_must_stay_in_the_repository(tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    image = tree(tmp_path / "repo" / "images" / "x", {"envbuild.toml": ""})
    assert (
        sourcetree.inside_repo(image, "../..", what="[project] path")
        == (tmp_path / "repo").resolve()
    )
    with pytest.raises(RequestError) as info:
        sourcetree.inside_repo(image, "../../..", what="[project] path")
    assert info.value.message == (
        f"[project] path '../../..' is {tmp_path.resolve()}, outside the repository "
        f"{(tmp_path / 'repo').resolve()}"
    )


def test_without_git_the_refusal_says_why_the_image_folder_is_the_boundary(
    tmp_path: Path,
) -> None:
    # A project that is not a git checkout (a downloaded archive): "outside the repository"
    # named a folder that is no repository.
    image = tree(tmp_path / "project" / "docker", {"envbuild.toml": ""})
    with pytest.raises(RequestError) as info:
        sourcetree.inside_repo(image, "..", what="[project] path")
    assert info.value.message == (
        f"[project] path '..' is {(tmp_path / 'project').resolve()}, outside the image folder "
        f"{image.resolve()}: no .git was found at or above it, so the image folder itself is "
        "the boundary of what may be copied"
    )
    assert "git init" in info.value.hint


def test_build_context_holds_the_project_and_its_dockerignore(tmp_path: Path) -> None:
    image = tree(tmp_path / "images" / "demo", PROJECT)
    lock = dataclasses.replace(
        fixtures.cpu_lock(), project=ProjectSettings(path=".", ignore=("data",))
    )
    files = build_context(
        lock, "# lock\n", image_dir=image, options=RenderOptions(), matrix=demo_matrix()
    )
    assert sorted(k for k in files if k.startswith("project/")) == [
        "project/pyproject.toml",
        "project/src/x/__init__.py",
        "project/src/x/data/__init__.py",
    ]
    ignore = files[".dockerignore"].decode().splitlines()
    assert ignore[-2:] == ["project/notebooks", "project/data"]
    dockerfile = files["Dockerfile"].decode()
    # The code comes after the locked requirements and the payload: a code change rebuilds
    # only the layers from here on.
    order = [
        dockerfile.index("-r /opt/envbuild/requirements.lock"),
        dockerfile.index("COPY payload/"),
        dockerfile.index("COPY project/ /app/"),
        dockerfile.index(
            "RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation "
            "--no-index /app"
        ),
        dockerfile.index("USER 1000:1000"),
        dockerfile.index('WORKDIR /app\nCMD ["python"]'),
    ]
    assert order == sorted(order)


def test_edited_lock_values_are_refused_before_rendering() -> None:
    bad = dataclasses.replace(
        fixtures.gpu_lock(), project=ProjectSettings(command=("python", 'x"]\nRUN evil #'))
    )
    with pytest.raises(UserError) as info:
        render_dockerfile(bad, options=RenderOptions())
    assert info.value.message.startswith("[project] command 'x\"]\\nRUN evil #' cannot go into")
    assert template_values(None)["command"] == '["python"]'


# --- the project's smoke step ----------------------------------------------------------------


class TwoRuns(FakeEngine):
    """The payload's run, then the project's command's."""

    def __init__(self, command_result: RunResult) -> None:
        super().__init__(run_result=OK_RUN)
        self.command_result = command_result

    def run(self, spec: RunSpec) -> RunResult:
        self.calls.append(("run", spec))
        runs = sum(1 for name, _ in self.calls if name == "run")
        return OK_RUN if runs == 1 else self.command_result

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        return ref, None


COMMAND = ("python", "-m", "train", "--steps", "5")


def test_smoke_command_runs_after_the_payload_like_the_payload() -> None:
    engine = TwoRuns(RunResult(0, "step 5 loss 0.1\n", "", duration_s=2.5))
    seen: list[str] = []
    out = build_and_verify(
        engine,
        make_job(smoke_command=COMMAND, shm_mib=4096, timeout_s=77),
        judge=passing,
        progress=seen.append,
    )
    payload, command = (spec for name, spec in engine.calls if name == "run")
    assert command.command == COMMAND
    assert command.environment["ENVBUILD_SMOKE"] == "1"
    for same in ("image", "gpus", "gpu_attach", "shm_size", "timeout_s", "labels"):
        assert getattr(command, same) == getattr(payload, same)
    names = engine.names()
    assert names.index("run") < len(names) - 1 - names[::-1].index("run") < names.index("tag")
    record = {
        "command": list(COMMAND),
        "ok": True,
        "exit_code": 0,
        "timed_out": False,
        "duration_s": 2.5,
        "stdout_tail": ["step 5 loss 0.1"],
        "stderr_tail": [],
    }
    assert out.to_json()["smoke_command"] == record
    label = json.loads(engine.image_labels("envbuild-test/demo:ok")[REPORT_LABEL])
    assert label["envbuild"]["smoke_command"] == record
    assert "running the project's smoke command: python -m train --steps 5" in seen


@pytest.mark.parametrize(
    ("result", "why"),
    [
        (RunResult(1, "step 1\n", "Traceback\nValueError: boom\n", duration_s=1.0), "exited 1"),
        (RunResult(None, "", "", timed_out=True, duration_s=77.0), "did not finish within"),
    ],
)
def test_failing_smoke_command_tags_nothing_and_removes_the_candidate(
    result: RunResult, why: str
) -> None:
    engine = TwoRuns(result)
    with pytest.raises(SmokeFailed) as info:
        build_and_verify(
            engine, make_job(smoke_command=COMMAND), judge=passing, progress=lambda _: None
        )
    err = info.value
    assert err.exit_code == 6
    assert err.message.startswith(
        f"the project's smoke command `python -m train --steps 5` of demo {why}"
    )
    assert err.message.endswith("; no tag was written")
    assert err.fields["smoke_command"]["stderr_tail"] == result.stderr.splitlines()
    assert not engine.tags
    assert "remove_image" in engine.names()


def test_no_smoke_command_runs_the_payload_only() -> None:
    engine = TwoRuns(RunResult(1, "", ""))
    out = build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert engine.names().count("run") == 1
    assert out.to_json()["smoke_command"] is None

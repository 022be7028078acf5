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
from envbuild.smoke.plan import SmokeJudgement
from envbuild.smoke.project_step import PERMISSION_HINT, record
from tests.golden import fixtures
from tests.unit.build.test_build import OK_RUN, PASS_REPORT, make_job, passing
from tests.unit.fakes import FakeEngine
from tests.unit.lock.test_lockfile import demo_matrix


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
        "data/train.csv",  # a small file in data/ is the project's (it may be code's input)
        "data/vocab.txt",
        "pyproject.toml",
        "src/x/__init__.py",
        "src/x/data/__init__.py",
    ]
    # The .dockerignore's, then the secrets (no `!` of the checkout's files re-includes one),
    # then [project] ignore.
    secrets = sourcetree.SECRETS
    assert source.rules[-(len(secrets) + 2) :] == ("notebooks", *secrets, "!data/vocab.txt")
    assert [(e.path, e.why) for e in source.left_out] == [
        (".dockerignore", "envbuild's defaults: .dockerignore"),
        (".git/", "a secret: **/.git"),
        (".venv/", "envbuild's defaults: **/.venv"),
        ("envbuild.lock", "the image folder's own files: envbuild.lock"),
        ("envbuild.toml", "the image folder's own files: envbuild.toml"),
        ("model.safetensors", "envbuild's defaults: **/*.safetensors"),
        ("notebooks/", ".dockerignore: notebooks"),
        ("src/x/__pycache__/", "envbuild's defaults: **/__pycache__"),
        ("sub/.env", "a secret: **/.env"),
    ]


def test_dockerignore_lists_what_was_left_out_under_the_context_folder() -> None:
    entries = [
        sourcetree.LeftOut(".git/", "envbuild's defaults: .git"),
        sourcetree.LeftOut("data/train.bin", "over 10 MiB", 11 << 20),
        sourcetree.LeftOut("odd[1]*.bin", "envbuild's defaults: **/*.bin", 3),
        sourcetree.LeftOut("two\nlines", ".gitignore: two*", 1),
    ]
    text = sourcetree.dockerignore_text(entries)
    assert text.splitlines()[1:] == [
        "project/.git",
        "project/data/train.bin",
        "project/odd\\[1\\]\\*.bin",  # one path, not a pattern
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
    project = tree(tmp_path, {"a.dat": "x" * 3000, "b.py": "y" * 10})
    monkeypatch.setattr(sourcetree, "MAX_BYTES", 2048)
    with pytest.raises(UserError) as info:
        sourcetree.collect(project, [])
    assert "the largest: a.dat (0 MB), b.py (0 MB)" in info.value.message
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


def test_build_context_holds_the_project_owned_by_the_runtime_user(tmp_path: Path) -> None:
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
    assert "project/data" in ignore and "project/notebooks" in ignore
    assert "project/pyproject.toml" not in ignore
    dockerfile = files["Dockerfile"].decode()
    # The runtime user is made before the venv, and the code comes after the locked
    # requirements, the payload, the labels and CMD: a code change rebuilds only the code's
    # COPY, its install, USER and WORKDIR (benchmarks/RESULTS.md section 10). The code
    # belongs to uid 1000, so a script can write checkpoints and logs into /app, its working
    # directory (made by the COPY: a WORKDIR before it would make it root's).
    order = [
        dockerfile.index("useradd --create-home --uid 1000"),
        dockerfile.index("-r /opt/envbuild/requirements.lock"),
        dockerfile.index("COPY payload/"),
        dockerfile.index("LABEL org.opencontainers.image.title"),
        dockerfile.index('CMD ["python"]'),
        dockerfile.index("COPY --chown=1000:1000 project/ /app/\n"),
        dockerfile.index(
            "RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation "
            "--no-index /app"
        ),
        dockerfile.index("USER 1000:1000\nWORKDIR /app\n"),
    ]
    assert order == sorted(order)
    assert "COPY project/" not in dockerfile
    after_code = dockerfile[dockerfile.index("COPY --chown=1000:1000 project/") :]
    steps = [line.split()[0] for line in after_code.splitlines() if line[:1].isupper()]
    assert steps == ["COPY", "RUN", "USER", "WORKDIR"]


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

    def __init__(self, command_result: RunResult, payload_result: RunResult = OK_RUN) -> None:
        super().__init__(run_result=payload_result)
        self.command_result = command_result

    def run(self, spec: RunSpec) -> RunResult:
        self.calls.append(("run", spec))
        runs = sum(1 for name, _ in self.calls if name == "run")
        assert self.run_result is not None
        return self.run_result if runs == 1 else self.command_result

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        return ref, None


COMMAND = ("python", "-m", "train", "--steps", "5")


def test_smoke_command_runs_after_the_payload_like_the_payload() -> None:
    # The watcher's record ends stderr (envbuild/payload/watch.py --out -); the command's own
    # stderr is what stays in the tail.
    watch = {"peaks": {"samples": 3}, "telemetry": {"series": {"t": [0, 1, 2]}}, "readings": []}
    stderr = "warn: slow\nENVBUILD-WATCH-REPORT " + json.dumps(watch) + "\n"
    engine = TwoRuns(RunResult(0, "step 5 loss 0.1\n", stderr, duration_s=2.5))
    seen: list[str] = []
    out = build_and_verify(
        engine,
        make_job(smoke_command=COMMAND, shm_mib=4096, timeout_s=77),
        judge=passing,
        progress=seen.append,
    )
    payload, command = (spec for name, spec in engine.calls if name == "run")
    assert command.command == (
        "python",
        "/opt/envbuild/payload/watch.py",
        "--out",
        "-",
        "--",
        *COMMAND,
    )
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
        "stderr_tail": ["warn: slow"],
        "watch": watch,
    }
    assert out.to_json()["smoke_command"] == record
    label = json.loads(engine.image_labels("envbuild-test/demo:ok")[REPORT_LABEL])
    assert label["envbuild"]["smoke_command"] == record
    assert "running the project's smoke command: python -m train --steps 5" in seen
    assert "the project's smoke command passed in 2.5 s" in seen


def test_smoke_time_is_one_figure_the_payload_and_the_command_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """smoke_s = the payload's container + the project's step; the text output shows that
    figure once, with its parts named, and the verdict line carries no other time."""
    from click.testing import CliRunner

    from envbuild.app import image
    from envbuild.cli.main import cli

    command_run = RunResult(0, "done\n", "", duration_s=12.0)
    engine = TwoRuns(command_run, dataclasses.replace(OK_RUN, duration_s=24.25))

    def judge(result: RunResult) -> SmokeJudgement:
        return SmokeJudgement(ok=True, report=PASS_REPORT, summary="smoke PASS: torch on cuda")

    out = build_and_verify(engine, make_job(smoke_command=COMMAND), judge=judge, progress=print)
    doc = out.to_json()
    assert doc["smoke_payload_s"] == 24.25
    assert doc["smoke_command"]["duration_s"] == 12.0
    assert doc["smoke_s"] == 36.25

    monkeypatch.setattr(image, "build_image", lambda **_: out)
    text = CliRunner().invoke(cli, ["image", str(tmp_path)]).stdout
    assert "in 36.2 s (payload 24.2 s + command 12.0 s)" in text
    assert "smoke PASS: torch on cuda\n" in text
    assert "command: pass `python -m train --steps 5`\n" in text


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
    # envbuild's own checks passed before the project's step ran: they are not lost.
    assert err.fields["report"] == PASS_REPORT
    assert not engine.tags
    assert "remove_image" in engine.names()


def test_image_json_of_a_failed_smoke_command_keeps_the_payload_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from envbuild.app import image
    from envbuild.cli.main import cli

    def fake(**_: object) -> object:
        engine = TwoRuns(RunResult(1, "", "ValueError: boom\n", duration_s=1.0))
        return build_and_verify(
            engine, make_job(smoke_command=COMMAND), judge=passing, progress=lambda _: None
        )

    monkeypatch.setattr(image, "build_image", fake)
    result = CliRunner().invoke(cli, ["image", str(tmp_path), "--json"])
    assert result.exit_code == 6
    doc = json.loads(result.stdout.strip().splitlines()[-1])
    assert doc["fields"]["report"] == PASS_REPORT
    assert doc["fields"]["smoke_command"]["ok"] is False


def test_a_permission_failure_says_where_the_runtime_user_may_write() -> None:
    denied = RunResult(
        1,
        "step 1\n",
        "Traceback\nPermissionError: [Errno 13] Permission denied: '/opt/venv/ckpt.pt'\n",
        duration_s=1.0,
    )
    with pytest.raises(SmokeFailed) as info:
        build_and_verify(
            TwoRuns(denied), make_job(smoke_command=COMMAND), judge=passing, progress=print
        )
    err = info.value
    assert "exited 1 after 1.0 s: it could not write a file (Permission denied)" in err.message
    assert "uid 1000, which owns /app" in err.message
    assert err.hint.startswith("write to /app, /tmp or a mounted volume; rerun with --keep-failed")
    assert err.fields["smoke_command"]["hint"] == PERMISSION_HINT
    # Any other failure keeps the plain record.
    assert "hint" not in record(COMMAND, RunResult(1, "", "ValueError: boom\n"))
    assert "hint" not in record(COMMAND, RunResult(0, "", "Permission denied (ignored)\n"))


def test_no_smoke_command_runs_the_payload_only() -> None:
    engine = TwoRuns(RunResult(1, "", ""))
    out = build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert engine.names().count("run") == 1
    assert out.to_json()["smoke_command"] is None


@pytest.mark.parametrize(
    ("stderr", "rest", "watch"),
    [
        ("plain\n", "plain\n", None),
        ('a\nENVBUILD-WATCH-REPORT {"peaks": {}}\n', "a\n", {"peaks": {}}),
        ("a\nENVBUILD-WATCH-REPORT {not json\n", "a\nENVBUILD-WATCH-REPORT {not json\n", None),
        ("ENVBUILD-WATCH-REPORT [1]\n", "ENVBUILD-WATCH-REPORT [1]\n", None),
    ],
)
def test_the_watchers_line_is_split_from_the_commands_stderr(
    stderr: str, rest: str, watch: dict[str, object] | None
) -> None:
    from envbuild.smoke.project_step import split_watch

    got_rest, got_watch = split_watch(stderr)
    assert got_watch == watch
    assert got_rest == (rest if watch is not None else stderr)

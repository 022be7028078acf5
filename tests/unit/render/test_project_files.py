"""What of a project goes into /app (envbuild/request/sourcetree.py): the project's own
.gitignore and .dockerignore decide; envbuild's defaults drop only what is never code
(version control, virtualenvs, caches, build output, checkpoint and data formats) and files
over the size limit, never a folder because of its name. `render` and `lock` say in one line
what was left out; `render --json` and the context's .dockerignore list it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.main import cli
from envbuild.core.models import ProjectSettings
from envbuild.request import sourcetree

ROOT = Path(__file__).resolve().parents[3]
WRITES_CWD = ROOT / "tests" / "fixtures" / "projects" / "writes-cwd"
TORCH_PROJECT = ROOT / "images" / "torch-project"


def blob(path: Path, size: int) -> None:
    """A sparse file of `size` bytes (no disk used): data the rules must leave out by size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        out.truncate(size)


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def gpt_like(tmp_path: Path) -> Path:
    """The writes-cwd fixture as a real trainer's checkout: a data/ folder with its prepare
    script next to the blobs it makes, a venv, git, caches, and run output."""
    project = tmp_path / "trainer"
    shutil.copytree(WRITES_CWD, project)
    blob(project / "data" / "shakespeare" / "train.bin", 12 << 20)
    blob(project / "data" / "shakespeare" / "input.txt", 11 << 20)
    write(
        project,
        {
            "data/shakespeare/prepare.py": "print('tokenise')\n",
            "data/shakespeare/readme.md": "small\n",
            ".git/HEAD": "ref: refs/heads/main\n",
            ".venv/bin/python": "",
            "__pycache__/train.cpython-311.pyc": "",
            "out/ckpt.txt": "run output\n",
            "train.log": "old run\n",
            ".gitignore": "out/\n*.log\n",
        },
    )
    return project


def test_a_data_folder_with_code_is_copied_and_its_large_blobs_are_not(tmp_path: Path) -> None:
    project = gpt_like(tmp_path)
    found = sourcetree.survey(project, [], image_dir=project)
    own = (WRITES_CWD / "envbuild.toml").stat().st_size
    assert list(found.kept) == [
        ".gitignore",
        "data/prepare.py",
        "data/shakespeare/prepare.py",
        "data/shakespeare/readme.md",
        "train.py",
    ]
    assert [(e.path, e.why, e.size) for e in found.left_out] == [
        (".git/", "a secret: **/.git", None),
        (".venv/", "envbuild's defaults: **/.venv", None),
        ("__pycache__/", "envbuild's defaults: **/__pycache__", None),
        ("data/shakespeare/input.txt", "over 10 MiB", 11 << 20),
        ("data/shakespeare/train.bin", "envbuild's defaults: **/*.bin", 12 << 20),
        ("envbuild.toml", "the image folder's own files: envbuild.toml", own),
        ("out/", ".gitignore: out/", None),
        ("train.log", ".gitignore: *.log", 8),
    ]
    assert found.summary() == (
        "left out of /app: 4 files, 23 MiB, 4 folders (data/shakespeare/train.bin; "
        "data/shakespeare/input.txt over 10 MiB; envbuild.toml; train.log; .git/; 3 more)"
    )


def test_the_users_own_rules_decide_last(tmp_path: Path) -> None:
    project = gpt_like(tmp_path)
    write(
        project,
        {
            ".dockerignore": "# Docker's rules: anchored at the top\nprepare.py\n",
            "data/.gitignore": "*.md\n",  # git's rules: relative to data/, at any depth
        },
    )
    rules = ["!data/shakespeare/input.txt", "!data/shakespeare/train.bin"]
    found = sourcetree.survey(project, rules, image_dir=project)
    # `!` in [project] ignore names a file: it goes in over the size limit and the defaults.
    assert "data/shakespeare/input.txt" in found.kept
    assert "data/shakespeare/train.bin" in found.kept
    assert "data/prepare.py" in found.kept  # `prepare.py` in .dockerignore is the top one only
    why = {e.path: e.why for e in found.left_out}
    assert why["data/shakespeare/readme.md"] == "data/.gitignore: *.md"
    assert why[".dockerignore"] == "envbuild's defaults: .dockerignore"
    # A folder no `!` rule reaches is still skipped whole.
    assert why[".git/"] == "a secret: **/.git"
    # git's `!` does not lift the size limit: it re-includes, it does not ask for a blob.
    write(project, {".gitignore": "*.txt\n!input.txt\n"})
    assert "data/shakespeare/input.txt" not in sourcetree.survey(project, []).kept


def test_the_image_folders_files_stay_out_the_projects_own_do_not(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "train.py": "",
            "Dockerfile.j2": "{% extends envbuild_template %}\n",  # the project's, not envbuild's
            "images/x/envbuild.toml": "",
            "images/x/envbuild.lock": "",
            "images/x/Dockerfile.j2": "",
            "images/x/notes.md": "",
            "images/y/envbuild.toml": "",  # another image folder's: the project's file
        },
    )
    found = sourcetree.survey(tmp_path, [], image_dir=tmp_path / "images" / "x")
    assert list(found.kept) == [
        "Dockerfile.j2",
        "images/x/notes.md",
        "images/y/envbuild.toml",
        "train.py",
    ]


def test_render_reports_what_was_left_out(tmp_path: Path) -> None:
    image = tmp_path / "torch-project"
    shutil.copytree(TORCH_PROJECT, image, ignore=shutil.ignore_patterns("__pycache__"))
    blob(image / "data" / "corpus.txt", 20 << 20)
    write(image, {"data/prepare.py": "print(1)\n"})
    (tmp_path / "wheels").mkdir()  # torch-project's torch comes from a wheelhouse
    wheels = ["--find-links", str(tmp_path / "wheels")]
    res = CliRunner().invoke(
        cli, ["render", str(image), "--context", str(tmp_path / "ctx"), *wheels]
    )
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[-1] == (
        "left out of /app: 3 files, 20 MiB (data/corpus.txt over 10 MiB; envbuild.lock; "
        "envbuild.toml)"
    )
    context = tmp_path / "ctx"
    assert (context / "project" / "data" / "prepare.py").is_file()
    assert not (context / "project" / "data" / "corpus.txt").exists()
    assert (context / ".dockerignore").read_text().splitlines()[1:] == [
        "project/data/corpus.txt",
        "project/envbuild.lock",
        "project/envbuild.toml",
    ]
    res = CliRunner().invoke(cli, ["render", str(image), "--json"])
    doc = json.loads(res.stdout)
    assert doc["left_out"][0] == {
        "path": "data/corpus.txt",
        "why": "over 10 MiB",
        "bytes": 20 << 20,
    }


def test_a_context_holds_the_files_as_the_rules_chose(tmp_path: Path) -> None:
    project = gpt_like(tmp_path)
    os.symlink(project / "train.py", project / "alias.py")
    files = sourcetree.context_files(ProjectSettings(path=".", install=False), project)
    assert sorted(files) == [
        ".dockerignore",
        "project/.gitignore",
        "project/alias.py",
        "project/data/prepare.py",
        "project/data/shakespeare/prepare.py",
        "project/data/shakespeare/readme.md",
        "project/train.py",
    ]
    assert files["project/alias.py"] == (project / "train.py").read_bytes()


def test_lock_prints_the_line_and_json_has_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    from envbuild.app.lock import LockOutcome
    from envbuild.cli.commands import lock as lock_command
    from tests.golden import fixtures

    entries = (
        sourcetree.LeftOut(".git/", "envbuild's defaults: .git"),
        sourcetree.LeftOut("data/a.bin", "envbuild's defaults: **/*.bin", 3 << 20),
        sourcetree.LeftOut("data/b.bin", "envbuild's defaults: **/*.bin", 2 << 20),
    )
    outcome = LockOutcome(
        path=Path("images/x/envbuild.lock"),
        status="written",
        lock=fixtures.cpu_lock(),
        text="",
        left_out=entries,
    )
    lock_command._print(outcome)
    out = capsys.readouterr().out.splitlines()
    assert "  left out of /app: 2 files, 5 MiB, 1 folder (data/*.bin; .git/)" in out
    lock_command._emit_json(outcome)
    doc = json.loads(capsys.readouterr().out)
    assert doc["left_out"][1] == {"path": "data/a.bin", "why": entries[1].why, "bytes": 3 << 20}


def test_a_gitignore_line_git_cannot_match_is_skipped_as_git_skips_it(tmp_path: Path) -> None:
    # A lone `!`, a bad range and a trailing backslash made pathspec raise: exit 70 on `render`.
    write(tmp_path, {"train.py": "", "run.log": "", ".gitignore": "!\n[z-a]\nx\\\n*.log\n"})
    found = sourcetree.survey(tmp_path, ())
    assert sorted(found.kept) == [".gitignore", "train.py"]
    assert [e.path for e in found.left_out] == ["run.log"]


def test_a_docker_rule_that_cannot_match_is_refused_naming_it(tmp_path: Path) -> None:
    from envbuild.core.errors import RequestError

    write(tmp_path, {"train.py": ""})
    with pytest.raises(RequestError, match=r"\[project\] ignore: the rule '\[z-a\]'"):
        sourcetree.survey(tmp_path, ("[z-a]",))
    with pytest.raises(RequestError, match="not a valid pattern"):
        sourcetree.top_level(tmp_path, ("data\\",))


def test_the_keep_hint_brings_back_what_the_checkouts_gitignore_left_out(tmp_path: Path) -> None:
    """llm-foundry's shape: `*.jsonl*` in its .gitignore drops a tracked example dataset that
    its config names. The hint's rule, written into [project] ignore as printed, keeps it."""
    project = tmp_path / "proj"
    (project / "scripts" / "train").mkdir(parents=True)
    (project / ".gitignore").write_text("*.jsonl*\n")
    (project / "scripts" / "train" / "train.jsonl").write_text("{}\n")
    (project / "data.jsonl").write_text("{}\n")
    (project / "it's.jsonl").write_text("{}\n")  # no plain rule for a quote in a TOML string
    found = sourcetree.survey(project, [])
    hint = sourcetree.keep_hint(found.left_out)
    assert hint == (
        'keep data.jsonl with [project] ignore = ["!data.jsonl"] (every .jsonl file: "!**/*.jsonl")'
    )
    assert "data.jsonl" in sourcetree.survey(project, ["!data.jsonl"]).kept
    every = sourcetree.survey(project, ["!**/*.jsonl"]).kept
    assert {"data.jsonl", "scripts/train/train.jsonl", "it's.jsonl"} <= set(every)


def test_no_keep_hint_for_what_envbuild_itself_leaves_out(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "id_rsa.key").write_text("x")  # a secret by its name: envbuild's own rule
    (project / "big.bin").write_bytes(b"\0" * (sourcetree.MAX_FILE_BYTES + 1))
    found = sourcetree.survey(project, [])
    assert {e.path for e in found.left_out} >= {"id_rsa.key", "big.bin"}
    assert sourcetree.keep_hint(found.left_out) == ""

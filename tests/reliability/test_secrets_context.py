"""Secrets never reach a build context (docs/reliability.md, "Round 3"): a project folder
holding every kind of credential file a repository carries next to its code, and links to
them, gives a context with none of them, each named in what was left out."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envbuild.core.errors import RequestError
from envbuild.core.models import ProjectSettings
from envbuild.request import sourcetree
from tests.reliability.helpers import copy_example, run
from tests.reliability.hostile import fake_uv

KEY_BLOCK = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
CERT_BLOCK = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"

SECRETS = {
    ".env": "TOKEN=1\n",
    ".env.production": "TOKEN=2\n",
    "sub/.env.local": "TOKEN=3\n",
    ".envrc": "export TOKEN=4\n",
    ".netrc": "machine example.org login me password hunter2\n",
    ".pypirc": "[pypi]\npassword = pypi-token\n",
    ".git-credentials": "https://me:token@example.org\n",
    ".npmrc": "//registry.npmjs.org/:_authToken=npm-token\n",
    ".ssh/id_ed25519": KEY_BLOCK,
    ".aws/credentials": "[default]\naws_secret_access_key = x\n",
    ".docker/config.json": '{"auths": {"example.org": {"auth": "bWU6dG9rZW4="}}}\n',
    ".kube/config": "users:\n- name: me\n  user:\n    token: kube-token\n",
    "deploy/server.key": "key material\n",
    "deploy/server.pem": CERT_BLOCK + KEY_BLOCK,
    "notes/backup.txt": "my key, kept here:\n" + KEY_BLOCK,
    ".git/config": "[remote]\n",
}
KEPT = {
    "train.py": "print('train')\n",
    "deploy/ca.pem": CERT_BLOCK,  # a certificate alone is not a secret
    ".docker/Dockerfile.dev": "FROM scratch\n",  # only config.json is Docker's credential file
}


def _project(root: Path) -> Path:
    project = root / "repo"
    for rel, text in {**SECRETS, **KEPT}.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    # Links judged by their target: one to .env, one into .git, one to a key by content.
    os.symlink(".env", project / "settings.txt")
    os.symlink(".git/config", project / "gitconfig")
    os.symlink("notes/backup.txt", project / "readme-key.txt")
    return project


def test_a_context_from_a_folder_of_secrets_holds_none_of_them(tmp_path: Path) -> None:
    project = _project(tmp_path)
    files = sourcetree.context_files(ProjectSettings(path=".", install=False), project)
    copied = {rel.removeprefix("project/") for rel in files if rel.startswith("project/")}
    assert copied == set(KEPT)
    for data in files.values():
        assert b"PRIVATE KEY" not in data or data.startswith(b"# Generated")
        for secret in (b"hunter2", b"npm-token", b"kube-token", b"pypi-token", b"bWU6"):
            assert secret not in data
    # What was left out is listed, each secret by its path or its folder.
    survey = sourcetree.survey(project, ())
    listed = {entry.path for entry in survey.left_out}
    for rel in SECRETS:
        top = rel.split("/")[0]
        assert rel in listed or f"{top}/" in listed, (rel, listed)
    for link in ("settings.txt", "gitconfig", "readme-key.txt"):
        assert link in listed, listed
    why = {entry.path: entry.why for entry in survey.left_out}
    assert "private key" in why["notes/backup.txt"]
    assert "private key" in why["deploy/server.pem"]
    assert ".env" in why["settings.txt"]
    assert "deploy/server.pem" in survey.summary() or "secret" in survey.summary()


def test_what_a_build_backend_sees_holds_no_secret(tmp_path: Path) -> None:
    """The top-level names the image's build backend sees (`top_level`) follow the same
    rules as the context."""
    project = _project(tmp_path)
    dirs, files = sourcetree.top_level(project, ())
    assert not {".git", ".ssh", ".aws"} & set(dirs), dirs  # .kube/ holds more than config
    assert not {".env", ".netrc", ".npmrc", ".envrc", ".pypirc"} & set(files), files
    assert "train.py" in files


def test_no_ignore_file_of_the_project_brings_a_secret_back(tmp_path: Path) -> None:
    """A `.gitignore` or `.dockerignore` of the checkout cannot re-include a secret; only the
    request's own `[project] ignore` can name one (the user asking for it)."""
    project = _project(tmp_path)
    (project / ".dockerignore").write_text("!.npmrc\n!.env\n!.ssh\n")
    (project / ".gitignore").write_text("!.netrc\n")
    kept = sourcetree.survey(project, ()).kept
    assert not {".npmrc", ".env", ".netrc", ".ssh/id_ed25519"} & set(kept)
    named = sourcetree.survey(project, ("!.npmrc",)).kept
    assert ".npmrc" in named and ".env" not in named


def test_a_project_path_into_a_home_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "me"
    image = home / "images" / "x"
    image.mkdir(parents=True)
    (home / ".git").mkdir()  # a dotfiles repository: the home folder is the repository
    monkeypatch.setenv("HOME", str(home))
    for path in ("../..", "../../", "../../.ssh/.."):
        with pytest.raises(RequestError, match="home folder"):
            sourcetree.project_folder(ProjectSettings(path=path), image)
    with pytest.raises(RequestError, match="outside the repository"):
        sourcetree.project_folder(ProjectSettings(path="../../.."), image)
    (home / "code").mkdir()
    assert sourcetree.project_folder(ProjectSettings(path="../../code"), image) == home / "code"


def test_a_link_out_of_the_project_is_not_followed(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    (project / "train.py").write_text("x = 1\n")
    (tmp_path / "id_rsa").write_text(KEY_BLOCK)
    os.symlink(tmp_path / "id_rsa", project / "key.txt")
    with pytest.raises(Exception, match="outside the project folder") as info:
        sourcetree.context_files(ProjectSettings(path=".", install=False), project)
    assert "PRIVATE" not in str(info.value)


def test_render_context_of_a_project_full_of_secrets(tmp_path: Path) -> None:
    """Through the CLI: `lock` then `render --context` of an image whose project holds every
    secret above; the context folder holds none, and both commands list what was left out."""
    image = copy_example(tmp_path, "torch-train")
    project = _project(image)
    request = image / "envbuild.toml"
    request.write_text(request.read_text() + '\n[project]\npath = "repo"\ninstall = false\n')
    env = {**fake_uv(tmp_path / "uv"), "ENVBUILD_NO_INDEX_PROBE": "1"}
    out = run("lock", "--offline", str(image), env=env)
    assert out.code == 0, out.text
    assert "left out of /app: " in out.out, out.text
    context = tmp_path / "ctx"
    out = run("render", str(image), "--context", str(context), "--json")
    assert out.code == 0, out.text
    listed = {entry["path"] for entry in json.loads(out.out)["left_out"]}
    assert {".netrc", ".npmrc", "deploy/server.pem", "settings.txt", ".git/"} <= listed
    copied = {
        p.relative_to(context / "project").as_posix()
        for p in (context / "project").rglob("*")
        if p.is_file()
    }
    assert copied == set(KEPT)
    for path in context.rglob("*"):
        if path.is_file() and path.name != ".dockerignore":
            assert b"hunter2" not in path.read_bytes() and b"PRIVATE KEY" not in path.read_bytes()
    assert project.is_dir()

"""Dynamic dependencies a build backend only reads from files (envbuild/lock/dynamicdeps.py):
setuptools' `[tool.setuptools.dynamic] dependencies = {file = [...]}` (and optional
dependencies), hatch-requirements-txt's `[tool.hatch.metadata.hooks.requirements_txt]`. Sources:
https://setuptools.pypa.io/en/latest/userguide/pyproject_config.html#dynamic-metadata and
https://github.com/repo-helper/hatch-requirements-txt (its README's configuration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.app import lock as lock_use_case
from envbuild.core.errors import RequestError, StaleLockError
from tests.unit.lock.test_lockfile import DEMO_REQUEST
from tests.unit.lock.test_project_lock import requirement_lines, setup

SETUPTOOLS = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "trainer"
version = "0.1.0"
dynamic = ["dependencies", "optional-dependencies"]

[tool.setuptools.dynamic]
dependencies = {file = ["requirements.txt", "requirements/extra.txt"]}
optional-dependencies.viz = {file = "requirements-viz.txt"}
"""

HATCH = """\
[build-system]
requires = ["hatchling", "hatch-requirements-txt"]
build-backend = "hatchling.build"

[project]
name = "trainer"
version = "0.1.0"
dynamic = ["dependencies"]

[tool.hatch.metadata.hooks.requirements_txt]
"""


def _request(extras: str = "") -> str:
    return DEMO_REQUEST.replace(
        '[packages]\nrequirements = ["numpy<3"]\n',
        f'[packages]\nfiles = ["pyproject.toml"]\n{extras}',
    )


def test_setuptools_reads_them_from_files_and_so_does_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(_request('extras = ["viz"]\n'))
    (image / "pyproject.toml").write_text(SETUPTOOLS)
    (image / "requirements").mkdir()
    (image / "requirements.txt").write_text("# the core\ntorch>=2.6\neinops>=0.8\t# tensors\n")
    (image / "requirements" / "extra.txt").write_text("safetensors\n")
    (image / "requirements-viz.txt").write_text("tqdm>=4.66\n")
    outcome = lock_use_case.lock_image(image)
    assert requirement_lines(uv) == [
        "torch==2.10.0",
        "torch>=2.6",
        "einops>=0.8",
        "safetensors",
        "tqdm>=4.66",
    ]
    assert [path for path, _ in outcome.lock.input_files] == [
        "pyproject.toml",
        "requirements-viz.txt",
        "requirements.txt",
        "requirements/extra.txt",
    ]
    lock_use_case.check_image(image)  # fresh
    (image / "requirements" / "extra.txt").write_text("safetensors>=0.4\n")
    with pytest.raises(StaleLockError) as info:
        lock_use_case.check_image(image)
    assert info.value.message.endswith("is stale: requirements/extra.txt changed")


def test_naming_another_file_makes_the_lock_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, _ = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(_request())
    text = SETUPTOOLS.replace(', "optional-dependencies"]', "]").replace(
        'optional-dependencies.viz = {file = "requirements-viz.txt"}\n', ""
    )
    (image / "pyproject.toml").write_text(text.replace(', "requirements/extra.txt"', ""))
    (image / "requirements.txt").write_text("einops\n")
    (image / "other.txt").write_text("einops\n")
    lock_use_case.lock_image(image)
    (image / "pyproject.toml").write_text(
        text.replace('["requirements.txt", "requirements/extra.txt"]', '["other.txt"]')
    )
    with pytest.raises(StaleLockError) as info:
        lock_use_case.check_image(image)
    assert "pyproject.toml changed" in info.value.message


def test_hatch_requirements_txt_reads_requirements_txt_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(_request())
    (image / "pyproject.toml").write_text(HATCH)
    (image / "requirements.txt").write_text("einops>=0.8\n")
    lock_use_case.lock_image(image)
    assert requirement_lines(uv) == ["torch==2.10.0", "einops>=0.8"]


@pytest.mark.parametrize(
    ("pyproject", "files", "said"),
    [
        # setuptools reads requirement lines and comments only: an option line would stop it.
        (SETUPTOOLS, {"requirements.txt": "-r base.txt\n"}, "requirement lines and comments only"),
        (SETUPTOOLS, {}, "requirements.txt: no such file"),
        (
            SETUPTOOLS.replace('{file = ["requirements.txt", "requirements/extra.txt"]}', "3"),
            {},
            "is not a file name or a list of them",
        ),
        (
            SETUPTOOLS.replace('"requirements.txt", ', '"../../../../outside.txt", '),
            {},
            "outside the repository",
        ),
        # Inside the repository but above the project: setuptools refuses it, and the image
        # holds only the project's folder.
        (
            SETUPTOOLS.replace('"requirements.txt", ', '"../requirements.txt", '),
            {"../requirements.txt": "einops\n"},
            "is outside the project's folder",
        ),
        # Computed by the backend (an attr, a plugin envbuild does not know): refused as before.
        (
            HATCH.replace("[tool.hatch.metadata.hooks.requirements_txt]\n", ""),
            {},
            "dependencies are dynamic (computed by the build backend)",
        ),
    ],
)
def test_what_the_backend_would_not_read_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pyproject: str,
    files: dict[str, str],
    said: str,
) -> None:
    image, _ = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(_request())
    (image / "pyproject.toml").write_text(pyproject)
    (image / "requirements").mkdir()
    (image / "requirements" / "extra.txt").write_text("safetensors\n")
    (image / "requirements-viz.txt").write_text("tqdm\n")
    for name, text in files.items():
        (image / name).write_text(text)
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert said in info.value.message
    assert info.value.exit_code == 2
    assert not (image / "envbuild.lock").exists()


def test_tables_the_lock_does_not_read_leave_the_digest_as_it_was() -> None:
    """A pyproject.toml whose [tool.setuptools.dynamic] is not listed in [project] dynamic
    (setuptools ignores it then) keeps the digest its locks were made with."""
    from envbuild.core.documents import toml_loads
    from envbuild.lock.projectdeps import pyproject_digest

    plain = '[project]\nname = "x"\nversion = "1"\ndependencies = ["einops"]\n'
    unread = plain + '[tool.setuptools.dynamic]\ndependencies = {file = ["r.txt"]}\n'
    assert pyproject_digest(toml_loads(unread)) == pyproject_digest(toml_loads(plain))
    read = unread.replace('dependencies = ["einops"]', 'dynamic = ["dependencies"]')
    other = read.replace("r.txt", "s.txt")
    assert pyproject_digest(toml_loads(read)) != pyproject_digest(toml_loads(other))

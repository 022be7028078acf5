"""A project on a framework base, against the real engine, with the CPU-torch base of
test_framework_base_engine standing in for an NGC container: images/torch-project (its
pyproject.toml dependencies and extras, a hatchling build backend, its own smoke command) is
locked under what the base holds, installed with --no-deps, smoke-tested by its own command
in the candidate, and tagged. (A CUDA extension needs a CUDA devel base: that path is locked in
tests/unit/lock/test_base_extras.py and built on a GPU machine by tests/gpu/h200_image_e2e.py.)
Marked e2e and network (PyPI).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from envbuild.app.image import ImageRequest, build_image
from envbuild.app.lock import check_image, lock_image
from envbuild.core.errors import StaleLockError
from envbuild.engine.docker import DockerEngine
from envbuild.render.dockerfile import BuildInputs
from tests.integration.test_framework_base_engine import CA, torch_base

pytestmark = [pytest.mark.engine, pytest.mark.e2e, pytest.mark.network]
__all__ = ["torch_base"]  # the module-scoped fixture, shared

REPO = Path(__file__).resolve().parents[2]


def _project(tmp_path: Path, base: str) -> Path:
    folder = tmp_path / "fw-project"
    src = REPO / "images" / "torch-project"
    shutil.copytree(src / "src", folder / "src")
    shutil.copy(src / "pyproject.toml", folder / "pyproject.toml")
    (folder / "envbuild.toml").write_text(
        f'[image]\nbase = "{base}"\ndevice = "cpu"\n\n'
        '[framework]\nrequirement = "torch>=2.12"\n\n'
        '[packages]\nfiles = ["pyproject.toml"]\nextras = ["train"]\n\n'
        '[project]\npath = "."\ncommand = ["python", "-m", "torch_project.train"]\n\n'
        '[smoke]\ntier = 1\ncommand = "python -m torch_project.train --steps 5"\n'
    )
    return folder


def test_a_project_on_a_framework_base_builds_smokes_and_tags(
    engine: DockerEngine, tmp_path: Path, torch_base: str
) -> None:
    folder = _project(tmp_path, torch_base)
    locked = lock_image(folder, engine=engine).lock
    names = sorted(p.name for p in locked.packages)
    # torch is the base's (not locked again); numpy, tqdm and the build backend are pinned.
    assert "torch" not in names and {"numpy", "tqdm", "hatchling"} <= set(names)
    assert locked.project is not None and locked.project.install
    assert [path for path, _ in locked.input_files] == ["pyproject.toml"]
    assert check_image(folder).status == "fresh"  # `lock --check`: no engine, no resolver
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"numpy>=1.26"', '"numpy>=1.27"'))
    with pytest.raises(StaleLockError):
        check_image(folder)
    locked = lock_image(folder, engine=engine).lock
    tag = f"envbuild-it/fw-project:{uuid.uuid4().hex[:12]}"
    try:
        outcome = build_image(
            image_dir=folder,
            request=ImageRequest(tag=tag),
            build_inputs=BuildInputs(ca_cert=CA if CA.exists() else None),
            engine=engine,
        )
        doc = outcome.to_json()
        assert doc["tag"] == tag and engine.image_exists(tag)
        assert doc["smoke_command"]["ok"] is True
        versions = outcome.report["versions"]
        assert versions["framework"] == {"expected": "2.13.0+cpu", "seen": "2.13.0+cpu"}
    finally:
        if engine.image_exists(tag):
            engine.remove_image(tag)

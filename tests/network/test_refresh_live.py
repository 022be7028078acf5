"""Live PyPI: refresh torch and check the newest release's cuDNN and NCCL pins against the
wheel metadata read directly. Run with `pytest -m network tests/network`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from envbuild.app import matrix as matrix_use_case
from envbuild.matrix import refresh
from envbuild.matrix.refresh import pypi

pytestmark = pytest.mark.network


def test_newest_torch_pins_match_its_wheel_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "matrix"
    folder.mkdir()
    result = matrix_use_case.refresh_matrix(
        sources=("pypi",), frameworks=("torch",), dry_run=False, matrix_dir=folder
    )
    assert result.sources_ok == ("pypi",)
    newest = max(result.plan.new_releases, key=lambda r: refresh.Version(r.version))

    # Independently: the newest final release with a Linux x86_64 wheel, and that wheel's
    # METADATA, read with a fresh fetcher (no cache) and matched with plain regexes.
    f = pypi.Fetcher(use_cache=False)
    data = pypi.simple_project(f, "torch")
    linux = [
        x
        for x in data["files"]
        if x["filename"].endswith("_x86_64.whl")
        and "linux" in x["filename"]
        and not x.get("yanked")
    ]
    versions = {refresh.Version(x["filename"].split("-")[1]) for x in linux}
    finals = sorted(v for v in versions if not v.is_prerelease)
    assert newest.version == str(finals[-1])
    wheel = next(x for x in linux if x["filename"].split("-")[1] == newest.version)
    text = pypi.wheel_metadata(f, refresh.parse_simple_json({"files": [wheel]})[0])
    cudnn = re.search(r"^Requires-Dist: nvidia-cudnn-cu\d+==([\d.]+)", text, re.M)
    nccl = re.search(r"^Requires-Dist: nvidia-nccl-cu\d+==([\d.]+)", text, re.M)
    assert cudnn and nccl, "the newest torch wheel pins no cuDNN/NCCL wheel"

    builds = [
        b for b in result.plan.pending_builds if SpecifierSet(b.versions).contains(newest.version)
    ]
    assert len(builds) == 1
    assert (builds[0].cudnn, builds[0].nccl) == (cudnn.group(1), nccl.group(1))
    # The release row was written to the (empty) matrix folder and parses back.
    assert f'version = "{newest.version}"' in (folder / "torch.toml").read_text()

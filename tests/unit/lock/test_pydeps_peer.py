"""`pydeps.peer_compile_command`: the plain `uv pip compile` benchmarks/lock.py measures envbuild's
lock against must ask uv exactly what `envbuild lock` asked it (same requirements, Python,
platform, index order, find-links), or the comparison is between different jobs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from envbuild.app import lock as lock_use_case
from envbuild.lock import pins as pydeps
from envbuild.lock.pins import RunResult
from envbuild.request.parse import load_request
from tests.unit.lock.test_lockfile import DEMO_REQUEST, FakeUv, install_fakes, make_image

UV_PIN = """
[[packages]]
name = "uv"
version = "0.9.0"
wheels = [{ url = "https://files.pythonhosted.org/packages/00/00/uv-0.9.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", size = 1, hashes = { sha256 = "0000000000000000000000000000000000000000000000000000000000000000" } }]
"""
"""The image's installer, which `envbuild lock` asks uv for alongside the packages."""


class RecordingUv(FakeUv):
    def __init__(self) -> None:
        super().__init__()
        self.text += UV_PIN
        self.requirements: list[str] = []

    def __call__(self, argv: Any, cwd: Path, env: Any) -> RunResult:
        self.requirements.append((cwd / "requirements.in").read_text())
        return super().__call__(argv, cwd, env)


def test_peer_command_asks_uv_what_envbuild_lock_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uv = install_fakes(monkeypatch, uv=RecordingUv())
    assert isinstance(uv, RecordingUv)
    text = DEMO_REQUEST + (
        '\n[indexes]\nextra_index_urls = ["https://mirror.example/simple"]\n'
        'find_links = ["wheels"]\n'
    )
    image = make_image(tmp_path, text)
    (image / "wheels").mkdir()
    outcome = lock_use_case.lock_image(image)

    argv, requirements = pydeps.peer_compile_command(
        outcome.lock, load_request(image), image_dir=image, uv=("uv",)
    )
    ours = uv.calls[0]
    assert [p.name for p in outcome.lock.installer] == ["uv"]
    assert requirements == uv.requirements[0] == "torch==2.10.0\nnumpy<3\nuv\n"
    # Identical but for the output (envbuild reads PEP 751, a user writes requirements.txt),
    # the interpreter envbuild names (uv builds nothing; a user lets uv find one) and the
    # companions' series envbuild constrains (torchvision 0.25.* for torch 2.10: companions.py).
    assert ours[-2:] == ["--python", sys.executable]
    ours = ours[:-2]
    c = ours.index("--constraint")
    ours = ours[:c] + ours[c + 2 :]
    assert ours[ours.index("--format") : ours.index("--format") + 4] == [
        "--format",
        "pylock.toml",
        "--output-file",
        "pylock.toml",
    ]
    i = argv.index("--output-file")
    assert argv[i : i + 2] == ["--output-file", "requirements.txt"]
    assert "--format" not in argv
    strip = ours.index("--format")
    assert argv[:i] + argv[i + 2 :] == ours[:strip] + ours[strip + 4 :]
    assert argv[argv.index("--find-links") + 1] == str((image / "wheels").resolve())
    assert "--generate-hashes" in argv

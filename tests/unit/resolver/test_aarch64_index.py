"""Linux aarch64 builds on PyTorch's own index (matrix/torch.toml, the aarch64 index rows):
Grace hosts and aarch64 CPU images resolve to what those indexes hold, with the index URL in
the stack."""

from __future__ import annotations

import pytest

from envbuild.core.models import Stack
from envbuild.matrix import load_matrix
from envbuild.request.parse import request_from_flags
from envbuild.resolver import resolve


@pytest.mark.parametrize(
    ("flags", "version", "index"),
    [
        (
            {"gpus": ("GH200",), "driver": "550.54.15"},
            "2.12.1",
            "https://download.pytorch.org/whl/cu126",
        ),
        (
            {"gpus": ("GB200",), "driver": "570.124.06", "framework": "torch==2.11.*"},
            "2.11.0",
            "https://download.pytorch.org/whl/cu128",
        ),
        (
            {"gpus": ("GH200",), "driver": "570.124.06", "framework": "torch==2.9.*"},
            "2.9.1",
            "https://download.pytorch.org/whl/cu128",
        ),
        ({"cpu": True}, "2.14.0", "https://download.pytorch.org/whl/cpu"),
    ],
)
def test_aarch64_picks_install_from_the_index_that_holds_them(
    flags: dict[str, object], version: str, index: str
) -> None:
    stack = resolve(request_from_flags(platform="aarch64", **flags), load_matrix())  # type: ignore[arg-type]
    assert isinstance(stack, Stack), stack
    assert stack.archs == () or "sm_90" in stack.archs or "sm_100" in stack.archs
    assert (stack.framework.version, stack.framework.index_url) == (version, index)


def test_every_aarch64_index_build_names_its_index_and_a_published_arch_list() -> None:
    rows = [
        b
        for b in load_matrix().builds
        if b.framework == "torch" and "aarch64" in b.platforms and b.index_url
    ]
    assert rows
    for b in rows:
        assert b.index_url == f"https://download.pytorch.org/whl/{b.variant}", b.key
        # the arch list is RELEASE.md's, or that of the aarch64 build script of the release's era
        # (2.7-2.10, where RELEASE.md has no aarch64 table)
        published = "RELEASE.md" in b.source or "aarch64_ci_build.sh" in b.source
        assert b.cuda is None or published, b.key

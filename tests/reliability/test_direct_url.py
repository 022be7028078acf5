"""Direct-URL requirements (`name @ https://.../x.whl`) end to end: `lock` records the wheel's
sha256 (uv's PEP 751 output has it under `archive`) and the URL as its source, `lock --check`
and `render` accept the lock, and the Dockerfile's requirements install that file with its hash
(`name @ URL --hash=...`, pip's hash-checking mode), never the URL as an index. A direct URL
the build cannot reach (`file://`) or one without a hash is refused at lock time, with the way
out, instead of being locked as `hashes = []` for `render` to refuse later.

uv's output format was read from uv 0.13 itself:
`uv pip compile --format pylock.toml --generate-hashes` on `six @ https://...whl` writes
`archive = { url = "...", hashes = { sha256 = "..." } }`; on a local path, `archive = { path = ... }`.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from tests.reliability.helpers import assert_clear_error, copy_example, run
from tests.reliability.hostile import fake_uv

URL = "https://example.org/wheels/envbuild_probe-1.0-py3-none-any.whl"
SHA = "d1e348deafd9f401148f4bfd7d9b1815d6be418ec639d973a2479bdf07128c07"


def _image_with(tmp_path: Path, requirement: str) -> Path:
    image = copy_example(tmp_path, "torch-train")
    request = image / "envbuild.toml"
    request.write_text(
        request.read_text().replace(
            'requirements = ["numpy<3"]', f'requirements = ["numpy<3", "{requirement}"]'
        )
    )
    return image


def _archive(where: str, sha: str | None) -> str:
    hashes = f', hashes = {{ sha256 = "{sha}" }}' if sha else ""
    return (
        f'[[packages]]\nname = "envbuild-probe"\nversion = "1.0"\narchive = {{ {where}{hashes} }}\n'
    )


def test_https_direct_url_locks_with_its_hash_and_renders(tmp_path: Path) -> None:
    image = _image_with(tmp_path, f"envbuild-probe @ {URL}")
    env = fake_uv(tmp_path / "uv", extra=_archive(f'url = "{URL}"', SHA))
    out = run("lock", "--offline", str(image), env=env)
    assert out.code == 0, out.text
    text = (image / "envbuild.lock").read_text()
    block = text[text.index('name = "envbuild-probe"') :].split("\n\n", 1)[0]
    assert f'source = "{URL}"' in block, block
    assert f"sha256:{SHA}" in block, block

    assert run("lock", "--check", str(image)).code == 0

    dockerfile = run("render", str(image))
    assert dockerfile.code == 0, dockerfile.text
    assert f"--extra-index-url {URL}" not in dockerfile.out
    assert "example.org" not in dockerfile.out  # the URL is in requirements.lock, not an index

    ctx = tmp_path / "ctx.tar"
    assert run("render", str(image), "--context", str(ctx)).code == 0
    with tarfile.open(ctx) as tar:
        member = tar.extractfile("requirements.lock")
        assert member is not None
        requirements = member.read().decode()
    assert f"envbuild-probe @ {URL} \\\n    --hash=sha256:{SHA}" in requirements, requirements
    assert "envbuild-probe==1.0" not in requirements


def test_file_direct_url_is_refused_at_lock_time(tmp_path: Path) -> None:
    wheel = tmp_path / "wh" / "envbuild_probe-1.0-py3-none-any.whl"
    image = _image_with(tmp_path, f"envbuild-probe @ file://{wheel}")
    before = (image / "envbuild.lock").read_bytes()
    env = fake_uv(tmp_path / "uv", extra=_archive(f'path = "{wheel}"', SHA))
    out = run("lock", "--offline", str(image), env=env)
    assert_clear_error(out, 2, names="envbuild-probe")
    assert "find_links" in out.err, out.err  # the way out: a wheelhouse and a plain pin
    assert (image / "envbuild.lock").read_bytes() == before


def test_direct_url_without_a_hash_is_refused_at_lock_time(tmp_path: Path) -> None:
    image = _image_with(tmp_path, f"envbuild-probe @ {URL}")
    before = (image / "envbuild.lock").read_bytes()
    env = fake_uv(tmp_path / "uv", extra=_archive(f'url = "{URL}"', None))
    out = run("lock", "--offline", str(image), env=env)
    assert_clear_error(out, 2, 3, names="envbuild-probe")
    assert "hash" in out.err, out.err
    assert (image / "envbuild.lock").read_bytes() == before


def test_no_package_is_ever_locked_without_a_hash(tmp_path: Path) -> None:
    """Whatever uv answers, a lock that `lock --check` calls fresh renders: a package with no
    hash never gets into the lock."""
    image = _image_with(tmp_path, "envbuild-probe==1.0")
    extra = '[[packages]]\nname = "envbuild-probe"\nversion = "1.0"\nwheels = []\n'
    out = run("lock", "--offline", str(image), env=fake_uv(tmp_path / "uv", extra=extra))
    assert out.code != 0, out.text
    assert "envbuild-probe" in out.err and "hash" in out.err, out.err

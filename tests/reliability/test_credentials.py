"""Index credentials (`https://user:token@host/simple`) at parse, lock, uv's command line and
every output: the request's URLs lose their userinfo when read, with a warning that says how
uv and pip take credentials instead (netrc, a keyring, uv's UV_INDEX_<NAME>_USERNAME/_PASSWORD);
the token is never written to the lock, never put on uv's argv, and never printed, whether in a
warning, an error, a `--json` field, or uv's own failure output relayed by envbuild.

The way credentials do reach uv is left open: the environment uv is started with keeps NETRC
and uv's keyring and per-index credential variables.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.helpers import copy_example, reseal, run
from tests.reliability.hostile import fake_uv, uv_calls

TOKEN = "s3cr3tTOKEN"
USERINFO = f"alice:{TOKEN}"

PLACES = {
    "index_url": f'index_url = "https://{USERINFO}@pypi.org/simple"',
    "extra_index_urls": f'extra_index_urls = ["https://{USERINFO}@pypi.example.org/simple"]',
    "find_links": f'find_links = ["https://{USERINFO}@wheels.example.org/torch/"]',
    "user only": 'index_url = "https://__token__@pypi.org/simple"',
}


def _image_with(tmp_path: Path, line: str) -> Path:
    image = copy_example(tmp_path, "torch-train")
    request = image / "envbuild.toml"
    request.write_text(request.read_text() + f"\n[indexes]\n{line}\n")
    return image


@pytest.mark.parametrize("place", sorted(PLACES))
def test_credentials_are_stripped_at_parse_and_never_written(tmp_path: Path, place: str) -> None:
    image = _image_with(tmp_path, PLACES[place])
    secret = "__token__" if place == "user only" else TOKEN
    env = {**fake_uv(tmp_path / "uv"), "UV_INDEX_INTERNAL_PASSWORD": "from-env"}
    out = run("lock", "--offline", str(image), env=env)
    assert out.code == 0, out.text
    assert secret not in out.text
    assert "credentials" in out.err and "netrc" in out.err, out.err
    assert secret not in (image / "envbuild.lock").read_text()
    (call,) = uv_calls(tmp_path / "uv")
    assert not any(secret in arg for arg in call["argv"]), call["argv"]
    # How uv takes credentials instead is left to it.
    assert call["env"].get("UV_INDEX_INTERNAL_PASSWORD") == "from-env"

    for args in (("lock", "--check", str(image)), ("render", str(image))):
        again = run(*args)
        assert again.code == 0, again.text
        assert secret not in again.text

    as_json = run("lock", "--offline", "--json", str(image), env=env)
    assert as_json.code == 0, as_json.text
    assert secret not in as_json.text
    json.loads(as_json.out)


def test_netrc_and_keyring_settings_reach_uv(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-train")
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    env = {
        **fake_uv(tmp_path / "uv"),
        "NETRC": str(tmp_path / "netrc"),
        "UV_KEYRING_PROVIDER": "subprocess",
        "UV_INDEX_CORP_USERNAME": "bob",
        "UV_INDEX_URL": "https://leaky.example.org/simple",  # still not taken from the machine
    }
    assert run("lock", "--offline", str(image), env=env).code == 0
    (call,) = uv_calls(tmp_path / "uv")
    for key in ("NETRC", "UV_KEYRING_PROVIDER", "UV_INDEX_CORP_USERNAME"):
        assert call["env"].get(key) == env[key], key
    assert "UV_INDEX_URL" not in call["env"]


def test_a_lock_carrying_credentials_is_not_echoed(tmp_path: Path) -> None:
    """An old or forged lock with a token in its indexes: render refuses it without printing
    the token, in text and in JSON."""
    image = copy_example(tmp_path, "torch-train")
    lock = image / "envbuild.lock"
    text = lock.read_text()
    assert "[indexes]\n" in text
    text = text.replace(
        "[indexes]\n", f'[indexes]\nindex_url = "https://{USERINFO}@pypi.org/simple"\n', 1
    )
    lock.write_text(reseal(text))
    for args in (("render", str(image)), ("render", str(image), "--json")):
        out = run(*args)
        assert out.code == 2, out.text
        assert TOKEN not in out.text, out.text
        assert "***" in out.text or "credentials" in out.text, out.text


def test_uv_failure_output_is_redacted(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-train")
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    stderr = (
        "error: Failed to fetch: `https://alice:s3cr3tTOKEN@pypi.example.org/simple/torch/`\n"
        "  Caused by: HTTP status client error (401 Unauthorized) for url "
        "(https://alice:s3cr3tTOKEN@pypi.example.org/simple/torch/)\n"
    )
    env = fake_uv(tmp_path / "uv", fail=stderr)
    for extra in ((), ("--json",)):
        out = run("lock", "--offline", *extra, str(image), env=env)
        assert out.code == 3, out.text
        assert TOKEN not in out.text, out.text
        assert "pypi.example.org" in out.text  # the rest of the message stays useful


def test_credentials_in_a_render_option_are_not_echoed(tmp_path: Path) -> None:
    out = run(
        "render",
        str(copy_example(tmp_path, "torch-cpu")),
        "--index-url",
        f"https://{USERINFO}@mirror.example.org/simple",
    )
    assert out.code == 2, out.text
    assert TOKEN not in out.text, out.text
    out = run(
        "render",
        str(copy_example(tmp_path, "torch-cpu")),
        "--index-url",
        f"https://{USERINFO}@mirror.example.org/simple",
        "--json",
    )
    assert out.code == 2, out.text
    assert TOKEN not in out.text, out.text

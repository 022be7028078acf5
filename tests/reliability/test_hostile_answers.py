"""Hostile or broken answers from a registry and from PyPI. A registry's `Docker-Content-Digest`
is only locked (`pinned = true`) when it is the sha256 of the manifest bytes the registry
served; a token endpoint of the wrong shape, or a manifest of absurd size, leaves the digest
unpinned with a warning, never exit 70. `matrix refresh` checks an index answer before it
caches it, so a bad answer is not served again from the cache once the index recovers.

Every HTTP answer is replaced at requests' transport (`HTTPAdapter.send`), so whatever client
code sits above it runs for real.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
import urllib3
from requests.adapters import HTTPAdapter

import envbuild.engine.registry
from tests.reliability.helpers import assert_clear_error, copy_example, run
from tests.reliability.hostile import fake_uv

Handler = Callable[[requests.PreparedRequest], requests.Response]

MANIFEST = json.dumps(
    {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}
).encode()
TRUE_DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
FORGED = "sha256:" + "e" * 64


def _answer(
    req: requests.PreparedRequest, status: int = 200, body: bytes = b"", **headers: str
) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    data = b"" if req.method == "HEAD" else body
    resp._content = data
    # What a streamed answer reads (envbuild.core.httpbody): urllib3's own response object.
    resp.raw = urllib3.HTTPResponse(body=io.BytesIO(data), preload_content=False, status=status)
    resp.headers.update({k.replace("_", "-"): v for k, v in headers.items()})
    resp.url = req.url or ""
    resp.request = req
    return resp


def _serve(monkeypatch: pytest.MonkeyPatch, handler: Handler) -> list[str]:
    seen: list[str] = []

    def send(
        self: HTTPAdapter, req: requests.PreparedRequest, **kwargs: object
    ) -> requests.Response:
        seen.append(f"{req.method} {req.url}")
        return handler(req)

    monkeypatch.setattr(HTTPAdapter, "send", send)
    # The stand-in answers for the registry's host, so that host is one that resolves
    # (envbuild.engine.registry.host_unknown: no DNS here).
    monkeypatch.setattr(envbuild.engine.registry, "host_unknown", lambda registry: False)
    return seen


def _registry(digest: str | None, body: bytes = MANIFEST, token: object = None) -> Handler:
    """A registry whose manifest answers carry DIGEST (None: no header) over BODY; with TOKEN,
    it first asks for a bearer token and its token endpoint answers TOKEN as JSON."""

    def handler(req: requests.PreparedRequest) -> requests.Response:
        url = req.url or ""
        if "/token" in url:
            return _answer(req, 200, json.dumps(token).encode(), Content_Type="application/json")
        if token is not None and "Authorization" not in req.headers:
            return _answer(
                req,
                401,
                WWW_Authenticate='Bearer realm="https://auth.example.org/token",service="r"',
            )
        headers = {"Content_Type": "application/vnd.oci.image.index.v1+json"}
        if digest is not None:
            headers["Docker_Content_Digest"] = digest
        return _answer(req, 200, body, **headers)

    return handler


def _relock(tmp_path: Path) -> tuple[Path, str, str]:
    """`envbuild lock` (registry asked) on a copy of torch-train whose request changed."""
    image = copy_example(tmp_path, "torch-train")
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    out = run("lock", str(image), env=fake_uv(tmp_path / "uv"))
    assert out.code == 0, out.text
    return image, (image / "envbuild.lock").read_text(), out.err


def _base_image_table(lock_text: str) -> str:
    return lock_text[lock_text.index("[base_image]") :].split("\n\n", 1)[0]


def test_a_verified_digest_is_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, _registry(TRUE_DIGEST, token={"token": "anonymous"}))
    _, text, _ = _relock(tmp_path)
    table = _base_image_table(text)
    assert f'digest = "{TRUE_DIGEST}"' in table and "pinned = true" in table, table


HOSTILE = {
    "digest that is not the manifest's": _registry(FORGED),
    "digest of another manifest": _registry(TRUE_DIGEST, body=MANIFEST + b" "),
    "not a sha256 digest": _registry("md5:abc"),
    "token endpoint answers a list": _registry(TRUE_DIGEST, token=[1, 2]),
    "token endpoint answers a number": _registry(TRUE_DIGEST, token=7),
    "token is not a string": _registry(TRUE_DIGEST, token={"token": {"a": 1}}),
    "manifest of absurd size": _registry(None, body=b" " * (9 << 20)),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_registry_answer_that_does_not_verify_is_not_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Never pinned: the lock goes on unpinned with a warning, or (a manifest that does not
    hash to the digest the registry claims: something altered it on the way) stops with a
    clear error and leaves the old lock."""
    _serve(monkeypatch, HOSTILE[case])
    image = copy_example(tmp_path, "torch-train")
    before = (image / "envbuild.lock").read_bytes()
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    out = run("lock", str(image), env=fake_uv(tmp_path / "uv"))
    text = (image / "envbuild.lock").read_text()
    assert FORGED not in text
    if out.code == 0:
        table = _base_image_table(text)
        assert "pinned = false" in table and "digest =" not in table, table
        assert "registry" in out.err, out.err
    else:
        assert_clear_error(out, 3, 8, names="digest")
        assert (image / "envbuild.lock").read_bytes() == before


# --- PyPI answers for `matrix refresh` -------------------------------------------------------

GOOD_PROJECT = json.dumps(
    {"name": "torch", "files": [], "meta": {"api-version": "1.1"}, "versions": []}
).encode()


@pytest.mark.parametrize(
    "bad",
    [b"<html>maintenance</html>", b'{"name": "torch"}', b"[]", b'{"files": "none"}'],
    ids=["html", "no files", "a list", "files not a list"],
)
def test_a_bad_index_answer_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: bytes
) -> None:
    from envbuild.core.errors import SourceUnreachableError
    from envbuild.matrix.refresh import pypi

    answers = [bad, GOOD_PROJECT]

    def handler(req: requests.PreparedRequest) -> requests.Response:
        body = answers.pop(0) if len(answers) > 1 else answers[0]
        return _answer(req, 200, body, Content_Type=pypi.PEP691_JSON)

    _serve(monkeypatch, handler)
    fetcher = pypi.Fetcher(cache_dir=tmp_path / "cache")
    with pytest.raises(SourceUnreachableError):
        pypi.simple_project(fetcher, "torch")
    # PyPI answers properly again: the bad answer must not come back from the cache.
    assert pypi.simple_project(fetcher, "torch")["name"] == "torch"


def test_metadata_with_the_wrong_hash_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envbuild.core.errors import SourceUnreachableError
    from envbuild.matrix.refresh import IndexFile, pypi

    good = b"Metadata-Version: 2.1\nName: torch\nVersion: 2.10.0\n"
    answers = [b"Name: evil\n", good]

    def handler(req: requests.PreparedRequest) -> requests.Response:
        return _answer(req, 200, answers.pop(0) if len(answers) > 1 else answers[0])

    _serve(monkeypatch, handler)
    fetcher = pypi.Fetcher(cache_dir=tmp_path / "cache")
    file = IndexFile(
        filename="torch-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        url="https://files.example.org/torch-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        core_metadata={"sha256": hashlib.sha256(good).hexdigest()},
    )
    with pytest.raises(SourceUnreachableError):
        pypi.wheel_metadata(fetcher, file)
    assert "Name: torch" in pypi.wheel_metadata(fetcher, file)

"""envbuild.engine.registry: the lock rule for base digests (the lookup is a stand-in) and when no
registry is asked (a name look-up of a `.invalid` host at most; no HTTP)."""

from __future__ import annotations

import os

import pytest

from envbuild.engine import registry
from envbuild.engine.registry import lock_digest


def test_lock_digest_keeps_the_previous_one_else_asks_unless_offline() -> None:
    """One rule for both lock paths (envbuild.app.lock and envbuild.app.lock_base)."""
    asked: list[str] = []

    def lookup(ref: str) -> str | None:
        asked.append(ref)
        return "sha256:" + "a" * 64

    kept = "sha256:" + "b" * 64
    assert lock_digest("x:1", "x:1", kept, offline=False, lookup=lookup) == kept
    assert lock_digest("x:1", "x:1", kept, offline=True, lookup=lookup) == kept
    assert asked == []  # a re-lock of the same ref does not move the base
    assert lock_digest("x:2", "x:1", kept, offline=True, lookup=lookup) is None
    assert lock_digest("x:1", "x:1", None, offline=True, lookup=lookup) is None
    assert asked == []  # --offline asks no registry
    assert lock_digest("x:2", "x:1", kept, offline=False, lookup=lookup) == "sha256:" + "a" * 64
    assert asked == ["x:2"]


# `.invalid` never resolves (RFC 2606, https://www.rfc-editor.org/rfc/rfc2606#section-2).
def test_a_registry_whose_host_does_not_resolve_is_not_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_http(retries: int) -> None:
        raise AssertionError("the HTTP session was made for a host that does not resolve")

    monkeypatch.setattr(registry, "retrying_session", no_http)
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    assert registry.host_unknown("registry.invalid")
    assert registry.registry_digest("registry.invalid/team/base:1") is None


def test_through_a_proxy_or_on_this_machine_the_request_decides() -> None:
    """A proxy may reach a host this machine cannot resolve (requests honours it)."""
    assert not registry.host_unknown("registry.invalid", {"HTTPS_PROXY": "http://proxy:3128"})
    assert not registry.host_unknown("registry.invalid", {"Https_Proxy": "http://proxy:3128"})
    assert registry.host_unknown("registry.invalid", {"NO_PROXY": "*"})
    assert not registry.host_unknown("localhost:5000", {})
    assert not registry.host_unknown("127.0.0.1:5000", {})
    assert not registry.host_unknown("[::1]:5000", {})

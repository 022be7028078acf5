"""envbuild.registry's lock rule for base digests (no network: the lookup is a stand-in)."""

from __future__ import annotations

from envbuild.registry import lock_digest


def test_lock_digest_keeps_the_previous_one_else_asks_unless_offline() -> None:
    """One rule for both lock paths (envbuild.app.lock and envbuild.app.base_lock)."""
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

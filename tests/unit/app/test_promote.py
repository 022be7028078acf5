"""promote's gate on a smoke attestation and the references it takes (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.app import evidence
from envbuild.app.promote import digests_of, target_of, why_refused
from envbuild.core.errors import UserError
from envbuild.engine import oci
from envbuild.engine.oci_registry import Referrer
from tests.signing import forged, key_pair, smoke_envelope

DIGEST = "sha256:" + "a" * 64


def test_promote_takes_a_tag_and_digests_of_its_own_repository() -> None:
    assert target_of("127.0.0.1:5000/team/torch:1") == ("127.0.0.1:5000", "team/torch", "1")
    with pytest.raises(UserError):
        target_of("127.0.0.1:5000/team/torch")
    name = "127.0.0.1:5000/team/torch"
    assert digests_of([DIGEST, f"{name}@sha256:{'b' * 64}"], f"{name}:1") == [
        DIGEST,
        "sha256:" + "b" * 64,
    ]
    for bad in ([DIGEST, DIGEST], [f"other/repo@{DIGEST}"], ["sha256:abc"], []):
        with pytest.raises(UserError):
            digests_of(bad, f"{name}:1")


def test_only_a_signed_pass_about_the_digest_opens_the_gate(tmp_path: Path) -> None:
    private, public = key_pair(tmp_path)
    other_private, _other_public = key_pair(tmp_path, "other")
    keys = evidence.public_keys([public])
    other = "sha256:" + "c" * 64

    def found(*envelopes: bytes) -> list[Referrer]:
        descriptor = oci.Descriptor(oci.OCI_MANIFEST, other, 1)
        return [Referrer(descriptor, "tag", tuple(oci.Document(oci.DSSE, e) for e in envelopes))]

    mine = smoke_envelope(DIGEST, "passed", private)
    assert why_refused(found(mine), DIGEST, keys) is None
    assert why_refused(found(), DIGEST, keys) == "no smoke attestation is attached"
    failed = why_refused(found(smoke_envelope(DIGEST, "failed", private)), DIGEST, keys)
    assert failed == "its signed smoke attestations do not say passed"
    theirs = why_refused(found(smoke_envelope(other, "passed", private)), DIGEST, keys)
    assert theirs is not None and "is about " + other in theirs
    foreign = why_refused(found(smoke_envelope(DIGEST, "passed", other_private)), DIGEST, keys)
    assert foreign is not None and "not by any key given" in foreign
    flipped = forged(
        smoke_envelope(DIGEST, "failed", private),
        lambda s: s["predicate"].update(verdict="passed"),
    )
    why = why_refused(found(flipped), DIGEST, keys)
    assert why is not None and "changed after it was signed" in why
    # A forged one beside a genuine pass does not hide the pass.
    assert why_refused(found(flipped, mine), DIGEST, keys) is None

"""promote's gate on a smoke attestation and the references it takes (pure)."""

from __future__ import annotations

import base64
import json

import pytest

from envbuild.app.promote import digests_of, passed, target_of, why_refused
from envbuild.core.errors import UserError
from envbuild.engine import oci
from envbuild.engine.oci_registry import Referrer

DIGEST = "sha256:" + "a" * 64


def _envelope(statement: object, payload_type: str = "application/vnd.in-toto+json") -> bytes:
    payload = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps({"payloadType": payload_type, "payload": payload, "signatures": []}).encode()


SMOKE = {
    "_type": "https://in-toto.io/Statement/v1",
    "predicateType": "https://envbuild.dev/smoke/v1",
}


@pytest.mark.parametrize(
    ("envelope", "expected"),
    [
        (_envelope({**SMOKE, "predicate": {"verdict": "passed"}}), True),
        (_envelope({**SMOKE, "predicate": {"verdict": "failed"}}), False),
        (_envelope({**SMOKE, "predicate": {"verdict": "passed"}}, "text/plain"), False),
        (
            _envelope(
                {
                    **SMOKE,
                    "predicateType": "https://slsa.dev/provenance/v1",
                    "predicate": {"verdict": "passed"},
                }
            ),
            False,
        ),
        (_envelope({**SMOKE, "predicate": "passed"}), False),
        (_envelope(["not", "a", "statement"]), False),
        (b'{"payloadType": "application/vnd.in-toto+json", "payload": "***"}', False),
        (b"\xff\xfe not json", False),
    ],
)
def test_passed_reads_the_verdict_of_an_envbuild_smoke_statement_only(
    envelope: bytes, expected: bool
) -> None:
    assert passed(envelope) is expected


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


def test_an_attestation_counts_only_for_the_image_it_names() -> None:
    other = "sha256:" + "c" * 64
    statement = {**SMOKE, "predicate": {"verdict": "passed"}}
    mine = _envelope({**statement, "subject": [{"name": "x", "digest": {"sha256": "a" * 64}}]})
    theirs = _envelope({**statement, "subject": [{"name": "x", "digest": {"sha256": "c" * 64}}]})

    def found(*envelopes: bytes) -> list[Referrer]:
        descriptor = oci.Descriptor(oci.OCI_MANIFEST, other, 1)
        return [Referrer(descriptor, "tag", tuple(oci.Document(oci.DSSE, e) for e in envelopes))]

    assert why_refused(found(mine), DIGEST) is None
    assert why_refused(found(theirs), DIGEST) == "its smoke attestations are about another image"
    assert why_refused(found(theirs, mine), DIGEST) is None
    assert why_refused(found(), DIGEST) == "no smoke attestation is attached"

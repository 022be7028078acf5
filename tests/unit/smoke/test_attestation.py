"""The signed smoke attestation: an in-toto Statement v1 in a DSSE envelope, signed and checked
with securesystemslib; every way it can fail is its own error and exit code."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from envbuild.core.errors import (
    DigestMismatchError,
    LockMismatchError,
    TamperedError,
    UserError,
    WrongKeyError,
)
from envbuild.smoke import attestation as att

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
REPORT = {
    "ok": True,
    "device": "cuda",
    "checks": [{"name": "train-step", "status": "pass", "figure": "30 steps", "tier": 2}],
    "host": {
        "driver": "580.159.04",
        "cuda_driver": "13.0",
        "gpus": [{"index": 0, "name": "NVIDIA H200", "cc": "9.0", "memory_mib": 143771}],
    },
}


def _pem_pair(kind: str) -> tuple[bytes, bytes]:
    key: Any = (
        ec.generate_private_key(ec.SECP256R1())
        if kind == "ecdsa"
        else ed25519.Ed25519PrivateKey.generate()
    )
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def _statement(lock: str = "L" * 64) -> dict[str, Any]:
    host = att.host_fingerprint(REPORT, gpu_attach="cdi", engine="docker")
    pred = att.predicate(
        REPORT,
        host=host,
        lock_sha256=lock,
        lock_name="torch-slim",
        envbuild_version="0.1.0",
        finished="2026-12-02T16:00:00Z",
    )
    return att.statement([att.Subject("reg/torch", DIGEST)], pred)


@pytest.mark.parametrize("kind", ["ecdsa", "ed25519"])
def test_a_signed_statement_opens_with_its_public_key(kind: str) -> None:
    private, public = _pem_pair(kind)
    envelope = att.sign(_statement(), att.load_signer(private))
    stmt = att.open_envelope(envelope, [att.load_public_key(public)], where="e")
    assert stmt == _statement()
    att.check_statement(stmt, where="e", digest=DIGEST, lock_sha256="L" * 64)


def test_the_statement_has_the_in_toto_v1_shape() -> None:
    # in-toto/attestation spec/v1/statement.md: exactly these four fields; a subject is a
    # name and a digest set keyed by algorithm.
    stmt = _statement()
    assert set(stmt) == {"_type", "subject", "predicateType", "predicate"}
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["subject"] == [{"name": "reg/torch", "digest": {"sha256": "ab" * 32}}]
    host = stmt["predicate"]["host"]
    assert host["gpus"] == [{"product": "NVIDIA H200", "cc": "9.0"}]
    assert (host["driver"], host["driver_branch"], host["cuda_driver"]) == (
        "580.159.04",
        "580",
        "13.0",
    )
    assert (host["gpu_attach"], host["engine"]) == ("cdi", "docker")
    assert stmt["predicate"]["verdict"] == "passed"


def test_the_envelope_signs_the_dsse_pre_authentication_encoding() -> None:
    # DSSE protocol.md: PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body;
    # its own example: PAE("http://example.com/HelloWorld", "hello world").
    from securesystemslib.dsse import Envelope

    example = Envelope(
        payload=b"hello world", payload_type="http://example.com/HelloWorld", signatures={}
    )
    assert example.pae() == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    private, _public = _pem_pair("ecdsa")
    doc = json.loads(att.sign(_statement(), att.load_signer(private)))
    assert doc["payloadType"] == "application/vnd.in-toto+json"
    assert json.loads(base64.b64decode(doc["payload"])) == _statement()
    assert len(doc["signatures"]) == 1 and doc["signatures"][0]["keyid"]


def test_another_key_is_a_wrong_key_error() -> None:
    private, _public = _pem_pair("ecdsa")
    _other_private, other_public = _pem_pair("ecdsa")
    envelope = att.sign(_statement(), att.load_signer(private))
    with pytest.raises(WrongKeyError) as info:
        att.open_envelope(envelope, [att.load_public_key(other_public)], where="e")
    assert info.value.exit_code == 21


def _tamper(envelope: bytes, change: Any) -> bytes:
    doc = json.loads(envelope)
    stmt = json.loads(base64.b64decode(doc["payload"]))
    change(stmt)
    doc["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    return json.dumps(doc).encode()


def test_a_changed_predicate_is_tampered() -> None:
    private, public = _pem_pair("ed25519")
    envelope = att.sign(_statement(), att.load_signer(private))
    forged = _tamper(envelope, lambda s: s["predicate"]["host"]["gpus"].append({"product": "B200"}))
    with pytest.raises(TamperedError) as info:
        att.open_envelope(forged, [att.load_public_key(public)], where="e")
    assert info.value.exit_code == 22


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"payloadType": "text/plain", "payload": "", "signatures": []}',
        b'{"payloadType": "application/vnd.in-toto+json", "payload": "e30=", "signatures": []}',
    ],
)
def test_what_is_not_a_signed_envelope_is_tampered(data: bytes) -> None:
    _private, public = _pem_pair("ecdsa")
    with pytest.raises(TamperedError):
        att.open_envelope(data, [att.load_public_key(public)], where="e")


def test_a_genuine_statement_about_another_digest_or_lock_is_refused() -> None:
    stmt = _statement()
    with pytest.raises(DigestMismatchError) as digest:
        att.check_statement(stmt, where="e", digest=OTHER)
    assert digest.value.exit_code == 23
    with pytest.raises(LockMismatchError) as lock:
        att.check_statement(stmt, where="e", lock_sha256="M" * 64)
    assert lock.value.exit_code == 24


def test_keys_in_the_wrong_place_are_user_errors() -> None:
    private, public = _pem_pair("ecdsa")
    with pytest.raises(UserError, match="private key"):
        att.load_public_key(private)
    with pytest.raises(UserError):
        att.load_signer(public)
    key = ec.generate_private_key(ec.SECP256R1())
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    with pytest.raises(UserError) as info:
        att.load_signer(encrypted)
    assert "ENVBUILD_SIGNING_KEY_PASSWORD" in info.value.hint
    assert att.load_signer(encrypted, password=b"secret") is not None


def test_proven_on_lists_each_gpu_class_and_driver_branch_once() -> None:
    a = _statement()
    b = json.loads(json.dumps(a))
    b["predicate"]["host"]["gpus"] = [{"product": "NVIDIA L4", "cc": "8.9"}]
    b["predicate"]["host"]["driver_branch"] = "570"
    failed = json.loads(json.dumps(a))
    failed["predicate"]["verdict"] = "failed"
    failed["predicate"]["host"]["gpus"] = [{"product": "NVIDIA A100", "cc": "8.0"}]
    assert att.proven_on([a, b, a, failed]) == [
        {"product": "NVIDIA H200", "cc": "9.0", "driver_branch": "580"},
        {"product": "NVIDIA L4", "cc": "8.9", "driver_branch": "570"},
    ]

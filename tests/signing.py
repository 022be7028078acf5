"""Keys and signed smoke attestations for tests (envbuild's own signing code, real keys)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from envbuild.smoke import attestation as att


def key_pair(folder: Path, name: str = "envbuild") -> tuple[Path, Path]:
    """A fresh ECDSA P-256 key pair as PEM files (what `openssl genpkey` makes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def smoke_envelope(digest: str, verdict: str, private: Path, name: str = "img") -> bytes:
    """A smoke attestation about `digest` saying `verdict`, signed with `private`."""
    stmt = att.statement(
        [att.Subject(name, digest)], {"verdict": verdict, "host": {}, "lock": {"sha256": ""}}
    )
    return att.sign(stmt, att.load_signer(private.read_bytes()))


def forged(envelope: bytes, change: Any) -> bytes:
    """`envelope` with its Statement changed by `change(stmt)` after signing."""
    doc = json.loads(envelope)
    stmt = json.loads(base64.b64decode(doc["payload"]))
    change(stmt)
    doc["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    return json.dumps(doc).encode()

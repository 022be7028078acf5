"""The signed smoke attestation: what a pass proved, on which GPU and driver, for which lock,
as an in-toto Statement (github.com/in-toto/attestation, spec/v1/statement.md) in a DSSE
envelope (github.com/secure-systems-lab/dsse, envelope.md) signed with a key the user holds.

The envelope, its pre-authentication encoding and the signatures are securesystemslib's
(`securesystemslib.dsse.Envelope`, `CryptoSigner`, `SSlibKey`); keys are PEM files as OpenSSL
and cosign write them (ECDSA P-256, Ed25519 or RSA; docs/evidence.md says how to make and
rotate them). This module is pure: bytes in, bytes or typed errors out; the use cases
(`envbuild.app.evidence`) read and write the files.

Verification tells its failures apart, each its own exit code: no key given verifies a
signature whose key id names none of them (WrongKeyError, 21); a signature by one of the keys
that does not verify, or an envelope that is not an in-toto Statement of ours (TamperedError,
22); a genuine attestation about another image digest (DigestMismatchError, 23) or another
lock (LockMismatchError, 24).
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envbuild.core.errors import (
    DigestMismatchError,
    LockMismatchError,
    TamperedError,
    UserError,
    WrongKeyError,
)

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
"""DSSE payloadType of an in-toto Statement (in-toto attestation spec, envelope.md)."""
PREDICATE_TYPE = "https://envbuild.dev/smoke/v1"
"""The smoke verdict's predicate type (docs/evidence.md documents its fields)."""
MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
"""The envelope's media type, as cosign and the OCI referrers of attestations use it."""


@dataclass(frozen=True)
class Subject:
    """One artifact an attestation is about: a name and its sha256 digest ("sha256:<hex>")."""

    name: str
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "digest": {"sha256": _hex(self.digest)}}


def _hex(digest: str) -> str:
    alg, _, value = digest.partition(":")
    if alg != "sha256" or len(value) != 64:
        raise UserError(f"{digest!r} is not a sha256 digest", hint="expected sha256:<64 hex>")
    return value


def host_fingerprint(report: Mapping[str, Any], *, gpu_attach: str, engine: str) -> dict[str, Any]:
    """What the smoke pass ran on, from the payload's own reading of NVML (`report["host"]`):
    each GPU's product and compute capability, the driver, its CUDA version, how the GPU was
    attached and by which engine."""
    host = report.get("host") if isinstance(report.get("host"), Mapping) else {}
    assert isinstance(host, Mapping)
    gpus = []
    for gpu in host.get("gpus") or ():
        if isinstance(gpu, Mapping):
            gpus.append({"product": str(gpu.get("name") or "?"), "cc": str(gpu.get("cc") or "?")})
    driver = str(host.get("driver") or "")
    return {
        "gpus": gpus,
        "driver": driver,
        "driver_branch": driver.split(".", 1)[0] if driver else "",
        "cuda_driver": str(host.get("cuda_driver") or ""),
        "gpu_attach": gpu_attach,
        "engine": engine,
        "device": str(report.get("device") or ""),
    }


def predicate(
    report: Mapping[str, Any],
    *,
    host: Mapping[str, Any],
    lock_sha256: str,
    lock_name: str,
    envbuild_version: str,
    finished: str,
) -> dict[str, Any]:
    """The smoke predicate: the verdict and its checks, the host, the lock, who wrote it."""
    checks = [
        {k: c.get(k) for k in ("name", "status", "figure", "tier")}
        for c in report.get("checks") or ()
        if isinstance(c, Mapping)
    ]
    return {
        "verdict": "passed" if report.get("ok") else "failed",
        "checks": checks,
        "host": dict(host),
        "lock": {"name": lock_name, "sha256": lock_sha256},
        "envbuild": {"version": envbuild_version},
        "finished": finished,
    }


def statement(
    subjects: Sequence[Subject], pred: Mapping[str, Any], *, predicate_type: str = PREDICATE_TYPE
) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [s.to_json() for s in subjects],
        "predicateType": predicate_type,
        "predicate": dict(pred),
    }


# --- keys and the envelope -------------------------------------------------------------------


def load_signer(pem: bytes, *, password: bytes | None = None, what: str = "--sign-key") -> Any:
    """A securesystemslib signer of a PEM private key (PKCS#8 or the key type's own PEM)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner  # type: ignore[attr-defined]

    try:
        key = load_pem_private_key(pem, password=password)
        return CryptoSigner(key)
    except TypeError as exc:  # encrypted without a password, or a password for a plain key
        raise UserError(
            f"{what}: {exc}",
            hint="set ENVBUILD_SIGNING_KEY_PASSWORD to the key's passphrase",
        ) from None
    except ValueError as exc:
        raise UserError(
            f"{what} is not a PEM private key envbuild can sign with ({exc})",
            hint="make one: openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 "
            "-out envbuild.key (docs/evidence.md)",
        ) from None


def load_public_key(pem: bytes, *, what: str = "--key") -> Any:
    """An SSlibKey of a PEM public key (SubjectPublicKeyInfo, as `openssl pkey -pubout`)."""
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]

    if b"PRIVATE KEY" in pem:
        raise UserError(
            f"{what} is a private key; verify with the public one",
            hint="openssl pkey -in envbuild.key -pubout -out envbuild.pub",
        )
    try:
        return SSlibKey.from_crypto(load_pem_public_key(pem))
    except (ValueError, TypeError) as exc:
        raise UserError(
            f"{what} is not a PEM public key ({exc})",
            hint="openssl pkey -in envbuild.key -pubout -out envbuild.pub",
        ) from None


def sign(doc: Mapping[str, Any], signer: Any) -> bytes:
    """The DSSE envelope (compact JSON, one line) of `doc` signed by `signer`."""
    from securesystemslib.dsse import Envelope

    payload = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    return json.dumps(envelope.to_dict(), sort_keys=True, separators=(",", ":")).encode()


def open_envelope(data: bytes, keys: Sequence[Any], *, where: str) -> dict[str, Any]:
    """The Statement inside a DSSE envelope whose signature one of `keys` verifies."""
    envelope = _parse_envelope(data, where)
    pae = envelope.pae()
    signed_by = [s.keyid for s in envelope.signatures.values()]
    known = {str(k.keyid) for k in keys}
    for sig in envelope.signatures.values():
        for key in keys:
            # DSSE says key ids are hints: an empty one (cosign writes "") is tried on every
            # key; a named one only on its own key.
            if sig.keyid and sig.keyid != key.keyid:
                continue
            try:
                key.verify_signature(sig, pae)
            except Exception:  # securesystemslib's VerificationError, or a key of another type
                continue
            return _statement_of(envelope.payload, where)
    if any(k in known for k in signed_by):
        raise TamperedError(
            f"{where}: the signature does not match the attestation's content: it was changed "
            "after it was signed",
            hint="do not trust this image's evidence; rebuild it with `envbuild image`",
            fields={"keyids": signed_by},
        )
    raise WrongKeyError(
        f"{where} is signed by key {', '.join(k or '(unnamed)' for k in signed_by) or 'none'}, "
        "not by any key given",
        hint="pass the public key the image was signed with (--key), or every current one "
        "during a key rotation",
        fields={"keyids": signed_by, "given": sorted(known)},
    )


def _parse_envelope(data: bytes, where: str) -> Any:
    from securesystemslib.dsse import Envelope

    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("payloadType") != PAYLOAD_TYPE:
            raise ValueError("not an in-toto DSSE envelope")
        envelope = Envelope.from_dict(doc)
    except (ValueError, KeyError, TypeError, binascii.Error, RecursionError) as exc:
        raise TamperedError(
            f"{where} is not a DSSE envelope of an in-toto Statement ({exc})",
            hint="the file was changed or is not an envbuild attestation",
        ) from None
    if not envelope.signatures:
        raise TamperedError(f"{where} has no signature", hint="sign it: envbuild image --sign-key")
    return envelope


def _statement_of(payload: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError):
        doc = None
    if not (
        isinstance(doc, dict)
        and doc.get("_type") == STATEMENT_TYPE
        and isinstance(doc.get("subject"), list)
        and isinstance(doc.get("predicate"), dict)
    ):
        raise TamperedError(f"{where}: the signed payload is not an in-toto Statement")
    return doc


# --- what a genuine statement says --------------------------------------------------------


def subject_digests(stmt: Mapping[str, Any]) -> list[str]:
    out = []
    for s in stmt.get("subject") or ():
        digest = s.get("digest") if isinstance(s, Mapping) else None
        if isinstance(digest, Mapping) and isinstance(digest.get("sha256"), str):
            out.append("sha256:" + digest["sha256"])
    return out


def check_statement(
    stmt: Mapping[str, Any],
    *,
    where: str,
    digest: str | None = None,
    lock_sha256: str | None = None,
) -> None:
    """Refuse a genuine statement about another image or another lock."""
    if digest is not None and digest not in subject_digests(stmt):
        raise DigestMismatchError(
            f"{where} is about {', '.join(subject_digests(stmt)) or 'no digest'}, not {digest}",
            hint="this evidence belongs to another image; find the attestation of this digest",
            fields={"subjects": subject_digests(stmt), "digest": digest},
        )
    if lock_sha256 is not None and stmt.get("predicateType") == PREDICATE_TYPE:
        got = (stmt["predicate"].get("lock") or {}).get("sha256")
        if got != lock_sha256:
            raise LockMismatchError(
                f"{where}: the image passed under lock sha256 {got}, not this lock's {lock_sha256}",
                hint="the lock changed since the image was proven: rebuild it with envbuild image",
                fields={"attested": got, "lock": lock_sha256},
            )


def proven_on(statements: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The GPU classes (product, compute capability) and driver branches of every passed
    smoke statement, sorted and without repeats."""
    seen: set[tuple[str, str, str]] = set()
    for stmt in statements:
        pred = stmt.get("predicate") or {}
        if stmt.get("predicateType") != PREDICATE_TYPE or pred.get("verdict") != "passed":
            continue
        host = pred.get("host") or {}
        branch = str(host.get("driver_branch") or "")
        gpus = host.get("gpus") or [{"product": "cpu", "cc": ""}]
        for gpu in gpus:
            seen.add((str(gpu.get("product")), str(gpu.get("cc")), branch))
    return [{"product": p, "cc": c, "driver_branch": b} for p, c, b in sorted(seen)]


def unproven(
    proven: Sequence[Mapping[str, str]], gpus: Iterable[tuple[str, str]], driver: str | None
) -> list[str]:
    """The GPU classes ("product (cc X)") of a host that no pass was proven on with the host
    driver's branch; [] when every one was: the host was proven before."""
    branch = (driver or "").split(".", 1)[0]
    have = {(p["product"], p["cc"], p["driver_branch"]) for p in proven}
    missing = []
    for product, cc in gpus:
        if (product, cc, branch) not in have:
            missing.append(f"{product} (cc {cc}, driver branch {branch or '?'})")
    return sorted(set(missing))

"""Typed errors: one root class, subclasses with fields and a next step.

The CLI maps every `EnvbuildError` to its `exit_code` in one place (`cli.py`); nothing else
prints or exits. Exit codes: 1 = a verdict that is "no" (nothing fits, stale lock, smoke
failed), 2 = bad input from the user, 3+ = the environment failed (engine, network, disk).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_MESSAGE = 16 * 1024
"""The longest message or hint an error carries: what it quotes is cut there (a 9 MB value
never becomes a 9 MB message; the value's own checks name it by start and length first)."""

# `scheme://user:secret@host`: the userinfo of a URL (RFC 3986 section 3.2.1) is a credential.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s'\"`<>]+@")


def redact(text: str) -> str:
    """TEXT with the userinfo of every URL replaced by `***`: no error, warning or JSON field
    prints an index credential (docs/reliability.md, "Secrets")."""
    return _USERINFO.sub(r"\1***@", text)


_LONG_QUOTED = re.compile(r"'[^']{120,}'")


def shorten(text: str) -> str:
    """A long quoted value ('...', 120 characters or more) named by its start and length, not
    echoed whole: a 100 kB value in a request stays a one-line message (tests/reliability)."""
    return _LONG_QUOTED.sub(
        lambda m: f"{m.group()[:60]}...' ({len(m.group()) - 2} characters)", text
    )


def _bounded(text: str) -> str:
    if len(text) <= MAX_MESSAGE:
        return text
    # Quoted values first (they keep the message readable), then the cut of what remains.
    text = shorten(text)
    if len(text) <= MAX_MESSAGE:
        return text
    return f"{text[: MAX_MESSAGE - 200]}... (cut: {len(text)} characters in all)"


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return _bounded(redact(value))
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redacted(v) for v in value)
    return value


def _class_exit_code(cls: type) -> int:
    """The nearest `exit_code` a class in `cls`'s MRO sets (1 at the root).

    The subclasses below are plain classes that set only `exit_code`: they inherit the root's
    generated `__init__`, `__repr__` and `__eq__` instead of generating their own, which is
    most of what importing this module used to cost (every command imports it)."""
    for klass in cls.__mro__:
        code = klass.__dict__.get("exit_code")
        if isinstance(code, int) and code >= 0:
            return code
    return 1


@dataclass
class EnvbuildError(Exception):
    """Root of every error envbuild raises on purpose."""

    message: str
    hint: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    exit_code: int = -1
    """-1 (the default): the class's own `exit_code` (`_class_exit_code`)."""

    def __post_init__(self) -> None:
        if self.exit_code < 0:
            self.exit_code = _class_exit_code(type(self))
        # Messages often quote a URL the user gave; a credential in it is never shown.
        self.message = _bounded(redact(self.message))
        self.hint = _bounded(redact(self.hint))
        self.fields = _redacted(self.fields)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": False,
            "error": type(self).__name__,
            "message": self.message,
        }
        if self.hint:
            out["hint"] = self.hint
        if self.fields:
            out["fields"] = self.fields
        return out


class UserError(EnvbuildError):
    """The user's input is wrong: a request, a flag, a file. Exit 2."""

    exit_code: int = 2


class RequestError(UserError):
    """An `envbuild.toml` request is malformed or impossible."""


class MatrixError(UserError):
    """A matrix file is malformed or contradicts another one (file and row in `fields`)."""


class LockError(UserError):
    """A lock file cannot be read (bad TOML, newer schema, edited by hand)."""


class StaleLockError(EnvbuildError):
    """The lock does not match its request or the matrix rows it used. Exit 1."""

    exit_code: int = 1


class UnsatisfiableError(EnvbuildError):
    """Nothing in the matrix fits the request and targets. Exit 1; `fields` has the reasons."""

    exit_code: int = 1


class NoGpuError(EnvbuildError):
    """No NVIDIA driver / GPU where one is needed (host probing). Exit 2: cannot probe."""

    exit_code: int = 2


class EnvironmentFailure(EnvbuildError):
    """Something outside envbuild failed: network, disk, a delegated tool. Exit 3."""

    exit_code: int = 3


class EngineError(EnvironmentFailure):
    """The container engine failed or is not running. Exit 4."""

    exit_code: int = 4


class BuildError(EnvironmentFailure):
    """A build step failed inside the engine. Exit 5."""

    exit_code: int = 5


class SmokeFailed(EnvbuildError):
    """The smoke payload ran and said no (or crashed or hung). Exit 6; no tag was written."""

    exit_code: int = 6


class DiskFullError(EnvironmentFailure):
    """The engine ran out of disk space ("no space left on device") while building. Exit 3."""

    exit_code: int = 3


class FileWriteError(EnvironmentFailure):
    """A file or folder cannot be written: read-only file system, no permission, a path in the
    way. Exit 3; `fields` has the path."""

    exit_code: int = 3


class GpuUnavailableError(EnvironmentFailure):
    """A GPU image must be smoke-tested on a GPU, but the engine cannot attach one (no driver,
    no NVIDIA Container Toolkit, no CDI spec). Exit 7; `--allow-cpu` runs the CPU path instead."""

    exit_code: int = 7


class RegistryError(EnvironmentFailure):
    """A registry refused or failed a push (auth, TLS, quota, unreachable; `fields.kind`).
    Exit 8: the image passed its smoke test and is tagged locally; only the push failed.
    Also a registry that refuses, or answers nonsense to, attaching or reading evidence and
    `promote` (`fields.kind` "invalid", "timeout", "missing", ...)."""

    exit_code: int = 8


class SourceUnreachableError(EnvironmentFailure):
    """A network source (PyPI, the PyTorch index, a registry) could not be read. Exit 3;
    `fields` has the url. `matrix refresh` reports and skips it while another source works."""

    exit_code: int = 3


class LockEditedError(StaleLockError):
    """The lock's body no longer matches its content hash (edited by hand). Exit 1: re-lock."""


class PinError(EnvironmentFailure):
    """The delegated Python resolver (uv, or pip as fallback) failed or is missing. Exit 3."""


class PromoteRefused(EnvbuildError):
    """`envbuild promote` refused: an image digest has no passing smoke attestation attached.
    Exit 9; `fields.refused` names each digest and why. Nothing was pushed."""

    exit_code: int = 9


class EvidenceError(EnvbuildError):
    """An image's evidence (its signed smoke attestation) does not prove what was asked. Exit 20
    for one that is missing; the subclasses below say which check failed."""

    exit_code: int = 20


class AttestationMissing(EvidenceError):
    """No smoke attestation where one was looked for (beside the archive, in the registry). 20."""


class WrongKeyError(EvidenceError):
    """The attestation is signed, but by none of the keys given. Exit 21."""

    exit_code: int = 21


class TamperedError(EvidenceError):
    """The attestation's signature does not match its payload, or it is not a DSSE envelope of
    an in-toto Statement: it was changed after signing. Exit 22."""

    exit_code: int = 22


class DigestMismatchError(EvidenceError):
    """The attestation is genuine but about another image digest. Exit 23."""

    exit_code: int = 23


class LockMismatchError(EvidenceError):
    """The attestation is genuine but the image passed under another lock. Exit 24."""

    exit_code: int = 24

"""The state of one read of a project's dependency files (lock/projectdeps.py), and the lines
it collects: its own module so the readers it calls (lock/ownproject.py) can use them without
importing projectdeps, which imports them."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from envbuild.core.errors import RequestError
from envbuild.core.fsio import read_input
from envbuild.core.locations import unreadable_kind
from envbuild.lock import pins as pydeps
from envbuild.request.fields import MAX_REQUIREMENT
from envbuild.request.sourcetree import file_sha256, request_file

COMMENT = re.compile(r"(^|\s+)#.*$")
"""A comment of a requirements line (pip: "# ... preceded by whitespace", or the whole line)."""


@dataclass(frozen=True)
class Line:
    """One requirement and where it was written ("requirements.txt line 3")."""

    text: str
    origin: str
    file: str = ""
    """The file it was read from, as the lock names it ("" for a build requirement)."""


@dataclass
class Reader:
    image_dir: Path
    export: bool
    runner: pydeps.Runner | None = None
    requirements: list[Line] = field(default_factory=list)
    constraints: list[Line] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    requires_python: list[Line] = field(default_factory=list)
    seen: set[Path] = field(default_factory=set)
    framework: str = ""
    """The framework's normalised name: its pins with a local label are the stack's build."""
    own: dict[str, Path] = field(default_factory=dict)
    """The project's own normalised name(s) -> its folder: a requirement on it is the project."""
    installed: Path | None = None
    """The folder of a project that is installed ([project] install), resolved."""
    own_read: set[Path] = field(default_factory=set)
    """The projects whose own dependencies are already read."""
    relabelled: set[str] = field(default_factory=set)
    """The files in which a framework pin had a local label dropped."""
    notes: list[str] = field(default_factory=list)
    read_pyproject: Callable[[Reader, Path, Sequence[str], Sequence[str]], None] | None = None
    """projectdeps' pyproject reader, handed to the helpers it calls (lock/ownproject.py reads
    the project's own dependencies with it): they sit below it and do not import it."""
    read_toml: Callable[[Path, str], dict[str, Any]] | None = None

    @property
    def where(self) -> str:
        """The request file, which names the files read here."""
        return request_file(self.image_dir)

    def name(self, path: Path) -> str:
        return Path(os.path.relpath(path, self.image_dir.resolve())).as_posix()


def requirement(text: str, origin: str, *, quote: bool = True) -> Requirement:
    """`text` as a requirement. `quote=False` for a line of a text file the request names:
    a refusal then names the file and line but never echoes it (the file may be a secret
    named by mistake; docs/reliability.md, "Secrets in messages")."""
    if len(text) > MAX_REQUIREMENT:
        start = f"{text[:60]!r}... " if quote else ""
        raise RequestError(
            f"{origin}: {start}{len(text)} characters long, not a requirement (at most "
            f"{MAX_REQUIREMENT})",
            hint="fix the line: a PEP 508 requirement such as numpy<3",
            fields={"origin": origin},
        )
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0]
        if quote:
            said = f"{text!r} is not a valid requirement ({reason})"
        else:
            # packaging's first line names what it expected; drop it if it quotes the text.
            if any(part in reason for part in re.findall(r"[^\s'\"]{4,}", text)):
                reason = "not PEP 508"
            said = f"not a valid requirement ({reason}; the line is not shown, as it could be a secret)"
        raise RequestError(
            f"{origin}: {said}",
            hint="fix the line: a PEP 508 requirement such as numpy<3 (or name another file "
            "in [packages] files)",
            fields={"origin": origin},
        ) from None
    if req.url is not None and not req.url.startswith(("https://", "http://", "file://")):
        raise RequestError(
            f"{origin}: {text!r} points at {req.url!r}: only http(s):// and file:// wheels can "
            "be locked with hashes",
            hint="depend on a released version instead, or on an https:// URL of a wheel",
            fields={"origin": origin},
        )
    kind = unreadable_kind(req.url) if req.url is not None else None
    if kind is not None:
        raise RequestError(
            f"{origin}: the file:// URL of {req.name} names {kind}, not a file",
            hint="point it at a wheel file, or put the wheel in a find_links folder and pin it",
            fields={"origin": origin},
        )
    return req


def read_text_input(reader: Reader, path: Path) -> str:
    """A dependency file's text, its hash recorded as a lock input (`Reader.files`);
    RequestError (exit 2) when it cannot be read as UTF-8 text."""
    rel = reader.name(path)
    try:
        text = read_input(path, what="requirements file").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RequestError(
            f"cannot read {rel}: {exc}", hint="check the file", fields={"path": rel}
        ) from None
    reader.files[rel] = file_sha256(path)
    return text

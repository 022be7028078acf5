"""Centralised terminal output for commands (only the CLI layer prints)."""

from __future__ import annotations

import json
from typing import Any

import click


def _safe(text: str) -> str:
    """What reaches the terminal: no escape sequence or control character (each line made
    `printable`; line breaks between lines kept) and no URL credential (`redact`). Values from
    reports and host files are made printable where they are read; this is the last guard."""
    from envbuild.core.documents import printable
    from envbuild.core.errors import redact

    return redact("\n".join(printable(part) for part in text.split("\n")))


def emit_json(obj: Any) -> None:
    """One JSON object on stdout, keys sorted, for machines (JSON escapes control characters;
    URL credentials are redacted)."""
    from envbuild.core.errors import redact

    click.echo(redact(json.dumps(obj, sort_keys=True)))


def line(text: str = "") -> None:
    click.echo(_safe(text))


def warn(text: str) -> None:
    click.echo(f"warning: {_safe(text)}", err=True)


def table(rows: list[tuple[str, ...]], *, header: tuple[str, ...] | None = None) -> str:
    """A plain aligned text table (no colours, stable for golden tests); a cell never breaks
    its line or carries a terminal escape (`printable`)."""
    from envbuild.core.documents import printable

    rows = [tuple(printable(c) for c in r) for r in rows]
    all_rows = ([header] if header else []) + rows
    if not all_rows:
        return ""
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(all_rows[0]))]
    out = []
    for r in all_rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)

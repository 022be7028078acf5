"""Centralised terminal output for commands (only the CLI layer prints)."""

from __future__ import annotations

import json
from typing import Any

import click


def emit_json(obj: Any) -> None:
    """One JSON object on stdout, keys sorted, for machines."""
    click.echo(json.dumps(obj, sort_keys=True))


def line(text: str = "") -> None:
    click.echo(text)


def warn(text: str) -> None:
    click.echo(f"warning: {text}", err=True)


def table(rows: list[tuple[str, ...]], *, header: tuple[str, ...] | None = None) -> str:
    """A plain aligned text table (no colours, stable for golden tests)."""
    all_rows = ([header] if header else []) + rows
    if not all_rows:
        return ""
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(all_rows[0]))]
    out = []
    for r in all_rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)

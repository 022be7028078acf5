"""JSON and TOML text parsed with a nesting limit (pure).

Every JSON or TOML input envbuild reads (requests, locks, matrix files, plans, smoke reports,
host facts, registry answers) goes through `toml_loads` or `json_loads`. Both parsers recurse
once per level, so a value nested thousands of arrays deep raises RecursionError inside them;
that, and anything nested deeper than MAX_DEPTH (no envbuild document goes past 8), is a
`DocumentError`, a ValueError each caller turns into its own typed error.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MAX_DEPTH = 32
"""Levels of tables/arrays (objects/lists) a document may have; envbuild's own have at most 8."""


class DocumentError(ValueError):
    """Text that is not a document of the expected kind, or is nested too deep."""


class TooDeep(DocumentError):
    def __init__(self) -> None:
        super().__init__(f"nested deeper than {MAX_DEPTH} levels")


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when VALUE nests dicts/lists more than LIMIT levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def json_loads(text: str | bytes) -> Any:
    """JSON -> Python data; DocumentError for bad JSON or too deep a nesting."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise TooDeep() from None
    except ValueError as exc:  # JSONDecodeError, and bytes that are not UTF-8
        raise DocumentError(str(exc)) from None
    if too_deep(data):
        raise TooDeep()
    return data


def toml_loads(text: str) -> dict[str, Any]:
    """TOML -> Python data, for reading only: the standard library's tomllib where it exists
    (Python >= 3.11; about 20x faster than tomlkit on a lock with hundreds of hashes, which
    keeps `lock --check` in milliseconds), tomlkit on 3.10. DocumentError for bad TOML or too
    deep a nesting."""
    try:
        if sys.version_info >= (3, 11):
            import tomllib

            data: dict[str, Any] = tomllib.loads(text)
        else:
            import tomlkit  # lazy: the CLI must start without it

            data = tomlkit.parse(text).unwrap()
    except RecursionError:
        raise TooDeep() from None
    except DocumentError:
        raise
    except Exception as exc:  # TOMLDecodeError, tomlkit's ParseError, odd input (NUL)
        raise DocumentError(str(exc)) from None
    if too_deep(data):
        raise TooDeep()
    return data


# Terminal control in text from outside (a smoke report, host facts): escape sequences (CSI,
# OSC with its BEL or ST end, 8-bit CSI/OSC, other ESC pairs), then the remaining C0/C1
# controls, DEL and the bidirectional overrides (they reorder what is shown). Line breaks (LF, CR, VT, FF, NEL, U+2028/U+2029) become a space: a value
# must not start a line of its own that looks like envbuild's ("error: ...").
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x9d[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[@-Z\\-_]?"
)
_BREAKS = re.compile(r"[\n\r\x0b\x0c\x85\u2028\u2029]+")
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """TEXT safe to print on a terminal: escape sequences removed, line breaks as spaces, other
    control characters as '?'. Tabs stay."""
    if text.isascii() and text.isprintable():
        return text  # no ESC, no control, no break: nothing to do (most host facts)
    text = _ESCAPES.sub("", text)
    text = _BREAKS.sub(" ", text)
    return _CONTROLS.sub("?", text)


def printable_data(value: Any) -> Any:
    """Every string (keys included) of parsed JSON made `printable` (recursive: call it on data that passed
    `too_deep`)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_data(k): printable_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_data(v) for v in value]
    return value

"""Field readers for the request (pure): one TOML value -> a checked Python value, or a
`RequestError` that names the file, the table, the key and what to write instead.

Used by envbuild.request.parse (the [image], [framework], [targets], [indexes] and [smoke] tables)
and envbuild.request.project ([packages] files, [project], [smoke] command), so that every key of
`envbuild.toml` is refused the same way. Strings end up in Dockerfile text and shell commands,
so quotes, newlines and control characters are refused outright rather than escaped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envbuild.core.errors import RequestError, UserError, shorten
from envbuild.core.values import CONTROL_CHARS, check_url

if TYPE_CHECKING:
    from packaging.requirements import Requirement

# Quotes, backslashes, backticks, '$' and control characters break Dockerfile/shell quoting;
# the control, line-breaking, invisible and bidi characters: core/values.py CONTROL_CHARS.
_BAD_CHARS = re.compile("[" + CONTROL_CHARS + r"\"'`\\$" + "]")
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_URL_SCHEMES = ("https://", "http://", "file://")


def where(path: str, table: str, key: str | None = None) -> str:
    # An unknown key can be any string: quote it unless it is a plain TOML bare key.
    shown = key if key is None or _PLAIN_KEY.match(key) else repr(key)
    return f"{path}: [{table}]" + (f" {shown}" if key else "")


def fail(path: str, table: str, key: str | None, problem: str, instead: str) -> RequestError:
    loc = where(path, table, key)
    return RequestError(
        f"{loc}: {shorten(problem)}",
        hint=instead,
        fields={"file": path, "table": table, "key": key or ""},
    )


def check_text(path: str, table: str, key: str, value: str) -> str:
    bad = _BAD_CHARS.search(value)
    if bad:
        raise fail(
            path,
            table,
            key,
            f"{value!r} contains {bad.group()!r}",
            "write it without quotes, backslashes, '$', backticks, newlines, control, "
            "invisible or bidi characters (they would end up inside Dockerfile and shell text)",
        )
    if value != value.strip():
        raise fail(
            path,
            table,
            key,
            f"{value!r} has leading or trailing spaces",
            f"write {value.strip()!r}",
        )
    return value


def read_str(path: str, table: str, key: str, value: Any, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise fail(
            path,
            table,
            key,
            f"expected a string, got {type_name(value)} {value!r}",
            f'write {key} = "..." (quoted)',
        )
    if not value and not empty_ok:
        raise fail(path, table, key, "is empty", f"remove {key} or give it a value")
    return check_text(path, table, key, value)


def read_str_list(path: str, table: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise fail(
            path,
            table,
            key,
            f"expected an array of strings, got {type_name(value)} {value!r}",
            f'write {key} = ["...", "..."]',
        )
    out = []
    for item in value:
        out.append(read_str(path, table, key, item))
    return tuple(out)


def read_int(path: str, table: str, key: str, value: Any, *, minimum: int, maximum: int) -> int:
    # bool is an int in Python; `tier = true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(
            path,
            table,
            key,
            f"expected an integer, got {type_name(value)} {value!r}",
            f"write {key} = <a whole number from {minimum} to {maximum}> (no quotes)",
        )
    if not minimum <= value <= maximum:
        raise fail(
            path,
            table,
            key,
            f"{value} is out of range",
            f"write a whole number from {minimum} to {maximum}",
        )
    return value


def read_choice(path: str, table: str, key: str, value: Any, choices: Sequence[str]) -> str:
    """One of `choices`, exactly (no case folding: the request is a file people diff)."""
    text = read_str(path, table, key, value)
    if text not in choices:
        raise fail(
            path,
            table,
            key,
            f"{text!r} is not one of {', '.join(choices)}",
            f'write {key} = "{choices[0]}" (or ' + ", ".join(f'"{c}"' for c in choices[1:]) + ")",
        )
    return text


def read_bool(path: str, table: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(
            path,
            table,
            key,
            f"expected true or false, got {type_name(value)} {value!r}",
            f"write {key} = true or {key} = false (no quotes)",
        )
    return value


def type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def without_credentials(url: str) -> str:
    """URL without its userinfo (`https://user:token@host/x` -> `https://host/x`)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def read_url(path: str, table: str, key: str, value: str, *, paths_ok: bool) -> str:
    if value.startswith(_URL_SCHEMES):
        value = without_credentials(value)
        if value.startswith(("http://", "https://")):
            # The same allow-list render applies: what lock accepts, render renders.
            hint = (
                "write the URL with only letters, digits and . - _ ~ : / % + = , (no "
                "credentials, query, fragment, quotes, spaces or shell characters)"
            )
            try:
                check_url(value, "the URL", hint)
            except UserError as exc:
                raise fail(path, table, key, exc.message, exc.hint) from None
        return value
    if "://" in value or (not paths_ok and ":" in value):
        raise fail(
            path,
            table,
            key,
            f"{value!r} is not an http(s):// or file:// URL",
            "write an https:// index URL (or file:// for a local folder)",
        )
    if not paths_ok:
        raise fail(
            path,
            table,
            key,
            f"{value!r} is not a URL",
            "write an https:// index URL such as https://pypi.org/simple",
        )
    return value  # a path, relative to the image folder


MAX_REQUIREMENT = 4096
"""The longest requirement line envbuild takes: a name, extras, a range, a marker and a
wheel URL fit many times over; a longer one is refused before packaging or uv quote it."""


def read_requirement(path: str, table: str, key: str, text: str) -> Requirement:
    # Imported here: its import (markers, tags) costs ~25 ms that `resolve` does not need.
    from packaging.requirements import InvalidRequirement, Requirement

    if len(text) > MAX_REQUIREMENT:
        raise fail(
            path,
            table,
            key,
            f"{text[:60]!r}... is {len(text)} characters long (at most {MAX_REQUIREMENT})",
            'write a PEP 508 requirement such as "numpy<3" or "transformers>=4.40,<5"',
        )
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise fail(
            path,
            table,
            key,
            # packaging adds a caret diagram on more lines: the first line is the reason
            f"{text!r} is not a valid requirement ({str(exc).splitlines()[0]})",
            'write a PEP 508 requirement such as "numpy<3" or "transformers>=4.40,<5"',
        ) from None
    if req.url is not None and not req.url.startswith(_URL_SCHEMES):
        raise fail(
            path,
            table,
            key,
            f"{text!r} points at {req.url!r}, which is not an http(s):// or file:// URL",
            "use an https:// or file:// URL to a wheel, or a plain name with a version range",
        )
    from envbuild.core.locations import unreadable_kind  # pathlib: not for `resolve`

    kind = unreadable_kind(req.url) if req.url is not None else None
    if kind is not None:
        raise fail(
            path,
            table,
            key,
            f"the file:// URL of {req.name} names {kind}, not a file",
            "point it at a wheel file, or put the wheel in a find_links folder and pin it",
        )
    if req.url is not None and without_credentials(req.url) != req.url:
        raise fail(
            path,
            table,
            key,
            f"the URL of {req.name} carries credentials",
            "remove them from the URL; uv and pip take them from ~/.netrc (NETRC) or a keyring",
        )
    if req.url is not None and req.url.startswith(("http://", "https://")):
        # The build installs it from this URL: the same allow-list render applies.
        hint = "use a plain https:// URL to the wheel (no query, fragment or shell characters)"
        try:
            check_url(req.url, f"the URL of {req.name}", hint)
        except UserError as exc:
            raise fail(path, table, key, exc.message, exc.hint) from None
    if req.marker is not None:
        raise fail(
            path,
            table,
            key,
            f"{text!r} has an environment marker",
            "drop the marker: the lock is for one platform already ([image] platform, python)",
        )
    return req


@dataclass(frozen=True)
class RequestOrigin:
    """Where a request was written, so that a message names what to change: an
    `envbuild.toml` (path: "[image] python") or `resolve`'s flags (no path: "--python")."""

    path: str | None = None

    def fail(
        self,
        table: str,
        key: str,
        problem: str,
        *,
        toml: str,
        flags: str,
        flag_problem: str | None = None,
    ) -> UserError:
        """The error for one broken rule: the problem (`flag_problem` where flags word it
        differently) and what to write instead in the file (`toml`) or on the command line."""
        if self.path is None:
            return UserError(flag_problem or problem, hint=flags)
        return fail(self.path, table, key, problem, toml)


FLAGS = RequestOrigin()
"""`envbuild resolve`'s flags (and requests built in code)."""

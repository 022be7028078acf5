"""The one reader of an HTTP answer's body: bounded in size and in total time.

requests' `timeout` is per socket read, so a server that sends one byte every few seconds
never trips it, and `Response.content` reads a body of any size into memory before anyone
can look at its length. Every answer envbuild reads from the network (a registry's manifest
and token, the matrix refresh's index pages, metadata and byte ranges) is fetched with
`stream=True` and read here: in pieces as they arrive (urllib3's `HTTPResponse.read1`), given
up past `limit` bytes (after decoding: a gzip bomb is bounded too) or past `deadline`, with
the connection closed either way.
"""

from __future__ import annotations

import time
from typing import Any

CHUNK_BYTES = 64 * 1024


class BodyError(ValueError):
    """The body was larger than allowed, or arrived too slowly (`kind`: "size" or "time")."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def remaining(deadline: float, per_read: float) -> float:
    """The per-read timeout to give requests so that no single read outlasts `deadline`."""
    return max(0.001, min(per_read, deadline - time.monotonic()))


def read_body(response: Any, *, limit: int, deadline: float, what: str) -> bytes:
    """The body of a requests `Response` fetched with `stream=True`: at most `limit` bytes,
    all of it before `time.monotonic()` reaches `deadline` (BodyError otherwise). A read
    blocks at most the request's own per-read timeout, so the total is bounded by `deadline`
    plus one such read."""
    raw = response.raw
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            if time.monotonic() > deadline:
                raise BodyError(f"{what} did not arrive in time ({size} bytes so far)", "time")
            chunk = raw.read1(CHUNK_BYTES, decode_content=True)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise BodyError(f"{what} is larger than {limit} bytes", "size")
            chunks.append(chunk)
    finally:
        response.close()

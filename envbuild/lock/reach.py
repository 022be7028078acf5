"""Does a package index answer? One short HTTP request per host, before uv is asked to pin
from it: an index that does not answer makes uv fail only after its own retries, and its
error cannot say which other build would lock (envbuild.app.lock_reach decides that)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

PROBE_TIMEOUT_S = 4.0
"""Long enough for a slow index's first byte, short enough not to be felt when it is down."""

NO_PROBE_ENV = "ENVBUILD_NO_INDEX_PROBE"
"""Set (to anything but "" or "0"): every index is taken to answer (tests that fake uv)."""


def index_answers(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True when the index at `url` answers with any HTTP response below 500; False on a
    connection error, a timeout or a server error. Proxies come from the environment, as
    they do for uv."""
    if os.environ.get(NO_PROBE_ENV, "") not in ("", "0"):
        return True
    import requests  # here: most commands never probe, and its import costs start-up time

    try:
        response = requests.head(url.rstrip("/") + "/", timeout=timeout, allow_redirects=True)
    except requests.RequestException:
        return False
    return response.status_code < 500


def host_of(url: str) -> str:
    """The part of an index URL that decides whether it answers: scheme and host."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def shown(url: str) -> str:
    """ "download.pytorch.org/whl/cu126": an index URL as a message names it."""
    parts = urlsplit(url)
    return (parts.netloc + parts.path).rstrip("/")

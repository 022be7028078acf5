"""A failed uv or pip run, said as a typed error with a next step (envbuild.lock.pins runs
them): what of the tool's output is shown, and which failure it is (offline cache, hash
mismatch, a requirement with only an sdist, no solution, no network)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from packaging.utils import canonicalize_name

from envbuild.core.errors import PinError, UnsatisfiableError


class Asked(Protocol):
    """What of the pin request (envbuild.lock.pins.PinRequest) the wording needs."""

    @property
    def python(self) -> str: ...
    @property
    def platform(self) -> str: ...
    @property
    def source_packages(self) -> Sequence[str]: ...


def _tail(text: str, lines: int = 12, width: int = 500) -> str:
    """The last `lines` lines of a tool's output, each cut at `width` characters: uv quotes
    the requirement it could not parse, which may be megabytes long. Lines left out are
    counted, so a reader knows the text starts in the middle."""
    every = text.strip().splitlines()
    kept = every[-lines:]
    cut = [
        line if len(line) <= width else f"{line[:width]}... ({len(line)} characters)"
        for line in kept
    ]
    if len(every) > len(kept):
        cut.insert(0, f"({len(every) - len(kept)} earlier lines left out)")
    return "\n".join(cut)


def _explanation(text: str, lines: int = 60) -> str:
    """uv's "No solution found" and the derivation after it (maxtext's conflict ran to 19
    lines, and its opening "Because ..." was lost to the last 12): up to `lines`, its start
    and its end, with the lines left out between them counted."""
    every = text.strip().splitlines()
    start = next((i for i, ln in enumerate(every) if "no solution found" in ln.lower()), 0)
    kept = every[start:]
    if len(kept) <= lines:
        return _tail("\n".join(kept), lines=lines)
    head, tail = kept[: lines // 2], kept[-(lines - lines // 2) :]
    gap = f"({len(kept) - len(head) - len(tail)} lines left out)"
    return "\n".join(
        [_tail("\n".join(head), lines=len(head)), gap, _tail("\n".join(tail), lines=len(tail))]
    )


def classify_failure(tool: str, stderr: str, req: Asked) -> Exception:
    """A typed error with a next step for a failed uv/pip run."""
    low = stderr.lower()
    detail = _tail(stderr)
    if "network was disabled" in low or ("offline" in low and "cache" in low):
        return PinError(
            f"--offline: the {tool} cache does not hold everything this lock needs:\n{detail}",
            hint="run the same command once without --offline to fill the cache",
            fields={"tool": tool},
        )
    if "hash mismatch" in low or "hashes do not match" in low:
        return PinError(
            f"{tool} found a file whose hash differs from the recorded one:\n{detail}",
            hint="the package index may have re-uploaded the file under the same version (the "
            "PyTorch index has done so repeatedly), or it was altered on the way; check the "
            "index, then re-lock with --upgrade-package NAME",
            fields={"tool": tool},
        )
    source_only = sorted(
        {str(canonicalize_name(n)) for n in _SOURCE_ONLY.findall(stderr)} - set(req.source_packages)
    )
    if source_only:
        names = ", ".join(source_only)
        return UnsatisfiableError(
            f"{names}: no wheel fits Python {req.python} on linux/{req.platform} (only a "
            f"source distribution does), and images install wheels unless told otherwise:\n"
            f"{detail}",
            hint="set [image] compile_extensions = true (with [targets] gpus) to lock it from "
            "its sdist and compile it in the image's builder stage for those GPUs, or require "
            "a version that publishes a wheel for this Python and platform",
            fields={"tool": tool, "source_only": source_only, "reasons": detail.splitlines()},
        )
    if "no solution found" in low or "resolutionimpossible" in low or "conflict" in low:
        detail = _explanation(stderr)
        return UnsatisfiableError(
            f"the Python packages cannot be pinned together for Python {req.python} on "
            f"linux/{req.platform}:\n{detail}",
            hint="loosen the [packages] requirements or the [framework] range named above",
            fields={"tool": tool, "reasons": detail.splitlines()},
        )
    if any(s in low for s in ("failed to fetch", "error sending request", "dns error", "connect")):
        return PinError(
            f"{tool} could not reach a package index:\n{detail}",
            hint="check the network and the [indexes] URLs; with a filled cache, --offline "
            "locks without network",
            fields={"tool": tool},
        )
    return PinError(
        f"{tool} failed to pin the Python packages:\n{detail}",
        hint="run the command with ENVBUILD_DEBUG=1, or try the other resolver with "
        "ENVBUILD_PYDEPS=pip",
        fields={"tool": tool},
    )


# uv's hint when only an sdist fits: "Wheels are required for `flash-attn` because building
# from source is disabled for all packages (i.e., with `--no-build`)"; pip's resolver says
# "No matching distribution found" without naming why, so only uv's answer is read here.
_SOURCE_ONLY = re.compile(r"Wheels are required for `([A-Za-z0-9._-]+)` because building")

"""What every section of `make bench` shares: where things are, running and timing a command,
interleaved samples, and one table row (medians, ratio, goal)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ENVBUILD = str(BIN / "envbuild")
UV = str(BIN / "uv") if (BIN / "uv").exists() else "uv"
RESULTS_DIR = ROOT / "benchmarks" / "results"

Row = dict[str, Any]
Section = dict[str, Any]


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _run(
    cmd: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(cmd),
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else dict(env),
        cwd=cwd,
    )


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _checked(
    cmd: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    res = _run(cmd, env=env, cwd=cwd)
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"`{' '.join(cmd)}` exited {res.returncode}:\n{tail}")
    return res


def interleaved(
    fns: Mapping[str, Callable[[], object]], repeat: int, *, warmup: int = 1
) -> dict[str, list[float]]:
    """Time each callable `repeat` times, round-robin, after `warmup` untimed rounds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            samples[k].append(_timed(fn))
    return samples


def row(
    what: str,
    ours: Sequence[float] | float | None,
    peer: Sequence[float] | float | None = None,
    *,
    peer_name: str = "",
    unit: str = "s",
    note: str = "",
    goal: float | None = None,
) -> Row:
    """One table row: medians of the samples, the ratio envbuild / peer (and the ratio it
    must stay at or under, when it has one), every sample kept."""

    def med(v: Sequence[float] | float | None) -> float | None:
        if v is None:
            return None
        if isinstance(v, (int, float)):
            return float(v)
        return statistics.median(v) if v else None

    def samples(v: Sequence[float] | float | None) -> list[float]:
        if v is None:
            return []
        return [float(v)] if isinstance(v, (int, float)) else [float(x) for x in v]

    m_ours, m_peer = med(ours), med(peer)
    n = len(samples(ours))
    return {
        "what": what,
        "unit": unit,
        "envbuild": m_ours,
        "peer": m_peer,
        "peer_name": peer_name,
        "ratio": (m_ours / m_peer) if m_ours is not None and m_peer else None,
        "n": n,
        "samples": {"envbuild": samples(ours), "peer": samples(peer)},
        "note": note,
        "goal": goal,
    }

"""Section 4 of `make bench`: `envbuild image images/torch-cpu` on the real engine beside a
hand-written Dockerfile built with `docker build` (classic builder), on the same local base and
wheelhouse: cold builds, warm rebuilds, a late-layer change, then sizes and layers
(benchmarks/layers.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ENVBUILD,
    ROOT,
    Row,
    Section,
    _checked,
    _log,
    _run,
    _timed,
    interleaved,
    row,
)
from benchmarks.layers import _history_ids, _image_size, _short, _step_text, measure_sizes

PEER_DOCKERFILE = ROOT / "benchmarks" / "peer" / "torch-cpu.Dockerfile"
PEER_NAME = "hand-written Dockerfile, `docker build` (classic)"


def _phase_note(runs: Sequence[Mapping[str, Any]]) -> str:
    """envbuild's own split (`envbuild image --json`): engine build, smoke container, tag;
    and how many runs reused an earlier smoke pass of the same image id on this host."""

    def med(key: str) -> float | None:
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else None

    build, smoke, tag = med("build_s"), med("smoke_s"), med("tag_s")
    if build is None or smoke is None:
        return ""
    text = f"envbuild: build {build:.1f} s + smoke {smoke:.1f} s"
    if tag is not None:
        text += f" + tag {tag:.1f} s"
    scopes = [(r.get("smoke_reused") or {}).get("scope") for r in runs if r.get("smoke_reused")]
    if (same := scopes.count(None)) > 0:
        text += f"; smoke pass reused in {same} of {len(runs)} runs (same image id, this host)"
    if (env := scopes.count("environment")) > 0:
        text += (
            f"; the environment's pass reused in {env} of {len(runs)} runs (only the "
            "project's smoke command ran)"
        )
    return text + " (medians)"


def _unreachable_retries(log: str) -> dict[str, int]:
    """pip's "Retrying ... NewConnectionError ...: /whl/cpu/torch/" warnings, per index path."""
    counts: dict[str, int] = {}
    pattern = r"Retrying \(Retry\(.*(?:NewConnectionError|ConnectTimeout).*: (/\S+)$"
    for m in re.finditer(pattern, log, re.M):
        index = m.group(1).rstrip("/").rsplit("/", 1)[0] + "/"
        counts[index] = counts.get(index, 0) + 1
    return counts


def _edit_smoke_setting(image_dir: Path) -> str:
    """A late-layer change: one smoke setting of the request (the plan changes, nothing else)."""
    path = image_dir / "envbuild.toml"
    text = path.read_text()
    if re.search(r"^\[smoke\]", text, re.M):
        text = re.sub(r"^\[smoke\]\n", "[smoke]\ntimeout_s = 599\n", text, count=1, flags=re.M)
    else:
        text += "\n[smoke]\ntimeout_s = 599\n"
    path.write_text(text)
    return "[smoke] timeout_s = 599"


def _fresh_base(base_image: str, tag: str, nonce: str) -> None:
    """A base of our own (a LABEL on top of the local base: same files, new image id), so the
    classic builder's cache, keyed by parent image id, holds nothing for either build: a real
    cold build without pruning anything other users of this engine rely on."""
    subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=f"FROM {base_image}\nLABEL envbuild.bench.nonce={nonce}\n",
        text=True,
        capture_output=True,
        check=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )


def bench_build(
    repeat: int, base_image: str, wheels: Path, ca_cert: Path, cold_repeat: int = 1
) -> Section:
    title = "4. Build on the real engine (images/torch-cpu on the local base)"
    if _run(["docker", "info"]).returncode != 0:
        return {"title": title, "skipped": "no Docker engine answers on this machine"}
    if _image_size(base_image) is None:
        return {"title": title, "skipped": f"{base_image} is missing (bash tests/e2e.sh prepare)"}
    nonce = f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{os.getpid()}"
    bench_base = f"envbuild-bench/base:{nonce}"
    ours_tag = f"envbuild-bench/torch-cpu:{nonce}"
    peer_tag = f"envbuild-bench/torch-cpu-peer:{nonce}"
    rows: list[Row] = []
    notes: list[str] = []
    out: Section = {"title": title, "rows": rows, "notes": notes}
    try:
        with tempfile.TemporaryDirectory(prefix="envbuild-bench-build-") as tmp:
            tags = (bench_base, ours_tag, peer_tag)
            _build_both(Path(tmp), (repeat, cold_repeat), base_image, tags, wheels, ca_cert, out)
    except Exception as err:
        out["error"] = str(err)[-3000:]
    finally:
        if os.environ.get("BENCH_KEEP_IMAGES") != "1":
            for tag in (ours_tag, peer_tag, bench_base):
                _run(["docker", "image", "rm", tag])
    return out


@dataclass
class _Builds:
    """Both sides of one run: envbuild's command (its base swapped per round) and the peer's
    build context, with envbuild's own split of each build (`envbuild image --json`) by kind."""

    image_dir: Path
    ctx: Path
    tags: tuple[str, str, str]
    version: str
    cmd: list[str]
    env: dict[str, str]
    peer_env: dict[str, str] = field(default_factory=lambda: {**os.environ, "DOCKER_BUILDKIT": "0"})
    phases: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"cold": [], "warm": [], "late": []}
    )

    def envbuild_image(
        self, kind: str, base: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        self.cmd[self.cmd.index("--base-image") + 1] = self.tags[0] if base is None else base
        res = _checked(self.cmd, env=self.env)
        try:
            doc = json.loads(res.stdout)
        except ValueError:
            doc = {}
        keys = ("build_s", "smoke_s", "tag_s", "smoke_summary", "smoke_reused")
        self.phases[kind].append({k: doc.get(k) for k in keys})
        return res

    def peer_run(self, base: str) -> subprocess.CompletedProcess[str]:
        """The peer's whole turn on `base` (here its build; a subclass may add its own check)."""
        return _checked(self.peer_argv(base), env=self.peer_env)

    def peer_argv(self, base: str) -> list[str]:
        return [
            "docker",
            "build",
            "-t",
            self.tags[2],
            "--build-arg",
            f"BASE={base}",
            "--build-arg",
            f"TORCH_VERSION={self.version}",
            str(self.ctx),
        ]


def _prepare(tmp: Path, tags: tuple[str, str, str], wheels: Path, ca_cert: Path) -> _Builds:
    """A copy of images/torch-cpu and the peer's build context (its Dockerfile, the CA
    certificate and the same wheelhouse), under `tmp`."""
    from envbuild.lock import format as lockfile

    image_dir = tmp / "torch-cpu"
    shutil.copytree(ROOT / "images" / "torch-cpu", image_dir)
    lock = lockfile.loads((image_dir / "envbuild.lock").read_text())
    cmd = [
        ENVBUILD,
        "image",
        str(image_dir),
        "--base-image",
        "",  # the base of the round (cold) or bench_base
        "--tag",
        tags[1],
        "--allow-cpu",
        "--find-links",
        str(wheels),
        "--ca-cert",
        str(ca_cert),
        "--json",
    ]
    # A user cache of this run: the first build's smoke pass is the only one it can reuse.
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(tmp / "envbuild-cache")}
    ctx = tmp / "peer"
    ctx.mkdir()
    shutil.copy(PEER_DOCKERFILE, ctx / "Dockerfile")
    shutil.copy(ca_cert, ctx / "ca.crt")
    shutil.copytree(wheels, ctx / "wheels")
    return _Builds(image_dir, ctx, tags, lock.stack.framework.version, cmd, env)


def _cold_pairs(
    builds: _Builds, base_image: str, cold_repeat: int
) -> tuple[list[float], list[float], dict[str, str]]:
    """Cold pairs, each on a base of its own; who goes first alternates. The last round's base
    is bench_base, which the warm and late-change rebuilds reuse. (envbuild's seconds, the
    peer's, and each side's last log.)"""
    bench_base, ours_tag, peer_tag = builds.tags
    cold_e: list[float] = []
    cold_p: list[float] = []
    logs = {"envbuild": "", "peer": ""}
    for k in range(cold_repeat):
        round_base = bench_base if k == cold_repeat - 1 else f"{bench_base}-cold{k}"
        _fresh_base(base_image, round_base, f"{bench_base}-{k}")
        pair = [("envbuild", round_base), ("peer", round_base)]
        for who, base in pair if k % 2 == 0 else reversed(pair):
            _log(f"build: {who} cold ({k + 1} of {cold_repeat})")
            t0 = time.perf_counter()
            if who == "envbuild":
                logs[who] = builds.envbuild_image("cold", base).stderr
                cold_e.append(time.perf_counter() - t0)
            else:
                logs[who] = builds.peer_run(base).stdout
                cold_p.append(time.perf_counter() - t0)
        if round_base != bench_base:  # keep the disk as it was: only the last round's images stay
            for tag in (ours_tag, peer_tag, round_base):
                _run(["docker", "image", "rm", tag])
    return cold_e, cold_p, logs


def _retry_notes(logs: Mapping[str, str]) -> list[str]:
    notes = []
    for who, log in logs.items():
        retries = _unreachable_retries(log)
        if retries:
            notes.append(
                f"{who}'s cold build: pip retried {sum(retries.values())} times against an "
                f"index it could not reach ({', '.join(sorted(retries))}) before falling "
                "back to the others; at pip's default backoff (0.5+1+2+4 s per package for "
                f"5 retries) that is roughly {sum(retries.values()) / 5 * 7.5:.0f} s of waiting "
                "(an estimate, not measured)."
            )
    return notes


def _late_change_row(builds: _Builds) -> Row:
    """envbuild's rebuild after one smoke setting changed (re-locked --offline): how many of
    the image's steps it rebuilt, and from which."""
    ours_tag = builds.tags[1]
    _log("build: late-layer change")
    before = _history_ids(ours_tag)
    change = _edit_smoke_setting(builds.image_dir)
    _checked([ENVBUILD, "lock", "--offline", str(builds.image_dir)], env=builds.env)
    late = _timed(lambda: builds.envbuild_image("late"))
    after = _history_ids(ours_tag)
    if before and after and before[-1][0] != after[-1][0]:
        # The image the tag left: untagged now, so nothing else removes it.
        _run(["docker", "image", "rm", before[-1][0]])
    kept = sum(
        1 for a, b in zip(before, after, strict=False) if a[0] == b[0] and a[0] != "<missing>"
    )
    rebuilt = [c for c, (a, b) in enumerate(zip(after, before, strict=False)) if a[0] != b[0]]
    first = _short(_step_text(after[rebuilt[0]][1]))[:90] if rebuilt else ""
    return row(
        f"rebuild after a late-layer change ({change}, re-locked --offline)",
        late,
        note=f"{len(after) - kept} of {len(after)} steps rebuilt, from `{first}`; "
        + _phase_note(builds.phases["late"]),
    )


def _build_both(
    tmp: Path,
    repeats: tuple[int, int],
    base_image: str,
    tags: tuple[str, str, str],
    wheels: Path,
    ca_cert: Path,
    out: Section,
) -> None:
    repeat, cold_repeat = repeats
    rows: list[Row] = out["rows"]
    notes: list[str] = out["notes"]
    builds = _prepare(tmp, tags, wheels, ca_cert)
    cold_e, cold_p, logs = _cold_pairs(builds, base_image, cold_repeat)
    notes.extend(_retry_notes(logs))
    _log("build: warm rebuilds")
    peer_cmd = builds.peer_argv(tags[0])
    warm = interleaved(
        {
            "e": lambda: builds.envbuild_image("warm"),
            "p": lambda: _checked(peer_cmd, env=builds.peer_env),
        },
        repeat,
        warmup=0,
    )
    rows.append(
        row(
            "cold build (envbuild: build + smoke + tag)",
            cold_e,
            cold_p,
            peer_name=PEER_NAME,
            note=_phase_note(builds.phases["cold"]),
            goal=1.0,
        )
    )
    rows.append(
        row(
            "warm rebuild, nothing changed",
            warm["e"],
            warm["p"],
            peer_name=PEER_NAME,
            note=_phase_note(builds.phases["warm"]),
            goal=1.3,
        )
    )
    rows.append(_late_change_row(builds))
    notes.append(
        f"Cold builds: {cold_repeat} pair(s), each on a fresh base id (so no cache at all), "
        f"who goes first alternating; warm: median of {repeat}, interleaved. Both sides use "
        "the classic builder (envbuild through docker-py's build API, the peer through "
        "`DOCKER_BUILDKIT=0 docker build`), each COPYing the same wheelhouse. envbuild's "
        "times include running the smoke test in a container and tagging on pass; the peer "
        "has no test."
    )
    measure_sizes(out, tags, PEER_NAME)

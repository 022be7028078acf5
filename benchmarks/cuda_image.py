"""Section 9 of `make bench`: the CUDA image people build. `envbuild image images/torch-slim`
(torch's CUDA wheels from PyPI on the plain Debian 12 base, smoke on the CPU path with
--allow-cpu as tests/e2e.sh runs it: no GPU here) beside `peer/torch-slim.Dockerfile`, the
hand-written Dockerfile for the same pins (its requirements.txt written from the same lock at
bench time), built with `docker build` (classic) and checked with a `docker run` of a tiny torch
import and CPU matmul. Cold pairs and warm rebuilds as section 4 does them (benchmarks/build.py:
a fresh base id per cold round, interleaved warm samples), then both images' sizes
(`docker image inspect`).

`python -m benchmarks.cuda_image` runs it alone and writes results/cuda-image.json and
results/cuda-image.md; `python -m benchmarks.run --report-only` takes the JSON into RESULTS.md.
Each cold build downloads about 3 GB from PyPI (both sides, `--no-cache-dir`, no cache mount).
Settings: BENCH_CUDA_COLD_REPEAT (cold pairs, default 2), BENCH_CUDA_WARM_REPEAT (default 2),
BENCH_BASE, BENCH_CA_CERT, BENCH_CONTEXT, BENCH_KEEP_IMAGES=1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.build import _Builds, _cold_pairs, _phase_note, _retry_notes
from benchmarks.common import (
    ENVBUILD,
    RESULTS_DIR,
    ROOT,
    Row,
    Section,
    _checked,
    _log,
    _run,
    interleaved,
    row,
)
from benchmarks.layers import _image_size

TITLE = "9. CUDA image build (images/torch-slim: torch's CUDA wheels from PyPI, plain Debian 12)"
PEER_DOCKERFILE = ROOT / "benchmarks" / "peer" / "torch-slim.Dockerfile"
PEER_NAME = "hand-written Dockerfile (`pip install --require-hashes`, one RUN) + `docker run` check"
# The peer's check: torch imports, sees no GPU here, and a CPU matmul gives a finite number.
PEER_CHECK = (
    "import math, torch; x = torch.randn(256, 256); s = float((x @ x).sum()); "
    "assert math.isfinite(s); print(torch.__version__, torch.cuda.is_available(), s)"
)


def requirements_from_lock(lock_text: str) -> str:
    """The peer's requirements.txt: `name==version --hash=...` for every package of the lock
    (pip's hash-checking mode), written from envbuild.lock itself, not by envbuild's renderer."""
    from envbuild.lock import format as lockfile

    lock = lockfile.loads(lock_text)
    lines = [f"# {lock.name}: every package of envbuild.lock, for pip --require-hashes"]
    for p in sorted(lock.packages, key=lambda p: p.name):
        hashes = sorted(p.hashes)
        lines.append(f"{p.name}=={p.version}" + "".join(f" \\\n    --hash={h}" for h in hashes))
    return "\n".join(lines) + "\n"


class _CudaBuilds(_Builds):
    """Section 4's two sides, with the peer's turn being its build and then its check."""

    def peer_argv(self, base: str) -> list[str]:
        return ["docker", "build", "-t", self.tags[2], "--build-arg", f"BASE={base}", str(self.ctx)]

    def peer_run(self, base: str) -> subprocess.CompletedProcess[str]:
        built = _checked(self.peer_argv(base), env=self.peer_env)
        _checked(["docker", "run", "--rm", self.tags[2], "python", "-c", PEER_CHECK])
        return built


def _prepare(tmp: Path, tags: tuple[str, str, str], ca_cert: Path) -> _CudaBuilds:
    from envbuild.lock import format as lockfile

    image_dir = tmp / "torch-slim"
    shutil.copytree(ROOT / "images" / "torch-slim", image_dir)
    lock_text = (image_dir / "envbuild.lock").read_text()
    lock = lockfile.loads(lock_text)
    cmd = [ENVBUILD, "image", str(image_dir), "--base-image", "", "--tag", tags[1]]
    cmd += ["--allow-cpu", "--ca-cert", str(ca_cert), "--json"]
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(tmp / "envbuild-cache")}
    ctx = tmp / "peer"
    ctx.mkdir()
    shutil.copy(PEER_DOCKERFILE, ctx / "Dockerfile")
    shutil.copy(ca_cert, ctx / "ca.crt")
    (ctx / "requirements.txt").write_text(requirements_from_lock(lock_text))
    return _CudaBuilds(image_dir, ctx, tags, lock.stack.framework.version, cmd, env)


def bench_cuda_image(cold_repeat: int, warm_repeat: int, base_image: str, ca_cert: Path) -> Section:
    if _run(["docker", "info"]).returncode != 0:
        return {"title": TITLE, "skipped": "no Docker engine answers on this machine"}
    if _image_size(base_image) is None:
        return {"title": TITLE, "skipped": f"{base_image} is missing (bash tests/e2e.sh prepare)"}
    nonce = f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{os.getpid()}"
    tags = (
        f"envbuild-bench/cuda-base:{nonce}",
        f"envbuild-bench/torch-slim:{nonce}",
        f"envbuild-bench/torch-slim-peer:{nonce}",
    )
    rows: list[Row] = []
    notes: list[str] = []
    out: Section = {"title": TITLE, "rows": rows, "notes": notes}
    try:
        with tempfile.TemporaryDirectory(prefix="envbuild-bench-cuda-") as tmp:
            builds = _prepare(Path(tmp), tags, ca_cert)
            _measure(builds, base_image, (cold_repeat, warm_repeat), out)
    except Exception as err:
        out["error"] = str(err)[-3000:]
    finally:
        if os.environ.get("BENCH_KEEP_IMAGES") != "1":
            for tag in (tags[1], tags[2], tags[0]):
                _run(["docker", "image", "rm", tag])
    return out


def _measure(builds: _CudaBuilds, base_image: str, repeats: tuple[int, int], out: Section) -> None:
    cold_repeat, warm_repeat = repeats
    rows: list[Row] = out["rows"]
    notes: list[str] = out["notes"]
    cold_e, cold_p, logs = _cold_pairs(builds, base_image, cold_repeat)
    notes.extend(_retry_notes(logs))
    _log("cuda image: warm rebuilds")
    warm = interleaved(
        {"e": lambda: builds.envbuild_image("warm"), "p": lambda: builds.peer_run(builds.tags[0])},
        warm_repeat,
        warmup=0,
    )
    rows.append(
        row(
            "CUDA image: cold build to a checked image (envbuild: build + smoke + tag)",
            cold_e,
            cold_p,
            peer_name=PEER_NAME,
            note=_phase_note(builds.phases["cold"]),
            goal=1.0,
        )
    )
    rows.append(
        row(
            "CUDA image: warm rebuild, nothing changed",
            warm["e"],
            warm["p"],
            peer_name=PEER_NAME,
            note=_phase_note(builds.phases["warm"]),
            goal=1.0,
        )
    )
    ours, peer = _image_size(builds.tags[1]), _image_size(builds.tags[2])
    rows.append(
        row(
            "CUDA image: image size (`docker image inspect` .Size)",
            None if ours is None else ours / 1e9,
            None if peer is None else peer / 1e9,
            peer_name=PEER_NAME,
            unit="GB",
            goal=0.9,
        )
    )
    notes.append(
        f"Cold: {cold_repeat} pair(s), each round on a fresh base id (a LABEL on {base_image}: "
        "no build cache for either side), who goes first alternating; neither side has a "
        "download cache (both `pip install --no-cache-dir`; the classic builder has no cache "
        f"mounts). Warm: {warm_repeat} interleaved samples on the last round's base. envbuild's "
        "time includes its smoke test (CPU path, --allow-cpu, tier 2 as the lock says) and the "
        "tag; on a warm rebuild the image id is unchanged, so envbuild reuses its smoke pass of "
        "that id (ENVBUILD_CACHE_DIR of this run) while the peer runs its `docker run` check "
        "every time. The peer's check is a torch import and a 256x256 CPU matmul."
    )


def read_alone(path: Path) -> Section:
    """A section measured alone (its JSON under results/), for a `make bench` that skipped it
    or `--report-only`, with a note saying when and at which commit; {} when never run."""
    if not path.exists():
        return {}
    section: Section = json.loads(path.read_text())
    facts = section.get("machine") or {}
    section["notes"] = [
        *section.get("notes", []),
        f"Read from results/{path.name} (measured alone, {facts.get('date (UTC)', '?')} UTC, "
        f"git {facts.get('git')}, load average {facts.get('load average at start')} at start, "
        f"{facts.get('load average at end')} at end); not measured in this run. What the "
        f"figures say: results/{path.with_suffix('.md').name}.",
    ]
    return section


def cuda_image_results(results_dir: Path = RESULTS_DIR) -> Section:
    return read_alone(results_dir / "cuda-image.json")


def markdown(section: Section, machine: dict[str, object], command: str) -> str:
    from benchmarks.report import _table

    lines = [f"# {section['title']}", "", f"Written by `{command}`.", ""]
    lines += [f"- {k}: {v}" for k, v in machine.items()]
    lines.append("")
    if "skipped" in section:
        lines += [f"Skipped: {section['skipped']}", ""]
    if section.get("rows"):
        lines += [*_table(section["rows"]), ""]
    if "error" in section:
        lines += ["**FAILED:**", "", "```", str(section["error"]).strip(), "```", ""]
    lines += [f"- {n}" for n in section.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    from benchmarks.run import _load, machine

    facts = machine()
    section = bench_cuda_image(
        int(os.environ.get("BENCH_CUDA_COLD_REPEAT", "2")),
        int(os.environ.get("BENCH_CUDA_WARM_REPEAT", "2")),
        os.environ.get("BENCH_BASE", "envbuild-e2e/base:bookworm"),
        Path(os.environ.get("BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt")),
    )
    facts["load average at end"] = _load()
    section["machine"] = facts
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "cuda-image.json").write_text(
        json.dumps(section, indent=2, sort_keys=True) + "\n"
    )
    text = markdown(section, facts, "python -m benchmarks.cuda_image")
    (RESULTS_DIR / "cuda-image.md").write_text(text)
    print(text)
    sys.exit(1 if "error" in section else 0)


if __name__ == "__main__":
    main()

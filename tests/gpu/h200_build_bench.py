"""`envbuild image` of the GPU example beside a hand-written Dockerfile, on the H200, in one run
with samples interleaved: the time from the command to a tag, and what each stage takes.

envbuild: the framework-only request on a stand-in framework base (tests/gpu/make_torch_base.py,
this machine's torch), locked once, then `envbuild image --json` (build, smoke test in a
container on the GPU, tag on pass). Peer: benchmarks/peer/torch-gpu.Dockerfile FROM the same
base (a small training script added), `docker build` (classic builder, as docker-py builds
envbuild's Dockerfile), then `docker run --device nvidia.com/gpu=all` (CDI, as envbuild's smoke
container gets its GPU) of that script: the hand-rolled check before trusting an image.

Cold: each round on a base of its own (a LABEL on top: same files, new image id, so no build
cache holds anything for either side; benchmarks/build.py _fresh_base), who goes first rotating.
Warm: the last round's base again, nothing changed, interleaved. A third side in each cold
round, the same request with `[smoke] tier = 1`, shows what the training part of the smoke
test costs (no goal).

Run by tests/gpu/h200_build_bench.sh once the engine is up (DOCKER_HOST), with the Python that
holds the machine's torch. Writes $OUT/h200-build-bench.json (samples, medians, ratios, stages,
machine facts), which benchmarks/h200.py puts in RESULTS.md. Settings: BENCH_PROFILE=1 (a profile, `profile`), BENCH_COLD (rounds,
default 3), BENCH_WARM (default 5), BASE_TAG (an existing base to use instead of making one).
Without a GPU (no nvidia-smi) both sides run on the CPU: a dry run.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.build import _fresh_base
from benchmarks.common import row
from tests.gpu import h200_image_e2e as e2e

REPO = e2e.REPO
OUT = e2e.OUT
WORK = Path(os.environ.get("E2E_WORK", "/tmp/h200-bench"))
BASE = os.environ.get("BASE_TAG") or "h200-standin/torch-bench:1"
TAG = "envbuild-h200-bench/torch-base:bench"
TAG1 = "envbuild-h200-bench/torch-base-tier1:bench"
PEER_TAG = "envbuild-h200-bench/peer:bench"
PEER_NAME = "hand-written Dockerfile: `docker build` + `docker run` of a GPU training check"
FULL_NAME = (
    "hand-written Dockerfile: `docker build` + `docker run` of a check of the same things "
    "(benchmarks/peer/gpu_full_check.py)"
)
FULL = ("python3", "/opt/check/gpu_full_check.py")
COLD = int(os.environ.get("BENCH_COLD", "3"))
WARM = int(os.environ.get("BENCH_WARM", "5"))
Sample = dict[str, Any]
# The torch payload's tier 2 parts (envbuild/payload/smoke_torch.py timings).
TIER2_PARTS = ("train_s", "conv_s", "sdpa_s", "repeat_s", "perf_s", "topology_s")


def envbuild_image(folder: Path, base: str, tag: str) -> Sample:
    """One `envbuild image --json`: its wall time and the stages it reports."""
    step = e2e.envbuild("image", str(folder), "--base-image", base, "--tag", tag, "--json")
    doc = step.get("json") or {}
    if step["rc"] != 0:
        raise RuntimeError(f"envbuild image exited {step['rc']}: {step['stderr_tail']}")
    parts = [doc.get(k) or 0.0 for k in ("build_s", "smoke_s", "tag_s")]
    reused = bool(doc.get("smoke_reused") or doc.get("unchanged"))
    return {
        "wall_s": step["seconds"],
        "build_s": doc.get("build_s"),
        "smoke_s": doc.get("smoke_s"),
        "tag_s": doc.get("tag_s"),
        # CLI start, the lock check, the build context (render), the GPU pre-flight.
        "other_s": round(step["seconds"] - sum(parts), 3),
        # The payload's own split, only when it ran in this run (an earlier pass reused or an
        # unchanged tag reports the earlier run's).
        "payload": None if reused else (doc.get("smoke") or {}).get("timings"),
        "smoke_summary": doc.get("smoke_summary"),
        "smoke_reused": bool(doc.get("smoke_reused")),
        "unchanged": bool(doc.get("unchanged")),
        # Each step's seconds (`steps_s`); the wall time less their sum is the CLI's start.
        "steps": doc.get("steps_s"),
        "cli_start_s": round(step["seconds"] - sum((doc.get("steps_s") or {}).values()), 3),
    }


def peer(ctx: Path, base: str, gpu_args: list[str], check: tuple[str, ...] = ()) -> Sample:
    """`docker build` of the hand-written Dockerfile, then its check run with the GPU: the
    toy check by default, or `check` (the full check, benchmarks/peer/gpu_full_check.py,
    with PEER_TIER in `gpu_args`)."""
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    started = time.monotonic()
    built = subprocess.run(
        ["docker", "build", "-q", "-t", PEER_TAG, "--build-arg", f"BASE={base}", str(ctx)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    build_s = time.monotonic() - started
    if built.returncode != 0:
        raise RuntimeError(f"peer docker build exited {built.returncode}: {built.stderr[-2000:]}")
    ran = subprocess.run(
        ["docker", "run", "--rm", *gpu_args, PEER_TAG, *check],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    if ran.returncode != 0:
        raise RuntimeError(f"peer check exited {ran.returncode}: {ran.stderr[-2000:]}")
    lines = ran.stdout.strip().splitlines()
    return {
        "wall_s": round(wall, 3),
        "build_s": round(build_s, 3),
        "run_s": round(wall - build_s, 3),
        "check": lines[:1],
        # The check's own split (its last line): import, model to the GPU, training.
        "payload": last_json(lines),
    }


def last_json(lines: list[str]) -> dict[str, Any] | None:
    """The last line of a tail that is a JSON object (a warning may follow it)."""
    for line in reversed(lines):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def probes(gpu_args: list[str]) -> dict[str, Any]:
    """Where a container's seconds go on this machine, apart from either side's work: a bare
    container, one that only imports torch with the GPU attached, and the peer's check on the
    host (no container), each twice."""
    check = str(REPO / "benchmarks/peer/gpu_train_check.py")
    argvs = {
        "container_python_pass": ["docker", "run", "--rm", BASE, "python3", "-c", "pass"],
        "container_import_torch_gpu": [
            *("docker", "run", "--rm", *gpu_args, BASE, "python3", "-c", "import torch"),
        ],
        "host_check": [sys.executable, check],
    }
    probe = "/probe/cuda_startup_probe.py"
    mount = ["-v", f"{REPO / 'tests/gpu'}:/probe:ro"]
    for mode in ("serial", "early"):
        flag = ["--early"] if mode == "early" else []
        argvs[f"startup_host_{mode}"] = [
            sys.executable,
            str(REPO / "tests/gpu/cuda_startup_probe.py"),
            *flag,
        ]
        argvs[f"startup_container_{mode}"] = [
            *("docker", "run", "--rm", *gpu_args, *mount, BASE, "python3", probe, *flag)
        ]
    out: dict[str, Any] = {}
    for name, argv in argvs.items():
        runs = []
        for _ in range(2):
            step = e2e.run(argv, timeout=300)
            runs.append({"rc": step["rc"], "seconds": step["seconds"]})
            if name == "host_check" or name.startswith("startup_"):
                # A stdout that is one JSON document is in step["json"] (its tail is empty).
                runs[-1]["split"] = step.get("json") or last_json(step["stdout_tail"])
        out[name] = runs
    if shutil.which("nvidia-smi"):
        smi = e2e.run(["nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader"])
        out["persistence_mode"] = smi["stdout_tail"] if smi["rc"] == 0 else None
    return out


def medians(samples: list[Sample]) -> dict[str, Any]:
    """The median of each numeric stage (the payload's own timings included)."""
    out: dict[str, Any] = {}
    keys = {k for s in samples for k, v in s.items() if isinstance(v, (int, float))}
    for key in sorted(keys - {"smoke_reused", "unchanged"}):
        values = [s[key] for s in samples if isinstance(s.get(key), (int, float))]
        out[key] = round(statistics.median(values), 3)
    for part in ("payload", "steps"):
        inner = [s[part] for s in samples if isinstance(s.get(part), dict)]
        if inner:
            out[part] = medians(inner)
    return out


def stage_note(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    """What each side spent its time on (medians), for the report's note column."""

    def s(v: Any) -> str:
        return f"{v:.2f} s" if isinstance(v, (int, float)) else "-"

    text = (
        f"envbuild: build {s(ours.get('build_s'))} + smoke {s(ours.get('smoke_s'))} + tag "
        f"{s(ours.get('tag_s'))} + the rest {s(ours.get('other_s'))} (CLI start, lock check, "
        "render, pre-flight)"
    )
    pay = ours.get("payload") or {}
    if pay:
        text += (
            f"; payload import {s(pay.get('import_s'))}, tier 1 {s(pay.get('tier1_s'))}, "
            f"tier 2 {s(pay.get('tier2_s'))}"
        )
        split = [f"{k[:-2]} {s(pay[k])}" for k in TIER2_PARTS if k in pay]
        text += f" ({', '.join(split)})" if split else ""
    text += f"; peer: build {s(theirs.get('build_s'))} + run {s(theirs.get('run_s'))}"
    check = theirs.get("payload") or {}
    if check:
        text += (
            f" (its script: import {s(check.get('import_s'))}, model to the GPU "
            f"{s(check.get('to_device_s'))}, 30 steps {s(check.get('train_s'))})"
        )
    return text


def make_base() -> dict[str, Any]:
    if os.environ.get("BASE_TAG") and e2e.tag_exists(BASE):
        return {"tag": BASE, "reused": True}
    step = e2e.run([sys.executable, str(REPO / "tests/gpu/make_torch_base.py"), BASE], timeout=900)
    if step["rc"] != 0:
        raise RuntimeError(f"make_torch_base.py exited {step['rc']}: {step['stderr_tail']}")
    doc = step.get("json") or {}
    keep = ("tag", "image_id", "bytes", "entries", "python", "byte_compile")
    return {"seconds": step["seconds"], **{k: doc.get(k) for k in keep}}


def requests(device: dict[str, str] | None) -> tuple[Path, Path, dict[str, Any]]:
    """The request at tier 2 (the default) and at tier 1, each locked once (timed)."""
    tier2, tier1 = WORK / "torch-base", WORK / "torch-base-tier1"
    e2e.write_request(tier2, device, base=BASE)
    e2e.write_request(tier1, device, base=BASE)
    text = (tier1 / "envbuild.toml").read_text()
    (tier1 / "envbuild.toml").write_text(text.replace("tier = 2", "tier = 1"))
    locks: dict[str, Any] = {}
    for name, folder in (("tier2", tier2), ("tier1", tier1)):
        step = e2e.envbuild("lock", str(folder))
        if step["rc"] != 0:
            raise RuntimeError(f"envbuild lock exited {step['rc']}: {step['stderr_tail']}")
        locks[name] = step["seconds"]
    return tier2, tier1, locks


def cold_rounds(sides: dict[str, Callable[[str], Sample]]) -> dict[str, list[Sample]]:
    """COLD rounds, each on a fresh base id, who goes first rotating; the last round's base
    stays for the warm samples."""
    out: dict[str, list[Sample]] = {k: [] for k in sides}
    names = list(sides)
    for k in range(COLD):
        base = f"{BASE}-bench{k}"
        _fresh_base(BASE, base, f"{os.getpid()}-{time.time_ns()}-{k}")
        order = names[k % len(names) :] + names[: k % len(names)]
        for name in order:
            e2e.log(f"cold {k + 1}/{COLD}: {name}")
            out[name].append(sides[name](base))
        if k < COLD - 1:
            for tag in (TAG, TAG1, PEER_TAG, base):
                e2e.docker("image", "rm", tag)
    return out


def warm_rounds(sides: dict[str, Callable[[str], Sample]], base: str) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {k: [] for k in sides}
    for k in range(WARM):
        names = list(sides) if k % 2 == 0 else list(reversed(sides))
        for name in names:
            e2e.log(f"warm {k + 1}/{WARM}: {name}")
            out[name].append(sides[name](base))
    return out


def profile(folder: Path, base: str, tag: str) -> None:
    """BENCH_PROFILE=1: one more warm `envbuild image` under cProfile and `-X importtime`, to
    see where envbuild's fixed cost goes on this machine: $OUT/h200-warm.prof (read it with
    `python -m pstats`) and $OUT/h200-warm-importtime.txt, plus the interpreter's own start."""
    code = (
        "import cProfile, sys; sys.argv[0] = 'envbuild'; "
        "cProfile.run('from envbuild.cli.main import main; main()', sys.argv.pop(1))"
    )
    argv = [str(OUT / "h200-warm.prof"), "image", str(folder), "--base-image", base]
    argv += ["--tag", tag, "--json"]
    with (OUT / "h200-warm-importtime.txt").open("w") as err:
        subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code, *argv],
            stdout=subprocess.DEVNULL,
            stderr=err,
            check=False,
        )
    for what in ("pass", "import docker", "import jinja2", "import torch"):
        e2e.log(f"python -c {what!r}: {e2e.run([sys.executable, '-c', what])['seconds']} s")


def machine(device: dict[str, str] | None, base: dict[str, Any]) -> dict[str, Any]:
    info = e2e.docker("info", "--format", "{{json .}}")["json"] or {}
    torch = e2e.run([sys.executable, "-c", "import torch; print(torch.__version__)"])
    return {
        "gpu": device,
        "engine": info.get("ServerVersion"),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": (torch["stdout_tail"] or ["?"])[-1],
        "base": base,
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }


def rows(samples: dict[str, list[Sample]], stages: dict[str, Any]) -> list[dict[str, Any]]:
    def wall(key: str) -> list[float]:
        return [float(s["wall_s"]) for s in samples[key]]

    cold_note = stage_note(stages["envbuild_cold"], stages["peer_full_cold"])
    warm_note = stage_note(stages["envbuild_warm"], stages["peer_warm"])
    unchanged = sum(1 for s in samples["envbuild_warm"] if s["unchanged"])
    warm_note += f"; envbuild found the tag up to date in {unchanged} of {WARM} runs"
    tier1_note = stage_note(stages["envbuild_cold_tier1"], stages["peer_tier1_cold"])
    toy_note = stage_note(stages["envbuild_cold"], stages["peer_cold"])
    return [
        row(
            "H200 cold build to a tag (envbuild: build + smoke tier 2 on the GPU + tag; the "
            "peer checks the same things)",
            wall("envbuild_cold"),
            wall("peer_full_cold"),
            peer_name=FULL_NAME,
            note=cold_note,
            goal=1.0,
        ),
        row(
            "H200 cold build, `[smoke] tier = 1` (the peer checks the same: GPU, versions, "
            "archs, memory)",
            wall("envbuild_cold_tier1"),
            wall("peer_tier1_cold"),
            peer_name=FULL_NAME + " with PEER_TIER=1",
            note=tier1_note,
            goal=1.0,
        ),
        row(
            "H200 warm rebuild, nothing changed",
            wall("envbuild_warm"),
            wall("peer_warm"),
            peer_name=FULL_NAME,
            note=warm_note,
            goal=1.3,
        ),
        row(
            "H200 cold build, tier 2, beside the toy check (30 steps of a small MLP, nothing "
            "else checked)",
            wall("envbuild_cold"),
            wall("peer_cold"),
            peer_name=PEER_NAME,
            note=toy_note,
        ),
    ]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    # A pass store of this run's own: no earlier pass on this machine is reused.
    os.environ["ENVBUILD_CACHE_DIR"] = str(WORK / "envbuild-cache")
    device = e2e.gpu()
    e2e.log(f"GPU: {device}; base {BASE}")
    result: dict[str, Any] = {"settings": {"cold_rounds": COLD, "warm_samples": WARM}}
    try:
        base = make_base()
        result["machine"] = machine(device, base)
        e2e.log(f"base: {base}")
        tier2, tier1, locks = requests(device)
        result["setup"] = {"base_s": base.get("seconds"), "lock_s": locks}
        ctx = WORK / "peer"
        ctx.mkdir()
        shutil.copy(REPO / "benchmarks/peer/torch-gpu.Dockerfile", ctx / "Dockerfile")
        for script in ("gpu_train_check.py", "gpu_full_check.py"):
            shutil.copy(REPO / "benchmarks/peer" / script, ctx / script)
        gpu_args = ["--device", "nvidia.com/gpu=all"] if device else ["-e", "PEER_ALLOW_CPU=1"]
        result["probes"] = probes(gpu_args)
        cold = cold_rounds(
            {
                "envbuild_cold": lambda b: envbuild_image(tier2, b, TAG),
                "peer_cold": lambda b: peer(ctx, b, gpu_args),
                "envbuild_cold_tier1": lambda b: envbuild_image(tier1, b, TAG1),
                "peer_full_cold": lambda b: peer(ctx, b, [*gpu_args, "-e", "PEER_TIER=2"], FULL),
                "peer_tier1_cold": lambda b: peer(ctx, b, [*gpu_args, "-e", "PEER_TIER=1"], FULL),
            }
        )
        warm = warm_rounds(
            {
                "envbuild_warm": lambda b: envbuild_image(tier2, b, TAG),
                "peer_warm": lambda b: peer(ctx, b, [*gpu_args, "-e", "PEER_TIER=2"], FULL),
            },
            f"{BASE}-bench{COLD - 1}",
        )
        if os.environ.get("BENCH_PROFILE") == "1":
            profile(tier2, f"{BASE}-bench{COLD - 1}", TAG)
        samples = {**cold, **warm}
        result["samples"] = samples
        result["stages"] = {k: medians(v) for k, v in samples.items()}
        result["rows"] = rows(samples, result["stages"])
        result["ok"] = True
    except Exception as err:  # the file still says how far it came
        result["ok"] = False
        result["error"] = f"{type(err).__name__}: {err}"[-3000:]
    finally:
        for tag in (TAG, TAG1, PEER_TAG, f"{BASE}-bench{COLD - 1}"):
            e2e.docker("image", "rm", tag)
    (OUT / "h200-build-bench.json").write_text(json.dumps(result, indent=2) + "\n")
    for r in result.get("rows", []):
        e2e.log(f"{r['what']}: {r['envbuild']} s vs {r['peer']} s = {r['ratio']}")
    e2e.log(f"ok={result['ok']} {result.get('error', '')}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""`make bench`: speed, size and time-to-verdict, side by side with peers, in one run.

Writes benchmarks/RESULTS.md and benchmarks/results/latest.json. Every figure is a median over
repeated runs, reported with the peer measured in the same run and their ratio. Nothing here is
asserted: benchmarks report, tests check behaviour.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ENVBUILD = str(BIN / "envbuild")
RESULTS_DIR = ROOT / "benchmarks" / "results"


def _median_time(fn: Callable[[], object], repeat: int) -> tuple[float, list[float]]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), samples


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def machine() -> dict[str, Any]:
    def version_of(cmd: list[str]) -> str:
        try:
            out = _run(cmd)
        except FileNotFoundError:
            return "not found"
        return (out.stdout or out.stderr).strip().splitlines()[0] if out.returncode == 0 else "n/a"

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "uv": version_of([str(BIN / "uv"), "--version"]),
        "docker": version_of(["docker", "version", "--format", "{{.Server.Version}}"]),
        "envbuild": version_of([ENVBUILD, "--version"]),
    }


# --- 1. CLI start ---------------------------------------------------------------------------


def bench_cli_start(repeat: int) -> dict[str, Any]:
    baseline, _ = _median_time(lambda: _run([sys.executable, "-c", "pass"]), repeat)
    help_t, _ = _median_time(lambda: _run([ENVBUILD, "--help"]), repeat)
    resolve_cmd = [
        ENVBUILD,
        "resolve",
        "--json",
        "--gpu",
        "H100",
        "--gpu",
        "L4",
        "--driver",
        "570.124.06",
    ]
    resolve_t, _ = _median_time(lambda: _run(resolve_cmd), repeat)
    return {
        "python -c pass (s)": baseline,
        "envbuild --help (s)": help_t,
        "envbuild resolve --json (s)": resolve_t,
        "ratio --help / python": help_t / baseline,
        "ratio resolve / python": resolve_t / baseline,
    }


# --- 2. resolve ------------------------------------------------------------------------------


def bench_resolve(repeat: int) -> dict[str, Any]:
    from envbuild.matrix import load_matrix
    from envbuild.models import Host, HostGpu, Request, Targets
    from envbuild.resolver import resolve

    matrix = load_matrix()
    one = Request(framework="torch", targets=Targets(gpus=("H100", "L4"), driver="570.124.06"))
    single, _ = _median_time(lambda: resolve(one, matrix), repeat)

    rng = random.Random(7)
    archs = [a for a in matrix.archs if a.gpus]
    drivers = sorted({c.toolkit_driver for c in matrix.cuda})
    hosts = [
        Host(
            driver=rng.choice(drivers),
            gpus=(HostGpu(name=(a := rng.choice(archs)).gpus[0], cc=a.cc),),
            name=f"host{i}",
        )
        for i in range(100)
    ]
    fleet_req = Request(framework="torch")
    fleet, _ = _median_time(lambda: resolve(fleet_req, matrix, hosts), repeat)

    # The whole matrix swept: every framework release x GPU x driver branch.
    branches = sorted({c.toolkit_driver for c in matrix.cuda})
    requests = [
        Request(
            framework=f"{rel.framework}=={rel.version}",
            targets=Targets(gpus=(arch.sm,), driver=drv),
        )
        for rel in matrix.releases
        for arch in matrix.archs
        for drv in branches
    ]
    t0 = time.perf_counter()
    for req in requests:
        resolve(req, matrix)
    sweep = time.perf_counter() - t0
    return {
        "one request (ms)": single * 1000,
        "fleet of 100 hosts (ms)": fleet * 1000,
        "matrix sweep requests": len(requests),
        "matrix sweep (s)": sweep,
        "matrix sweep (requests/s)": len(requests) / sweep,
    }


# --- 3. lock vs uv pip compile -----------------------------------------------------------------


def bench_lock(repeat: int, examples: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in examples:
        src = ROOT / "images" / name
        if not (src / "envbuild.lock").exists():
            out[name] = "skipped: no lock"
            continue
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / name
            shutil.copytree(src, work)
            cache = Path(tmp) / "uv-cache"
            env = {**os.environ, "UV_CACHE_DIR": str(cache)}

            def envbuild_lock(work: Path = work, env: dict[str, str] = env) -> None:
                (work / "envbuild.lock").unlink(missing_ok=True)
                res = _run([ENVBUILD, "lock", str(work)], env=env)
                if res.returncode != 0:
                    raise RuntimeError(res.stderr)

            t0 = time.perf_counter()
            envbuild_lock()
            cold = time.perf_counter() - t0
            warm, _ = _median_time(envbuild_lock, repeat)
            check, _ = _median_time(
                lambda work=work: _run([ENVBUILD, "lock", "--check", str(work)]), repeat
            )
            peer = _uv_compile_cmd(work)
            if peer is None:
                out[name] = {"envbuild cold (s)": cold, "envbuild warm (s)": warm}
                continue
            cache2 = Path(tmp) / "uv-cache-peer"
            env2 = {**os.environ, "UV_CACHE_DIR": str(cache2)}
            t0 = time.perf_counter()
            _run(peer, env=env2)
            peer_cold = time.perf_counter() - t0
            peer_warm, _ = _median_time(lambda peer=peer, env2=env2: _run(peer, env=env2), repeat)
            out[name] = {
                "envbuild lock cold (s)": cold,
                "uv pip compile cold (s)": peer_cold,
                "envbuild lock warm (s)": warm,
                "uv pip compile warm (s)": peer_warm,
                "ratio warm envbuild / uv": warm / peer_warm,
                "envbuild lock --check (s)": check,
            }
    return out


def _uv_compile_cmd(image_dir: Path) -> list[str] | None:
    """The same requirements and target platform as envbuild's lock, for uv alone."""
    try:
        from envbuild import pydeps
    except ImportError:
        return None
    builder = getattr(pydeps, "peer_compile_command", None)
    if builder is None:
        return None
    cmd: list[str] = builder(image_dir)
    return cmd


# --- 4. build (real engine) -----------------------------------------------------------------


def bench_build(base_image: str) -> dict[str, Any]:
    if _run(["docker", "info"]).returncode != 0:
        return {"skipped": "no Docker engine answers on this machine"}
    image = ROOT / "images" / "torch-cpu"
    if not (image / "envbuild.lock").exists():
        return {"skipped": "images/torch-cpu has no lock"}
    res: dict[str, Any] = {}
    tag = "envbuild-bench/torch-cpu:bench"
    cmd = [ENVBUILD, "image", str(image), "--base-image", base_image, "--tag", tag, "--allow-cpu"]
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if ca.exists():
        cmd += ["--ca-cert", str(ca)]
    _run(["docker", "image", "rm", "-f", tag])
    _run(["docker", "builder", "prune", "-af"])
    for label in ("cold build+smoke (s)", "warm rebuild, nothing changed (s)"):
        t0 = time.perf_counter()
        r = _run(cmd)
        res[label] = time.perf_counter() - t0
        if r.returncode != 0:
            res["error"] = r.stderr[-2000:]
            return res
    # A change to a late layer: the smoke settings live in the plan, after the dependencies.
    res["late-layer change rebuild (s)"] = _late_layer_rebuild(cmd)
    inspect = _run(["docker", "image", "inspect", tag, "--format", "{{.Size}}"])
    if inspect.returncode == 0:
        size = int(inspect.stdout.strip())
        res["image size (MB)"] = size / 1e6
        base = _run(["docker", "image", "inspect", base_image, "--format", "{{.Size}}"])
        installed = _run(["docker", "run", "--rm", "--entrypoint", "du", tag, "-sb", "/opt/venv"])
        if base.returncode == 0 and installed.returncode == 0:
            parts = int(base.stdout.strip()) + int(installed.stdout.split()[0])
            res["base + venv content (MB)"] = parts / 1e6
            res["overhead ratio image / content"] = size / parts
    res["duplicate layer content"] = _duplicate_layers(tag)
    return res


def _late_layer_rebuild(cmd: list[str]) -> float:
    env = {**os.environ, "ENVBUILD_BENCH_TOUCH": str(time.time())}
    t0 = time.perf_counter()
    _run([*cmd, "--smoke-timeout", "599"], env=env)
    return time.perf_counter() - t0


def _duplicate_layers(tag: str) -> str:
    hist = _run(["docker", "history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}", tag])
    if hist.returncode != 0:
        return "n/a"
    lines = [ln for ln in hist.stdout.splitlines() if ln.strip()]
    cuda_layers = [ln for ln in lines if "cuda" in ln.lower() and not ln.startswith("0B")]
    return f"{len(lines)} layers; {len(cuda_layers)} non-empty layers mention CUDA"


# --- 5. smoke on the H200 (committed results) ------------------------------------------------


def smoke_results() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(RESULTS_DIR.glob("h200-*.json")):
        try:
            out[path.name] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out


# --- report -----------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_report(data: dict[str, Any]) -> str:
    lines = [
        "# envbuild benchmarks",
        "",
        "Generated by `make bench`; medians over repeated runs.",
        "",
    ]
    lines += ["## Machine", ""] + [f"- {k}: {_fmt(v)}" for k, v in data["machine"].items()] + [""]
    for section, title in (
        ("cli_start", "1. CLI start (vs a bare `python -c pass`)"),
        ("resolve", "2. Resolve (in process)"),
        ("lock", "3. Lock (vs `uv pip compile --generate-hashes`, same requirements and platform)"),
        ("build", "4. Build on the real engine (images/torch-cpu on the local base)"),
    ):
        lines += [f"## {title}", "", "| measurement | value |", "|---|---|"]
        value = data.get(section, {})
        for k, v in value.items():
            if isinstance(v, dict):
                for k2, v2 in v.items():
                    lines.append(f"| {k}: {k2} | {_fmt(v2)} |")
            else:
                lines.append(f"| {k} | {_fmt(v)} |")
        lines.append("")
    lines += [
        "## 5. Smoke on the H200",
        "",
        "See benchmarks/results/h200-smoke.md (measured there).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    repeat = int(os.environ.get("BENCH_REPEAT", "7"))
    data: dict[str, Any] = {"machine": machine()}
    data["cli_start"] = bench_cli_start(repeat)
    data["resolve"] = bench_resolve(repeat)
    data["lock"] = bench_lock(max(3, repeat // 2), ["torch-train", "torch-slim", "jax-train"])
    data["build"] = bench_build(os.environ.get("BENCH_BASE", "envbuild-e2e/base:bookworm"))
    data["smoke_h200"] = smoke_results()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "latest.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (ROOT / "benchmarks" / "RESULTS.md").write_text(write_report(data))
    print((ROOT / "benchmarks" / "RESULTS.md").read_text())


if __name__ == "__main__":
    main()

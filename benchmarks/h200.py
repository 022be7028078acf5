"""Sections 5 and 6 of `make bench`, read from the committed GPU runs rather than measured:
the smoke's time to verdict and throughput on the H200 (benchmarks/results/h200*-smoke-*.json)
and `envbuild image` of the GPU example beside a hand-written Dockerfile there
(benchmarks/results/h200-build-bench.json, from tests/gpu/h200_build_bench.sh)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, Section
from benchmarks.report import _fmt


def _baseline_for(gpu_name: str, baselines: Sequence[Any]) -> Any:
    best = None
    for b in baselines:
        if b.gpu.lower() in gpu_name.lower() and (best is None or len(b.gpu) > len(best.gpu)):
            best = b
    return best


def smoke_results(results_dir: Path = RESULTS_DIR) -> Section:
    """Time to verdict and figures from the payload engineer's committed GPU runs."""
    title = "5. Smoke on the H200 (committed GPU runs: benchmarks/results/h200*-smoke-*.json)"
    files = sorted(results_dir.glob("h200*-smoke-*.json"))
    if not files:
        return {
            "title": title,
            "pending": "PENDING: no benchmarks/results/h200*-smoke-*.json yet; `make bench` "
            "fills this section once the GPU runs are committed.",
        }
    from envbuild.matrix import load_matrix

    baselines = load_matrix().baselines
    runs: list[dict[str, Any]] = []
    for path in files:
        try:
            rep = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            runs.append({"file": path.name, "error": str(err)})
            continue
        runs.append(_smoke_run(path.name, rep, baselines))
    return {
        "title": title,
        "runs": runs,
        "notes": [
            "Measured by the payload engineer on the device machines (1 and 2 x H200, driver "
            "580.159.04, torch 2.11.0+cu130), one run per file; see "
            "benchmarks/results/h200-smoke.md for how. `total` is the payload's own time to "
            "verdict, `import torch` included; process start adds about 1 s (h200-*.log).",
            "The healthy baseline (matrix/baselines.toml) is the median of 10 readings from "
            "the same machines (h200-baseline.json), so fractions of it near 1.0 show the "
            "spread between runs, not an independent check.",
        ],
    }


def _smoke_run(name: str, rep: Mapping[str, Any], baselines: Sequence[Any]) -> dict[str, Any]:
    """One committed smoke report as a row of the section: its verdict, timings and figures,
    each figure beside the GPU's datasheet and healthy baseline."""
    timings = rep.get("timings", {})
    metrics = rep.get("metrics", {})
    gpus = rep.get("host", {}).get("gpus", [])
    gpu = gpus[0]["name"] if gpus else ""
    run: dict[str, Any] = {
        "file": name,
        "framework": rep.get("framework", ""),
        "device": rep.get("device", ""),
        "gpus": len(gpus),
        "tier": rep.get("tier"),
        "ok": rep.get("ok"),
        "checks": len(rep.get("checks", [])),
        "import_s": timings.get("import_s"),
        "tier1_s": timings.get("tier1_s"),
        "tier2_s": timings.get("tier2_s"),
        "total_s": timings.get("total_s"),
    }
    perf = metrics.get("perf") or (
        [{"bf16_tflops": metrics["bf16_tflops"], "mem_bw_tbs": metrics.get("mem_bw_tbs")}]
        if metrics.get("bf16_tflops") is not None
        else []
    )
    base = _baseline_for(gpu, baselines) if gpu else None
    run["figures"] = [_figure(p, metrics, base) for p in perf]
    run["baseline"] = (
        {
            "gpu": base.gpu,
            "bf16_tflops": base.bf16_tflops,
            "mem_bw_tbs": base.mem_bw_tbs,
            "datasheet_bf16_tflops": base.datasheet_bf16_tflops,
            "datasheet_mem_bw_tbs": base.datasheet_mem_bw_tbs,
            "confidence": base.confidence,
        }
        if base is not None
        else None
    )
    return run


def _figure(p: Mapping[str, Any], metrics: Mapping[str, Any], base: Any) -> dict[str, Any]:
    fig: dict[str, Any] = {
        "index": p.get("index", 0),
        # The fp16 path (pre-Ampere GPUs) reports its fp16 matmul under the same key.
        "dtype": p.get("matmul_dtype") or metrics.get("precision") or "bf16",
        "bf16_tflops": p.get("bf16_tflops"),
        "mem_bw_tbs": p.get("mem_bw_tbs"),
    }
    if base is not None:
        for key, ds, healthy in (
            ("bf16_tflops", base.datasheet_bf16_tflops, base.bf16_tflops),
            ("mem_bw_tbs", base.datasheet_mem_bw_tbs, base.mem_bw_tbs),
        ):
            v = p.get(key)
            if v is not None:
                fig[f"{key}_of_datasheet"] = v / ds if ds else None
                fig[f"{key}_of_baseline"] = v / healthy if healthy else None
    return fig


# --- 6. build on the H200 (committed result) -------------------------------------------------

H200_BUILD_FILE = "h200-build-bench.json"


def h200_build_results(results_dir: Path = RESULTS_DIR) -> Section:
    """`envbuild image` of the GPU example beside a hand-written Dockerfile on the H200: the
    committed result of tests/gpu/h200_build_bench.sh (the device machine has no engine of its
    own and reaches no registry, so `make bench` reads it rather than measuring it here)."""
    title = f"6. Build on the H200 (committed GPU run: benchmarks/results/{H200_BUILD_FILE})"
    path = results_dir / H200_BUILD_FILE
    if not path.exists():
        return {
            "title": title,
            "pending": f"PENDING: no benchmarks/results/{H200_BUILD_FILE} yet; run "
            "tests/gpu/h200_build_bench.sh on the H200 and commit its JSON.",
        }
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return {"title": title, "rows": [], "error": f"{path.name} unreadable: {err}"}
    out: Section = {"title": title, "rows": [r for r in doc.get("rows") or [] if "what" in r]}
    if not doc.get("ok", False):
        out["error"] = str(doc.get("error") or "the run did not finish")
    out["notes"] = _h200_build_notes(doc)
    return out


def _h200_build_notes(doc: Mapping[str, Any]) -> list[str]:
    m = doc.get("machine") or {}
    gpu = m.get("gpu") or {}
    base = m.get("base") or {}
    settings = doc.get("settings") or {}
    notes = [
        f"Measured {m.get('date_utc', '?')} UTC on {gpu.get('count', '?')} x "
        f"{gpu.get('name', '?')} "
        f"(driver {gpu.get('driver', '?')}, {m.get('cpus', '?')} CPUs), Docker "
        f"{m.get('engine', '?')} with CDI, no registry reachable; torch {m.get('torch', '?')} "
        f"in a stand-in framework base made of the machine's own torch "
        f"({_fmt((base.get('bytes') or 0) / 1e9)} GB, tests/gpu/make_torch_base.py).",
        f"Cold: {settings.get('cold_rounds', '?')} rounds, each on a base of its own (a LABEL on "
        "top: same files, new image id, so no build cache), who goes first rotating; warm: "
        f"{settings.get('warm_samples', '?')} samples interleaved on the last round's base, "
        "nothing changed. envbuild's time is the whole `envbuild image --json` (the lock made "
        "once before); the peer's is `docker build` (classic builder, as envbuild's) plus "
        "`docker run --device nvidia.com/gpu=all` of its check "
        "(benchmarks/peer/torch-gpu.Dockerfile): benchmarks/peer/gpu_full_check.py, the same "
        "checks as the smoke's tier 2 (PEER_TIER=1: tier 1's), or the toy "
        "benchmarks/peer/gpu_train_check.py in the reference row. The three peer sides of a "
        "round share one Dockerfile, so the second and third find the first's build cached "
        "(the peer's build is 20 to 50 ms either way).",
    ]
    notes.append(_byte_code_note(base))
    setup = doc.get("setup") or {}
    locks = setup.get("lock_s") or {}
    if locks:
        each = ", ".join(f"{k} {_fmt(v, 's')}" for k, v in locks.items())
        notes.append(
            "Before the samples, once: base import "
            f"{_fmt(setup.get('base_s'), 's')}, `envbuild lock` (probes the base in a "
            f"container) {each}."
        )
    gap = _h200_cold_gap(doc.get("stages") or {}, doc.get("samples") or {})
    if gap:
        notes.append(gap)
    probes = doc.get("probes") or {}

    def first(key: str) -> Any:
        runs = probes.get(key) or []
        return runs[-1].get("seconds") if runs else None

    if probes:
        split = ((probes.get("host_check") or [{}])[-1].get("split")) or {}
        notes.append(
            "The machine's own costs, either side pays them: a bare container "
            f"{_fmt(first('container_python_pass'), 's')}; one that imports torch with the GPU "
            f"attached {_fmt(first('container_import_torch_gpu'), 's')}; the peer's check "
            f"on the host, no container, {_fmt(first('host_check'), 's')} (import "
            f"{_fmt(split.get('import_s'), 's')}, model to the GPU "
            f"{_fmt(split.get('to_device_s'), 's')}, 30 steps {_fmt(split.get('train_s'), 's')})."
        )
    return notes


def _byte_code_note(base: Mapping[str, Any]) -> str:
    """Whether the stand-in base carried byte-code: a base made before make_torch_base.py
    compiled the venv (2026-12-07) had none, and every container compiled torch from source."""
    done = base.get("byte_compile")
    if isinstance(done, Mapping) and done.get("pyc_files"):
        return (
            f"The stand-in base carries byte-code, as pip leaves an install ({done['pyc_files']} "
            ".pyc files, make_torch_base.py `byte_compile`)."
        )
    return (
        "**Caveat:** this run's stand-in base had no byte-code (it was made before "
        "make_torch_base.py compiled the venv; the device's venv has none and sets "
        "PYTHONDONTWRITEBYTECODE=1), so every container on both sides compiled torch and, at "
        "the first torch.optim use, torch._dynamo and sympy from source: about 10 s of each "
        "side's run that a pip-built image does not pay (results/h100-train-probe.md). The "
        "ratios above understate envbuild's own steps; rerun on a compiled base."
    )


def _h200_cold_gap(stages: Mapping[str, Any], samples: Mapping[str, Any]) -> str:
    """Where the cold difference between the two sides goes (medians of each stage)."""
    ours = stages.get("envbuild_cold") or {}
    theirs = stages.get("peer_full_cold") or stages.get("peer_cold") or {}
    keys = ("wall_s", "build_s", "other_s", "smoke_s", "tag_s")
    if not all(isinstance(ours.get(k), (int, float)) for k in keys) or not all(
        isinstance(theirs.get(k), (int, float)) for k in ("wall_s", "build_s", "run_s")
    ):
        return ""
    pay = ours.get("payload") or {}
    extra = sum(pay.get(k) or 0.0 for k in ("conv_s", "sdpa_s", "repeat_s", "perf_s"))
    own = ours["build_s"] + ours["tag_s"] + ours["other_s"]
    return (
        f"Where the cold difference ({ours['wall_s'] - theirs['wall_s']:+.1f} s) goes, medians: "
        f"envbuild's own steps (build, tag and the rest) {_fmt(own, 's')} "
        f"against the peer's build {_fmt(theirs['build_s'], 's')}; the smoke container "
        f"{_fmt(ours['smoke_s'], 's')} against the peer's `docker run` "
        f"{_fmt(theirs['run_s'], 's')}, "
        f"of which the smoke's tier 1 {_fmt(pay.get('tier1_s'), 's')} and its tier 2 checks "
        f"beyond training (conv, sdpa, matmul repeat, throughput) {_fmt(extra, 's')}."
        + _steps_note(samples.get("envbuild_cold") or [])
    )


def _steps_note(runs: Sequence[Any]) -> str:
    """envbuild's own steps (`steps_s` of `image --json`) besides build and smoke, and its
    CLI start (the wall time less the steps), medians of the cold runs."""
    seen = [
        r["steps"] for r in runs if isinstance(r, Mapping) and isinstance(r.get("steps"), Mapping)
    ]
    names = {k for steps in seen for k in steps} - {"build", "smoke"}
    own = {k: statistics.median(float(s.get(k, 0.0)) for s in seen) for k in names}
    starts = [r["cli_start_s"] for r in runs if isinstance(r, Mapping) and "cli_start_s" in r]
    if starts:
        own["CLI start"] = statistics.median(float(v) for v in starts)
    own = {k: v for k, v in own.items() if v >= 0.005}
    each = ", ".join(f"{k} {_fmt(v, 's')}" for k, v in sorted(own.items(), key=lambda x: -x[1]))
    return f" envbuild's steps beside build and smoke (`steps_s`): {each}." if each else ""

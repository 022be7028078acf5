"""`make bench`: speed, size and time-to-verdict, side by side with peers, in one run.

Writes benchmarks/RESULTS.md and benchmarks/results/latest.json. Each figure is a median over
repeated runs (n is in the table), with the peer measured in the same run, interleaved sample by
sample so both see the same machine load, and the ratio envbuild / peer. Nothing here is
asserted: benchmarks report, tests check behaviour.

This module is the entry point (`python -m benchmarks.run`, `--report-only`) and the machine
facts; each section has its module: cli_start.py (1), resolving.py (2), lock.py (3), build.py
and layers.py (4), h200.py (5 and 6, read from committed GPU runs), fleet.py (7), scale.py (8),
cuda_image.py (9; `python -m benchmarks.cuda_image` runs it alone), code_change.py (10; the
same with `python -m benchmarks.code_change`);
report.py writes RESULTS.md
and common.py holds what they share.

Settings (environment): BENCH_REPEAT (warm samples, default 7), BENCH_COLD_REPEAT (cold lock
samples, default 3), BENCH_BUILD_REPEAT (warm rebuild samples, default 3),
BENCH_COLD_BUILD_REPEAT (cold build pairs, default 1, who goes first alternates), BENCH_LOCK_EXAMPLES
(comma list, default every images/* folder), BENCH_BASE (local base image, default
envbuild-e2e/base:bookworm from `tests/e2e.sh prepare`), BENCH_WHEELS (default /opt/wheels),
BENCH_CA_CERT, BENCH_CONTEXT (one line about the run shown with the machine: what else was
running), BENCH_SKIP (comma list of sections: cli,resolve,lock,build,cuda,change,fleet,scale; a
skipped cuda or change section is read from results/cuda-image.json or code-change.json), BENCH_CUDA_COLD_REPEAT and BENCH_CUDA_WARM_REPEAT
(section 9, default 2 each),
BENCH_CHANGE_REPEAT (section 10, default 3), BENCH_SCALE_REPEAT
(samples per size of section 8, default 3), BENCH_KEEP_IMAGES=1.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.build import bench_build
from benchmarks.cli_start import bench_cli_start
from benchmarks.code_change import bench_code_change, code_change_results
from benchmarks.common import ENVBUILD, RESULTS_DIR, ROOT, UV, Section, _log, _run
from benchmarks.cuda_image import bench_cuda_image, cuda_image_results
from benchmarks.fleet import bench_fleet
from benchmarks.h200 import h200_build_results, smoke_results
from benchmarks.lock import bench_lock
from benchmarks.report import write_report
from benchmarks.resolving import bench_resolve
from benchmarks.scale import bench_scale

# --- machine ---------------------------------------------------------------------------------


def _first_line(cmd: Sequence[str]) -> str:
    try:
        out = _run(cmd)
    except OSError:
        return "not found"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if out.returncode == 0 and text else "n/a"


def _proc_field(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "n/a"


def machine() -> dict[str, Any]:
    commit = _first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = _run(["git", "-C", str(ROOT), "status", "--porcelain"]).stdout.strip() != ""
    return {
        "date (UTC)": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpu": _proc_field("/proc/cpuinfo", "model name"),
        "cpus": os.cpu_count(),
        "memory": _proc_field("/proc/meminfo", "MemTotal"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "envbuild": _first_line([ENVBUILD, "--version"]),
        "git": f"{commit}{' + uncommitted changes' if dirty else ''}",
        "uv": _first_line([UV, "--version"]),
        "docker": _first_line(["docker", "version", "--format", "{{.Server.Version}}"]),
        "load average at start": _load(),
        **({"context": os.environ["BENCH_CONTEXT"]} if os.environ.get("BENCH_CONTEXT") else {}),
    }


def _load() -> str:
    """Other work on the machine skews timings; the report shows how busy it was."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def report_only() -> None:
    """`python -m benchmarks.run --report-only`: re-read results/latest.json, refresh the H200
    section from the committed GPU files, rewrite RESULTS.md; measures nothing."""
    data = json.loads((RESULTS_DIR / "latest.json").read_text())
    data["smoke_h200"] = smoke_results()
    data["h200_build"] = h200_build_results()
    if "cuda_image" not in data:  # measured alone (python -m benchmarks.cuda_image)
        data["cuda_image"] = cuda_image_results()
    if "code_change" not in data:  # measured alone (python -m benchmarks.code_change)
        data["code_change"] = code_change_results()
    _write_atomic(RESULTS_DIR / "latest.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
    _write_atomic(ROOT / "benchmarks" / "RESULTS.md", write_report(data))


def _guarded(title: str, measure: Callable[[], Section]) -> Section:
    """A section, or its failure in the report: the other sections are still measured."""
    try:
        return measure()
    except Exception as err:
        return {"title": title, "rows": [], "error": f"{type(err).__name__}: {err}"}


def main() -> None:
    if "--report-only" in sys.argv[1:]:
        report_only()
        return
    repeat = int(os.environ.get("BENCH_REPEAT", "7"))
    cold_repeat = int(os.environ.get("BENCH_COLD_REPEAT", "3"))
    build_repeat = int(os.environ.get("BENCH_BUILD_REPEAT", "3"))
    cold_build_repeat = int(os.environ.get("BENCH_COLD_BUILD_REPEAT", "1"))
    skip = set(filter(None, os.environ.get("BENCH_SKIP", "").split(",")))
    examples = [e for e in os.environ.get("BENCH_LOCK_EXAMPLES", "").split(",") if e] or sorted(
        p.parent.name for p in (ROOT / "images").glob("*/envbuild.toml")
    )
    data: dict[str, Any] = {
        "machine": machine(),
        "settings": {
            "BENCH_REPEAT": repeat,
            "BENCH_COLD_REPEAT": cold_repeat,
            "BENCH_BUILD_REPEAT": build_repeat,
            "BENCH_COLD_BUILD_REPEAT": cold_build_repeat,
        },
    }
    if "cli" not in skip:
        _log("cli start")
        data["cli_start"] = _guarded("1. CLI start", lambda: bench_cli_start(repeat))
    if "resolve" not in skip:
        _log("resolve")
        data["resolve"] = _guarded("2. Resolve", lambda: bench_resolve(repeat))
    if "lock" not in skip:
        data["lock"] = bench_lock(repeat, cold_repeat, examples)
    if "build" not in skip:
        data["build"] = bench_build(
            build_repeat,
            os.environ.get("BENCH_BASE", "envbuild-e2e/base:bookworm"),
            Path(os.environ.get("BENCH_WHEELS", "/opt/wheels")),
            Path(os.environ.get("BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt")),
            cold_build_repeat,
        )
    if "cuda" not in skip:
        data["cuda_image"] = _guarded(
            "9. CUDA image build",
            lambda: bench_cuda_image(
                int(os.environ.get("BENCH_CUDA_COLD_REPEAT", "2")),
                int(os.environ.get("BENCH_CUDA_WARM_REPEAT", "2")),
                os.environ.get("BENCH_BASE", "envbuild-e2e/base:bookworm"),
                Path(os.environ.get("BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt")),
            ),
        )
    else:
        data["cuda_image"] = cuda_image_results()
    if "change" not in skip:
        data["code_change"] = _guarded(
            "10. Code change",
            lambda: bench_code_change(
                int(os.environ.get("BENCH_CHANGE_REPEAT", "3")),
                os.environ.get("BENCH_BASE", "envbuild-e2e/base:bookworm"),
                Path(os.environ.get("BENCH_WHEELS", "/opt/wheels")),
                Path(os.environ.get("BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt")),
            ),
        )
    else:
        data["code_change"] = code_change_results()
    if "fleet" not in skip:
        data["fleet"] = _guarded("7. Fleet read-back", lambda: bench_fleet(repeat))
    if "scale" not in skip:
        scale_repeat = int(os.environ.get("BENCH_SCALE_REPEAT", "3"))
        data["scale"] = _guarded("8. Scale", lambda: bench_scale(scale_repeat))
    data["smoke_h200"] = smoke_results()
    data["h200_build"] = h200_build_results()
    data["machine"]["load average at end"] = _load()
    _write_atomic(RESULTS_DIR / "latest.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
    report = write_report(data)
    _write_atomic(ROOT / "benchmarks" / "RESULTS.md", report)
    print(report)


if __name__ == "__main__":
    main()

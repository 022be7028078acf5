"""Section 8 of `make bench`: how the work grows with its input (issue 33, "Scale rows").

Three curves, each a row per size and the exponent b of t = a * n^b fitted by least squares on
log-log over the sizes whose time is above FIT_FLOOR_S (below it, process start and fixed costs
hide the growth):

- resolve: `envbuild.resolver.resolve` in process with 1 to 1,000 target GPUs (names cycling
  through matrix/gpus.toml and matrix/gpu_list.toml, each one that torch on x86_64 runs on
  alone), and one CLI row (`envbuild resolve --gpu ...` x 1,000, the whole command);
- lock: `envbuild lock` of a torch-cpu image with 10 to 500 project dependencies, no index
  needed for them: each is a small pure-Python wheel made here in a local `find_links` folder
  (torch comes from /opt/wheels as images/torch-cpu takes it; its own ~10 dependencies from
  PyPI, the same for every size, uv's cache warm). uv runs through a timing shim
  (ENVBUILD_UV), so the row splits the total into uv's wall time and envbuild's own;
  the head start is off (ENVBUILD_NO_HEADSTART=1) so the two do not overlap;
- fleet view: `envbuild validate --hosts FILE --lock images/torch-train` over 100 to 100,000
  recorded hosts (the hand-written fleet fixture cycled, each host under its own name), the
  whole command.

Nothing is asserted. `python -m benchmarks.scale` runs this section alone and writes
results/scale.json and results/scale.md; BENCH_SCALE_REPEAT (default 3) samples per size.
"""

from __future__ import annotations

import gc
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import ENVBUILD, RESULTS_DIR, ROOT, UV, Row, Section, _checked, _log, _run
from benchmarks.common import row as _row

if TYPE_CHECKING:
    from envbuild.core.models import Request
    from envbuild.matrix import Matrix

FIT_FLOOR_S = 0.02
RESOLVE_SIZES = (1, 10, 100, 1000)
LOCK_SIZES = (10, 50, 100, 500)
FLEET_SIZES = (100, 1_000, 10_000, 100_000)
DRIVER = "570.124.06"


def fit_exponent(
    ns: Sequence[float], ts: Sequence[float], floor: float = FIT_FLOOR_S
) -> float | None:
    """b of t = a * n^b, least squares on (log n, log t) over the points with t > floor;
    None with fewer than two such points (or one size only)."""
    pts = [(math.log(n), math.log(t)) for n, t in zip(ns, ts, strict=True) if t > floor and n > 0]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


def _samples(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _curve(name: str, rows: list[Row], sizes: Sequence[int]) -> dict[str, Any]:
    """The sizes, their median seconds, the fitted exponent and the slope between the two
    largest sizes (a whole command's fixed start flattens the fit; the tail shows the growth)."""
    ts = [r["envbuild"] for r in rows]
    return {
        "curve": name,
        "n": list(sizes),
        "seconds": ts,
        "exponent": fit_exponent(sizes, ts),
        "tail": fit_exponent(sizes[-2:], ts[-2:], floor=0.0),
    }


# --- resolve ---------------------------------------------------------------------------------


def _resolve_times(req: Request, matrix: Matrix, times: int) -> None:
    from envbuild.resolver import resolve

    for _ in range(times):
        resolve(req, matrix)


def _gpu_names() -> list[str]:
    """Every GPU name the matrix knows that today's torch on x86_64 runs on alone with driver
    DRIVER (so Turing up: Volta's last torch is older, Kepler to Pascal's last driver branch is
    older; GB200 and Jetson are aarch64 only), in file order: a 1,000-GPU request cycles
    through them, and one image runs on all of them."""
    from envbuild.core.models import Request, Targets, Unsatisfiable
    from envbuild.core.versions import parse_version
    from envbuild.matrix import load_matrix
    from envbuild.resolver import resolve

    matrix = load_matrix()
    named = [(g, a.cc) for a in matrix.archs for g in a.gpus]
    named += [(g.name, g.cc) for g in matrix.listed_gpus]  # matrix/gpu_list.toml
    names = list(dict.fromkeys(n for n, cc in named if parse_version(cc) >= parse_version("7.5")))
    ok = []
    for name in names:
        try:
            res = resolve(
                Request(framework="torch", targets=Targets(gpus=(name,), driver=DRIVER)), matrix
            )
        except Exception:  # a name this platform cannot take: not part of the mix
            continue
        if not isinstance(res, Unsatisfiable):
            ok.append(name)
    return ok


def bench_resolve_scale(repeat: int) -> tuple[list[Row], dict[str, Any]]:
    from envbuild.core.models import Request, Targets, Unsatisfiable
    from envbuild.matrix import load_matrix
    from envbuild.resolver import resolve

    matrix = load_matrix()
    names = _gpu_names()
    rows = []
    for n in RESOLVE_SIZES:
        gpus = tuple(names[i % len(names)] for i in range(n))
        req = Request(framework="torch", targets=Targets(gpus=gpus, driver=DRIVER))
        outcome = "unsatisfiable" if isinstance(resolve(req, matrix), Unsatisfiable) else "a stack"
        # Small sizes take microseconds: a batch per sample keeps the timer's resolution out.
        batch = max(1, 200 // n)
        ts = [t / batch for t in _samples(partial(_resolve_times, req, matrix, batch), repeat)]
        rows.append(
            _row(
                f"resolve, {n} target GPUs (in process)",
                ts,
                note=f"{len({*gpus})} distinct names; {outcome}",
            )
        )
    curve = _curve("resolve (in process)", rows, RESOLVE_SIZES)
    cmd = [ENVBUILD, "resolve", "--driver", DRIVER, "--json"]
    for i in range(RESOLVE_SIZES[-1]):
        cmd += ["--gpu", names[i % len(names)]]
    cli = _samples(partial(_run, cmd), repeat)
    done = _run(cmd)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"resolve exited {done.returncode}: {done.stderr[-500:]}")
    rows.append(
        _row(
            f"`envbuild resolve`, {RESOLVE_SIZES[-1]} `--gpu` (whole command)",
            cli,
            note=f"exit {done.returncode}",
        )
    )
    return rows, curve


# --- lock ------------------------------------------------------------------------------------

_WHEEL = "Wheel-Version: 1.0\nGenerator: envbuild-bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def make_wheel(folder: Path, name: str, version: str = "1.0") -> Path:
    """A pure-Python wheel of one empty module (fixed timestamps: the same bytes every run)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": _WHEEL,
    }
    files[f"{dist}/RECORD"] = "".join(f"{p},,\n" for p in [*files, f"{dist}/RECORD"])
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            zf.writestr(zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0)), text)
    return path


def _lock_folder(work: Path, n: int, wheels: Path) -> Path:
    image = work / f"deps-{n}"
    image.mkdir()
    reqs = ", ".join(f'"benchdep{i:03d}"' for i in range(n))
    (image / "envbuild.toml").write_text(
        '[image]\npython = "3.11"\nos = "debian12"\ndevice = "cpu"\n\n'
        '[framework]\nrequirement = "torch==2.13.*"\n\n'
        f'[indexes]\nfind_links = ["/opt/wheels", "{wheels}"]\n\n'
        f"[packages]\nrequirements = [{reqs}]\n"
    )
    return image


def _uv_shim(work: Path) -> tuple[Path, Path]:
    """A uv that records when each run starts and ends: (shim, its log)."""
    log = work / "uv-times.log"
    shim = work / "uv-timed"
    real = shutil.which(UV) or UV
    shim.write_text(
        "#!/bin/sh\n"
        "s=$(date +%s.%N)\n"
        f'"{real}" "$@"\n'
        "rc=$?\n"
        f'echo "$s $(date +%s.%N)" >> "{log}"\n'
        "exit $rc\n"
    )
    shim.chmod(0o755)
    return shim, log


def _busy(log: Path) -> float:
    """Seconds in which at least one uv ran (the union of the logged runs)."""
    spans = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    total, end = 0.0, -math.inf
    for s, e in spans:
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def bench_lock_scale(repeat: int) -> tuple[list[Row], list[dict[str, Any]]]:
    from envbuild.lock import format as lockfile

    rows: list[Row] = []
    totals, owns = [], []
    with tempfile.TemporaryDirectory(prefix="envbuild-bench-scale-") as tmp:
        work = Path(tmp)
        wheels = work / "wheelhouse"
        wheels.mkdir()
        for i in range(max(LOCK_SIZES)):
            make_wheel(wheels, f"benchdep{i:03d}")
        shim, log = _uv_shim(work)
        env = {**os.environ, "ENVBUILD_UV": str(shim), "ENVBUILD_NO_HEADSTART": "1"}
        for n in LOCK_SIZES:
            _log(f"scale: lock with {n} dependencies")
            image = _lock_folder(work, n, wheels)
            cmd = [ENVBUILD, "lock", str(image)]
            _checked(cmd, env=env)  # warm-up: uv's cache and envbuild's wheel hashes filled
            total, uv = [], []
            for _ in range(repeat):
                (image / "envbuild.lock").unlink()
                log.write_text("")
                t0 = time.perf_counter()
                _checked(cmd, env=env)
                total.append(time.perf_counter() - t0)
                uv.append(_busy(log))
            own = [t - u for t, u in zip(total, uv, strict=True)]
            pinned = len(lockfile.loads((image / "envbuild.lock").read_text()).packages)
            rows.append(
                _row(
                    f"`envbuild lock`, {n} project dependencies (whole command)",
                    total,
                    note=f"{pinned} packages pinned; uv {statistics.median(uv):.2f} s of it, "
                    f"envbuild's own {statistics.median(own):.2f} s",
                )
            )
            rows.append(
                _row(f"`envbuild lock`, {n} dependencies: envbuild's own (total - uv)", own)
            )
            totals.append(rows[-2])
            owns.append(rows[-1])
    return rows, [_curve("lock (whole command)", totals, LOCK_SIZES),
                  _curve("lock (envbuild's own)", owns, LOCK_SIZES)]  # fmt: skip


# --- fleet view ------------------------------------------------------------------------------


def bench_fleet_scale(repeat: int) -> tuple[list[Row], list[dict[str, Any]]]:
    from envbuild.app.validate import validate_fleet

    lock_dir = ROOT / "images/torch-train"
    lines = (ROOT / "tests/fixtures/hosts/fleet-handwritten.jsonl").read_text().splitlines()
    rows: list[Row] = []
    views: list[Row] = []
    nogc: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="envbuild-bench-scale-") as tmp:
        for n in FLEET_SIZES:
            _log(f"scale: validate --hosts, {n} hosts")
            hosts = Path(tmp) / f"hosts-{n}.jsonl"
            with hosts.open("w") as f:
                for i in range(n):
                    f.write(json.dumps({**json.loads(lines[i % len(lines)]), "name": f"node-{i}"}))
                    f.write("\n")
            cmd = [ENVBUILD, "validate", "--hosts", str(hosts), "--lock", str(lock_dir)]
            done = _run(cmd)
            if done.returncode not in (0, 1):
                raise RuntimeError(
                    f"validate --hosts exited {done.returncode}: {done.stderr[-500:]}"
                )
            ts = _samples(partial(_run, cmd), repeat)
            med = statistics.median(ts)
            rows.append(
                _row(
                    f"`validate --hosts`, {n} hosts (whole command)",
                    ts,
                    note=f"{med / n * 1e6:.0f} us per host; exit {done.returncode}",
                )
            )
            view = _samples(partial(validate_fleet, hosts_file=hosts, lock_dirs=[lock_dir]), repeat)
            views.append(
                _row(f"fleet view in process (`app.validate.validate_fleet`), {n} hosts", view)
            )
            if n == FLEET_SIZES[-1]:
                nogc.append(
                    _row(
                        f"the same, {n} hosts, cyclic GC running",
                        _collector_running(hosts, lock_dir),
                    )
                )
    return [*rows, *views, *nogc], [
        _curve("fleet view (`validate --hosts`, whole command)", rows, FLEET_SIZES),
        _curve("fleet view (in process)", views, FLEET_SIZES),
    ]


def _collector_running(hosts: Path, lock_dir: Path) -> float:
    """One in-process view with Python's cyclic collector left running, as envbuild ran it
    before it held the collector off (envbuild/core/collector.py): what that pause saves, in
    the same run."""
    from contextlib import nullcontext

    from envbuild.app import validate as validate_app

    held = getattr(validate_app, "cyclic_collector_paused")  # noqa: B009 (not re-exported)
    setattr(validate_app, "cyclic_collector_paused", nullcontext)  # noqa: B010
    gc.collect()
    try:
        t0 = time.perf_counter()
        validate_app.validate_fleet(hosts_file=hosts, lock_dirs=[lock_dir])
        return time.perf_counter() - t0
    finally:
        setattr(validate_app, "cyclic_collector_paused", held)  # noqa: B010


# --- the section -----------------------------------------------------------------------------


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_scale(repeat: int, skip: Sequence[str] = ()) -> Section:
    start = _load()
    rows: list[Row] = []
    curves: list[dict[str, Any]] = []
    if "resolve" not in skip:
        _log("scale: resolve")
        r, c = bench_resolve_scale(repeat)
        rows += r
        curves.append(c)
    if "lock" not in skip:
        r, cs = bench_lock_scale(repeat)
        rows += r
        curves += cs
    if "fleet" not in skip:
        r, cs = bench_fleet_scale(repeat)
        rows += r
        curves += cs
    return {
        "title": "8. Scale (how the work grows with its input)",
        "rows": rows,
        "curves": curves,
        "load average": {"start": start, "end": _load()},
        "notes": [
            f"Exponent b of t = a * n^b: least squares on log-log over the sizes above "
            f"{FIT_FLOOR_S * 1000:.0f} ms (benchmarks/scale.py `fit_exponent`); 1 is linear.",
            *(
                f"{c['curve']}: b = {c['exponent']:.2f}"
                if c["exponent"] is not None
                else f"{c['curve']}: under {FIT_FLOOR_S * 1000:.0f} ms at all but one size, no fit"
                for c in curves
            ),
        ],
    }


def main() -> None:
    """This section alone: results/scale.json and .md (with the machine's load)."""
    from benchmarks.report import scale_lines

    repeat = int(os.environ.get("BENCH_SCALE_REPEAT", "3"))
    skip = [s for s in os.environ.get("BENCH_SKIP", "").split(",") if s]
    section = bench_scale(repeat, skip)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "scale.json").write_text(json.dumps(section, indent=2, sort_keys=True) + "\n")
    text = "\n".join(
        [
            f"# {section['title']}",
            "",
            f"`python -m benchmarks.scale` (benchmarks/scale.py says what is measured), "
            f"{os.cpu_count()} CPUs.",
            "",
            *scale_lines(section),
        ]
    )
    (RESULTS_DIR / "scale.md").write_text(text)
    print(text, file=sys.stdout)


if __name__ == "__main__":
    main()

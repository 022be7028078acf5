"""`make bench`: speed, size and time-to-verdict, side by side with peers, in one run.

Writes benchmarks/RESULTS.md and benchmarks/results/latest.json. Each figure is a median over
repeated runs (n is in the table), with the peer measured in the same run, interleaved sample by
sample so both see the same machine load, and the ratio envbuild / peer. Nothing here is
asserted: benchmarks report, tests check behaviour.

Settings (environment): BENCH_REPEAT (warm samples, default 7), BENCH_COLD_REPEAT (cold lock
samples, default 3), BENCH_BUILD_REPEAT (warm rebuild samples, default 3),
BENCH_COLD_BUILD_REPEAT (cold build pairs, default 1, who goes first alternates), BENCH_LOCK_EXAMPLES
(comma list, default every images/* folder), BENCH_BASE (local base image, default
envbuild-e2e/base:bookworm from `tests/e2e.sh prepare`), BENCH_WHEELS (default /opt/wheels),
BENCH_CA_CERT, BENCH_SKIP (comma list of sections: cli,resolve,lock,build), BENCH_KEEP_IMAGES=1.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ENVBUILD,
    RESULTS_DIR,
    ROOT,
    UV,
    Row,
    Section,
    _checked,
    _log,
    _run,
    _timed,
    interleaved,
    row,
)
from benchmarks.lock import bench_lock

PEER_DOCKERFILE = ROOT / "benchmarks" / "peer" / "torch-cpu.Dockerfile"


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
    }


def _load() -> str:
    """Other work on the machine skews timings; the report shows how busy it was."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# --- 1. CLI start ------------------------------------------------------------------------------

RESOLVE_ARGS = ("--gpu", "H100", "--gpu", "L4", "--driver", "570.124.06")


def _prepare_cli() -> None:
    """The state an installed envbuild runs in: its modules byte-compiled (pip does that at
    install; an editable checkout under PYTHONDONTWRITEBYTECODE=1 would recompile every module
    in every process, which click, installed by pip, never does) and its user cache filled
    (the compiled matrix and dataclass code: the warm-up round fills them)."""
    import compileall

    compileall.compile_dir(str(ROOT / "envbuild"), quiet=1)


def bench_cli_start(repeat: int) -> Section:
    def cmd(argv: list[str]) -> Callable[[], object]:
        return lambda: _checked(argv)

    _prepare_cli()
    s = interleaved(
        {
            "python": cmd([sys.executable, "-c", "pass"]),
            "click": cmd([sys.executable, "-c", "import click"]),
            "help": cmd([ENVBUILD, "--help"]),
            "resolve": cmd([ENVBUILD, "resolve", "--json", *RESOLVE_ARGS]),
        },
        repeat,
    )
    peer = "a process that only imports click (`python -c 'import click'`)"
    return {
        "title": "1. CLI start (vs a process that only imports click, same interpreter)",
        "rows": [
            row("`envbuild --help`", s["help"], s["click"], peer_name=peer, goal=1.2),
            row(
                f"`envbuild resolve --json {' '.join(RESOLVE_ARGS)}`",
                s["resolve"],
                s["click"],
                peer_name=peer,
                goal=2.0,
            ),
            row("`python -c pass` (interpreter start, for scale)", s["python"]),
        ],
        "notes": [
            "Wall time of the whole process, from exec to exit; the click floor is the same "
            "interpreter and venv importing click and nothing else.",
            "envbuild's modules are byte-compiled first (as a pip install leaves them) and the "
            "user cache is warm (one untimed round): the compiled matrix "
            "(`envbuild/matrix/load.py`, rebuilt when a matrix file or overlay changes) and "
            "the compiled dataclass methods (`envbuild/codecache.py`).",
        ],
    }


# --- 2. resolve --------------------------------------------------------------------------------


def _branches(drivers: Sequence[str]) -> list[str]:
    """One driver per branch (the major number): the newest release of it the matrix names."""
    from envbuild.versions import parse_version

    best: dict[str, str] = {}
    for d in drivers:
        major = d.split(".")[0]
        if major not in best or parse_version(d) > parse_version(best[major]):
            best[major] = d
    return [best[k] for k in sorted(best, key=int)]


def bench_resolve(repeat: int) -> Section:
    from envbuild.matrix import load_matrix
    from envbuild.models import Host, HostGpu, Request, Targets, Unsatisfiable
    from envbuild.resolver import resolve

    t0 = time.perf_counter()
    matrix = load_matrix()
    load_s = time.perf_counter() - t0

    one = Request(framework="torch", targets=Targets(gpus=("H100", "L4"), driver="570.124.06"))
    batch = 50

    def one_batch() -> None:
        for _ in range(batch):
            resolve(one, matrix)

    single = [t / batch for t in interleaved({"one": one_batch}, repeat)["one"]]

    # A mixed fleet: data-centre and workstation GPUs from Volta to Blackwell, drivers of every
    # branch from 570 up (fixed seed: the same fleet every run).
    rng = random.Random(8)
    archs = [
        a
        for a in matrix.archs
        if a.gpus and 70 <= int(a.sm.removeprefix("sm_")) <= 120 and "Jetson" not in a.gpus[0]
    ]
    drivers = [
        d for d in _branches([c.toolkit_driver for c in matrix.cuda]) if int(d.split(".")[0]) >= 570
    ]
    from envbuild.errors import UserError

    def x86_64(name: str) -> bool:
        """A GPU an x86_64 host can have (GB200/GB300 come only in aarch64 Grace hosts)."""
        try:
            resolve(Request(framework="torch", targets=Targets(gpus=(name,))), matrix)
        except UserError:
            return False
        return True

    archs = [replace(a, gpus=tuple(g for g in a.gpus if x86_64(g))) for a in archs]
    archs = [a for a in archs if a.gpus]
    hosts = []
    for i in range(100):
        arch = rng.choice(archs)
        gpu = HostGpu(name=rng.choice(arch.gpus), cc=arch.cc, index=0)
        hosts.append(Host(driver=rng.choice(drivers), gpus=(gpu,) * 8, name=f"host{i:03d}"))
    fleet_req = Request(framework="torch")
    fleet_result = resolve(fleet_req, matrix, hosts)
    fleet = interleaved({"fleet": lambda: resolve(fleet_req, matrix, hosts)}, repeat)["fleet"]

    # The whole matrix swept: every framework release x GPU architecture x driver branch.
    branches = _branches([c.toolkit_driver for c in matrix.cuda])
    sweep = [
        Request(
            framework=f"{rel.framework}=={rel.version}",
            targets=Targets(gpus=(arch.sm,), driver=drv),
        )
        for rel in matrix.releases
        for arch in matrix.archs
        for drv in branches
    ]
    stacks = 0
    t0 = time.perf_counter()
    for req in sweep:
        if not isinstance(resolve(req, matrix), Unsatisfiable):
            stacks += 1
    sweep_s = time.perf_counter() - t0
    frameworks = sorted({r.framework for r in matrix.releases})
    fleet_outcome = "a stack" if not isinstance(fleet_result, Unsatisfiable) else "unsatisfiable"
    return {
        "title": "2. Resolve (in process, `envbuild.resolver.resolve`)",
        "rows": [
            row(
                "one request (torch; H100 + L4; driver 570), per request",
                single,
                unit="s",
                note=f"{1 / statistics.median(single):.0f} requests/s",
            ),
            row(
                "a mixed fleet of 100 hosts (8 GPUs each), per request",
                fleet,
                unit="s",
                note=f"{1 / statistics.median(fleet):.0f} requests/s; result: {fleet_outcome}",
            ),
            row(
                f"whole matrix swept: {len(sweep)} requests",
                len(sweep) / sweep_s,
                unit="requests/s",
                note=f"{sweep_s:.1f} s in all; {stacks} stacks, {len(sweep) - stacks} "
                "unsatisfiable (with explanations)",
            ),
            row("matrix load (first call in a process)", load_s, unit="s"),
        ],
        "notes": [
            f"Sweep: {len(matrix.releases)} releases ({', '.join(frameworks)}) x "
            f"{len(matrix.archs)} GPU architectures x {len(branches)} driver branches "
            f"({', '.join(b.split('.')[0] for b in branches)}; the newest driver of each "
            "branch the matrix names), one pass.",
            "No peer: none of cog, uv, pixi, conda-lock, repo2docker, truss, BentoML or envd resolves a framework build "
            "against GPUs and drivers (cog looks up a fixed table; the others take the "
            "versions as given).",
        ],
    }


# --- 3. lock vs uv pip compile: benchmarks/lock.py -----------------------------------------

# --- 4. build (real engine) -------------------------------------------------------------------


def _image_size(ref: str) -> int | None:
    res = _run(["docker", "image", "inspect", ref, "--format", "{{.Size}}"])
    return int(res.stdout.strip()) if res.returncode == 0 else None


def _history_ids(ref: str) -> list[tuple[str, str]]:
    """(image id, created-by) of each build step, oldest first (created-by JSON-quoted by
    docker, since a RUN may span lines)."""
    res = _run(["docker", "history", "--no-trunc", "--format", "{{.ID}}\t{{json .CreatedBy}}", ref])
    out = []
    for line in reversed(res.stdout.splitlines()):
        ident, _, created = line.partition("\t")
        try:
            out.append((ident, str(json.loads(created))))
        except ValueError:
            out.append((ident, created))
    return out


def _du(ref: str, path: str) -> int | None:
    res = _run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "du", ref, "-sb", path]
    )
    return int(res.stdout.split()[0]) if res.returncode == 0 and res.stdout.strip() else None


_CUDA_LIB = re.compile(r"lib(cu|nv|cudnn|nccl|cublas|cufft|curand|cusparse|cusolver)\w*\.so")


def layer_report(ref: str, *, min_bytes: int = 1 << 20) -> dict[str, Any]:
    """What the image's layers carry twice: bytes a later layer deletes or overwrites, identical
    large files in two layers, CUDA libraries in two layers, wheels left in a layer."""
    with tempfile.TemporaryDirectory(prefix="envbuild-bench-save-") as tmp:
        archive = Path(tmp) / "image.tar"
        _checked(["docker", "image", "save", "-o", str(archive), ref])
        with tarfile.open(archive) as outer:
            manifest = json.load(_member(outer, "manifest.json"))[0]
            config = json.load(_member(outer, manifest["Config"]))
            steps = [
                str(h.get("created_by", ""))
                for h in config.get("history", [])
                if not h.get("empty_layer")
            ]
            layers: list[dict[str, tuple[int, str]]] = []
            whiteouts: list[list[str]] = []
            sizes: list[int] = []
            for path in manifest["Layers"]:
                files: dict[str, tuple[int, str]] = {}
                wh: list[str] = []
                total = 0
                with tarfile.open(fileobj=_member(outer, path)) as layer:
                    for m in layer:
                        name = "/" + m.name.lstrip("./")
                        base = name.rsplit("/", 1)[-1]
                        if base.startswith(".wh."):
                            parent = name.rsplit("/", 1)[0]
                            wh.append(parent if base == ".wh..wh..opq" else f"{parent}/{base[4:]}")
                            continue
                        if not m.isfile():
                            continue
                        total += m.size
                        digest = ""
                        if m.size >= min_bytes:
                            digest = _sha256(layer.extractfile(m))
                        files[name] = (m.size, digest)
                layers.append(files)
                whiteouts.append(wh)
                sizes.append(total)
    return _analyse_layers(layers, whiteouts, sizes, steps, min_bytes)


def _member(tar: tarfile.TarFile, name: str) -> Any:
    f = tar.extractfile(name)
    if f is None:
        raise RuntimeError(f"{name} missing from the saved image")
    return f


def _sha256(f: Any) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def _step_text(created_by: str) -> str:
    """A history entry as the Dockerfile said it: no build-arg prefix, shell or #(nop)."""
    pattern = r"^(\|\d+ (\S+=\S* )*)?/bin/(ba)?sh( -o pipefail)? -c (#\(nop\) )?"
    return re.sub(pattern, "", created_by).strip()


def _analyse_layers(
    layers: list[dict[str, tuple[int, str]]],
    whiteouts: list[list[str]],
    sizes: list[int],
    steps: list[str],
    min_bytes: int,
) -> dict[str, Any]:
    def covered(path: str, gone: str) -> bool:
        return path == gone or path.startswith(gone.rstrip("/") + "/")

    shadowed: dict[int, int] = {}
    examples: dict[int, tuple[int, str]] = {}
    for i, files in enumerate(layers):
        later_paths = [set(layers[j]) for j in range(i + 1, len(layers))]
        later_wh = [w for j in range(i + 1, len(layers)) for w in whiteouts[j]]
        for path, (size, _) in files.items():
            if any(path in p for p in later_paths) or any(covered(path, w) for w in later_wh):
                shadowed[i] = shadowed.get(i, 0) + size
                if size > examples.get(i, (-1, ""))[0]:
                    examples[i] = (size, path)
    by_digest: dict[str, list[tuple[int, str, int]]] = {}
    for i, files in enumerate(layers):
        for path, (size, digest) in files.items():
            if digest:
                by_digest.setdefault(digest, []).append((i, path, size))
    duplicates: list[dict[str, Any]] = [
        {"size": v[0][2], "copies": [f"layer {i}: {p}" for i, p, _ in v]}
        for v in by_digest.values()
        if len({i for i, _, _ in v}) > 1
    ]
    cuda_by_name: dict[str, set[int]] = {}
    for i, files in enumerate(layers):
        for path in files:
            base = path.rsplit("/", 1)[-1]
            if _CUDA_LIB.match(base):
                cuda_by_name.setdefault(base, set()).add(i)
    wheels = [
        f"layer {i}: {p} ({s / 1e6:.0f} MB)"
        for i, files in enumerate(layers)
        for p, (s, _) in files.items()
        if p.endswith(".whl")
    ]

    def largest(i: int) -> str:
        if not layers[i]:
            return ""
        path, (size, _) = max(layers[i].items(), key=lambda kv: kv[1][0])
        return f"{path} ({size / 1e6:.1f} MB)"

    def step(i: int) -> str:
        text = steps[i] if i < len(steps) else "?"
        text = _short(_step_text(text))
        return text[:90] + ("..." if len(text) > 90 else "")

    return {
        "layers": [
            {"index": i, "bytes": sizes[i], "step": step(i), "largest": largest(i)}
            for i in range(len(layers))
        ],
        "shadowed_bytes": sum(shadowed.values()),
        "shadowed": [
            {"layer": i, "bytes": b, "step": step(i), "example": examples.get(i, (0, ""))[1]}
            for i, b in sorted(shadowed.items())
        ],
        "duplicate_bytes": sum(d["size"] * (len(d["copies"]) - 1) for d in duplicates),
        "duplicates": sorted(duplicates, key=lambda d: -int(d["size"]))[:10],
        "cuda_libs_in_several_layers": sorted(n for n, ls in cuda_by_name.items() if len(ls) > 1),
        "wheels_in_layers": wheels,
        "wheel_bytes": sum(
            s for files in layers for p, (s, _) in files.items() if p.endswith(".whl")
        ),
    }


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
    reused = sum(1 for r in runs if r.get("smoke_reused"))
    if reused:
        text += f"; smoke pass reused in {reused} of {len(runs)} runs (same image id, this host)"
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


def _build_both(
    tmp: Path,
    repeats: tuple[int, int],
    base_image: str,
    tags: tuple[str, str, str],
    wheels: Path,
    ca_cert: Path,
    out: Section,
) -> None:
    from envbuild import lockfile

    repeat, cold_repeat = repeats
    bench_base, ours_tag, peer_tag = tags

    rows: list[Row] = out["rows"]
    notes: list[str] = out["notes"]
    image_dir = tmp / "torch-cpu"
    shutil.copytree(ROOT / "images" / "torch-cpu", image_dir)
    lock = lockfile.loads((image_dir / "envbuild.lock").read_text())
    version = lock.stack.framework.version
    cmd = [
        ENVBUILD,
        "image",
        str(image_dir),
        "--base-image",
        "",  # the base of the round (cold) or bench_base
        "--tag",
        ours_tag,
        "--allow-cpu",
        "--find-links",
        str(wheels),
        "--ca-cert",
        str(ca_cert),
        "--json",
    ]
    phases: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": [], "late": []}

    # A user cache of this run: the first build's smoke pass is the only one it can reuse.
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(tmp / "envbuild-cache")}

    def envbuild_image(kind: str, base: str = bench_base) -> subprocess.CompletedProcess[str]:
        cmd[cmd.index("--base-image") + 1] = base
        res = _checked(cmd, env=env)
        try:
            doc = json.loads(res.stdout)
        except ValueError:
            doc = {}
        keys = ("build_s", "smoke_s", "tag_s", "smoke_summary", "smoke_reused")
        phases[kind].append({k: doc.get(k) for k in keys})
        return res

    ctx = tmp / "peer"
    ctx.mkdir()
    shutil.copy(PEER_DOCKERFILE, ctx / "Dockerfile")
    shutil.copy(ca_cert, ctx / "ca.crt")
    shutil.copytree(wheels, ctx / "wheels")

    def peer_argv(base: str) -> list[str]:
        return [
            "docker",
            "build",
            "-t",
            peer_tag,
            "--build-arg",
            f"BASE={base}",
            "--build-arg",
            f"TORCH_VERSION={version}",
            str(ctx),
        ]

    peer_cmd = peer_argv(bench_base)
    peer_env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    peer_name = "hand-written Dockerfile, `docker build` (classic)"

    # Cold pairs, each on a base of its own; who goes first alternates. The last round's base
    # is bench_base, which the warm and late-change rebuilds below reuse.
    cold_e: list[float] = []
    cold_p: list[float] = []
    logs = {"envbuild": "", "peer": ""}
    for k in range(cold_repeat):
        round_base = bench_base if k == cold_repeat - 1 else f"{bench_base}-cold{k}"
        _fresh_base(base_image, round_base, f"{bench_base}-{k}")
        pair = [("envbuild", round_base), ("peer", round_base)]
        for who, b in pair if k % 2 == 0 else reversed(pair):
            _log(f"build: {who} cold ({k + 1} of {cold_repeat})")
            t0 = time.perf_counter()
            if who == "envbuild":
                logs[who] = envbuild_image("cold", b).stderr
                cold_e.append(time.perf_counter() - t0)
            else:
                logs[who] = _checked(peer_argv(b), env=peer_env).stdout
                cold_p.append(time.perf_counter() - t0)
        if round_base != bench_base:  # keep the disk as it was: only the last round's images stay
            for tag in (ours_tag, peer_tag, round_base):
                _run(["docker", "image", "rm", tag])
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
    _log("build: warm rebuilds")
    warm = interleaved(
        {"e": lambda: envbuild_image("warm"), "p": lambda: _checked(peer_cmd, env=peer_env)},
        repeat,
        warmup=0,
    )
    rows.append(
        row(
            "cold build (envbuild: build + smoke + tag)",
            cold_e,
            cold_p,
            peer_name=peer_name,
            note=_phase_note(phases["cold"]),
            goal=1.0,
        )
    )
    rows.append(
        row(
            "warm rebuild, nothing changed",
            warm["e"],
            warm["p"],
            peer_name=peer_name,
            note=_phase_note(phases["warm"]),
            goal=1.3,
        )
    )

    _log("build: late-layer change")
    before = _history_ids(ours_tag)
    change = _edit_smoke_setting(image_dir)
    _checked([ENVBUILD, "lock", "--offline", str(image_dir)], env=env)
    late = _timed(lambda: envbuild_image("late"))
    after = _history_ids(ours_tag)
    if before and after and before[-1][0] != after[-1][0]:
        # The image the tag left: untagged now, so nothing else removes it.
        _run(["docker", "image", "rm", before[-1][0]])
    kept = sum(
        1 for a, b in zip(before, after, strict=False) if a[0] == b[0] and a[0] != "<missing>"
    )
    rebuilt = [c for c, (a, b) in enumerate(zip(after, before, strict=False)) if a[0] != b[0]]
    first = _short(_step_text(after[rebuilt[0]][1]))[:90] if rebuilt else ""
    rows.append(
        row(
            f"rebuild after a late-layer change ({change}, re-locked --offline)",
            late,
            note=f"{len(after) - kept} of {len(after)} steps rebuilt, from `{first}`; "
            + _phase_note(phases["late"]),
        )
    )
    notes.append(
        f"Cold builds: {cold_repeat} pair(s), each on a fresh base id (so no cache at all), "
        f"who goes first alternating; warm: median of {repeat}, interleaved. Both sides use "
        "the classic builder (envbuild through docker-py's build API, the peer through "
        "`DOCKER_BUILDKIT=0 docker build`), each COPYing the same wheelhouse. envbuild's "
        "times include running the smoke test in a container and tagging on pass; the peer "
        "has no test."
    )

    _log("build: sizes and layers")
    for label, tag in (("envbuild", ours_tag), ("peer", peer_tag)):
        size = _image_size(tag)
        base = _image_size(bench_base)
        venv = _du(tag, "/opt/venv")
        entry: dict[str, Any] = {"image_bytes": size, "base_bytes": base, "venv_bytes": venv}
        if size and base and venv:
            entry["overhead_ratio"] = size / (base + venv)
        entry["layers"] = layer_report(tag)
        out[f"size_{label}"] = entry
    e, p = out["size_envbuild"], out["size_peer"]
    rows.append(
        row(
            "image size",
            e["image_bytes"] / 1e6,
            p["image_bytes"] / 1e6,
            peer_name=peer_name,
            unit="MB",
        )
    )
    if "overhead_ratio" in e and "overhead_ratio" in p:
        rows.append(
            row(
                "overhead: image size / (base + /opt/venv content)",
                e["overhead_ratio"],
                p["overhead_ratio"],
                peer_name=peer_name,
                unit="x",
                note=f"base {e['base_bytes'] / 1e6:.0f} MB; venv {e['venv_bytes'] / 1e6:.0f} MB "
                f"(envbuild) / {p['venv_bytes'] / 1e6:.0f} MB (peer)",
            )
        )
    rows.append(
        row(
            "bytes in layers a later layer deletes or overwrites",
            e["layers"]["shadowed_bytes"] / 1e6,
            p["layers"]["shadowed_bytes"] / 1e6,
            peer_name=peer_name,
            unit="MB",
        )
    )
    rows.append(
        row(
            "wheel files shipped in the image's layers (deleted later or not)",
            e["layers"]["wheel_bytes"] / 1e6,
            p["layers"]["wheel_bytes"] / 1e6,
            peer_name=peer_name,
            unit="MB",
        )
    )
    rows.append(
        row(
            "identical files (>= 1 MiB) in two layers, extra copies",
            e["layers"]["duplicate_bytes"] / 1e6,
            p["layers"]["duplicate_bytes"] / 1e6,
            peer_name=peer_name,
            unit="MB",
        )
    )


# --- 5. smoke on the H200 (committed results) ------------------------------------------------


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
        timings = rep.get("timings", {})
        metrics = rep.get("metrics", {})
        gpus = rep.get("host", {}).get("gpus", [])
        gpu = gpus[0]["name"] if gpus else ""
        run: dict[str, Any] = {
            "file": path.name,
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
        figures = []
        for p in perf:
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
            figures.append(fig)
        run["figures"] = figures
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
        runs.append(run)
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
        "`docker run --device nvidia.com/gpu=all` of its training check "
        "(benchmarks/peer/torch-gpu.Dockerfile, benchmarks/peer/gpu_train_check.py).",
    ]
    setup = doc.get("setup") or {}
    locks = setup.get("lock_s") or {}
    if locks:
        each = ", ".join(f"{k} {_fmt(v, 's')}" for k, v in locks.items())
        notes.append(
            "Before the samples, once: base import "
            f"{_fmt(setup.get('base_s'), 's')}, `envbuild lock` (probes the base in a "
            f"container) {each}."
        )
    gap = _h200_cold_gap(doc.get("stages") or {})
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


def _h200_cold_gap(stages: Mapping[str, Any]) -> str:
    """Where the cold difference between the two sides goes (medians of each stage)."""
    ours, theirs = stages.get("envbuild_cold") or {}, stages.get("peer_cold") or {}
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
        f"beyond training (conv, sdpa, matmul repeat, throughput) {_fmt(extra, 's')} have no "
        "counterpart in the peer's check."
    )


# --- report -----------------------------------------------------------------------------------


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if unit == "s" and v < 0.1:
            return f"{v * 1000:.3g} ms"
        text = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
        return f"{text} {unit}".strip() if unit else text
    return str(v)


def _short(text: str) -> str:
    """Build-context digests in history entries ("COPY dir:<64 hex> in /x") say nothing to a
    reader: keep their first 12 characters."""
    return re.sub(r"\b(file|dir|multi):([0-9a-f]{12})[0-9a-f]{13,}", r"\1:\2", text)


def _ratio(v: Any) -> str:
    return f"{v:.2f}x" if isinstance(v, float) else ""


def _table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| measurement | envbuild | peer | peer is | envbuild / peer | n | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        unit = r.get("unit", "")
        lines.append(
            f"| {r['what']} | {_fmt(r.get('envbuild'), unit)} | {_fmt(r.get('peer'), unit)} "
            f"| {r.get('peer_name', '')} | {_ratio(r.get('ratio'))} | {r.get('n', '')} "
            f"| {_short(str(r.get('note', '')))} |"
        )
    return lines


def _smoke_lines(section: Section) -> list[str]:
    if "pending" in section:
        return [f"**{section['pending']}**", ""]
    lines = [
        "| file | framework | host GPUs | tier | verdict | checks | import | tier 1 | tier 2 "
        "| total (time to verdict) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    figs = [
        "| file | GPU | matmul | TFLOP/s | of datasheet | of baseline | copy TB/s | of datasheet "
        "| of baseline |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in section["runs"]:
        if "error" in r:
            lines.append(f"| {r['file']} | unreadable: {r['error']} |||||||||")
            continue
        verdict = "PASS" if r["ok"] else "FAIL"
        lines.append(
            f"| {r['file']} | {r['framework']} | {r['gpus']} | {r['tier']} | {verdict} on "
            f"{r['device']} | {r['checks']} | {_fmt(r['import_s'], 's')} "
            f"| {_fmt(r['tier1_s'], 's')} | {_fmt(r['tier2_s'], 's')} | {_fmt(r['total_s'], 's')} |"
        )
        for i, f in enumerate(r["figures"]):

            def pct(key: str, f: dict[str, Any] = f) -> str:
                v = f.get(key)
                return f"{v:.0%}" if isinstance(v, float) else ""

            figs.append(
                f"| {r['file']} | {f.get('index', i)} | {f.get('dtype', '')} "
                f"| {_fmt(f.get('bf16_tflops'))} | "
                f"{pct('bf16_tflops_of_datasheet')} | {pct('bf16_tflops_of_baseline')} | "
                f"{_fmt(f.get('mem_bw_tbs'))} | {pct('mem_bw_tbs_of_datasheet')} | "
                f"{pct('mem_bw_tbs_of_baseline')} |"
            )
    base = next((r["baseline"] for r in section["runs"] if r.get("baseline")), None)
    out = ["### Time to verdict", "", *lines, "", "### Throughput", "", *figs, ""]
    if base:
        out += [
            f"Reference ({base['gpu']}, matrix/baselines.toml, confidence {base['confidence']}): "
            f"datasheet {base['datasheet_bf16_tflops']} TFLOP/s dense bf16 (fp16 the same), "
            f"{base['datasheet_mem_bw_tbs']} TB/s; healthy baseline {base['bf16_tflops']} "
            f"TFLOP/s, {base['mem_bw_tbs']} TB/s.",
            "",
        ]
    return out


def _layer_lines(size: dict[str, Any], label: str) -> list[str]:
    lay = size.get("layers", {})
    lines = [f"**{label}** layers (bytes of regular files per layer):", ""]
    lines += ["| # | MB | step | largest file |", "|---|---|---|---|"]
    for layer in lay.get("layers", []):
        step = _short(str(layer["step"])).replace("|", "\\|")
        big = str(layer.get("largest", "")).replace("|", "\\|")
        lines.append(f"| {layer['index']} | {layer['bytes'] / 1e6:.1f} | `{step}` | {big} |")
    lines.append("")
    for s in lay.get("shadowed", []):
        if s["bytes"] >= 1e6:
            lines.append(
                f"- layer {s['layer']} carries {s['bytes'] / 1e6:.1f} MB that a later layer "
                f"deletes or overwrites (e.g. `{s['example']}`)"
            )
    for w in lay.get("wheels_in_layers", []):
        lines.append(f"- wheel shipped inside the image: {w}")
    for d in lay.get("duplicates", []):
        lines.append(f"- identical {d['size'] / 1e6:.1f} MB file in: {'; '.join(d['copies'])}")
    cuda = lay.get("cuda_libs_in_several_layers", [])
    lines.append(
        f"- CUDA libraries present in two or more layers: {', '.join(cuda) if cuda else 'none'}"
    )
    lines.append("")
    return lines


def _goal_lines(data: Mapping[str, Any]) -> list[str]:
    """Every row with a goal: its measured ratio beside the ratio it must stay at or under."""
    rows = [
        (section.get("title", key), r)
        for key in ("cli_start", "resolve", "lock", "build", "h200_build")
        for section in [data.get(key) or {}]
        for r in section.get("rows", [])
        if r.get("goal") is not None
    ]
    if not rows:
        return []
    lines = [
        "## Speed goals",
        "",
        "Each goal is a ratio envbuild / peer, both measured in this run with interleaved "
        "samples (medians); the sections below have the details.",
        "",
        "| measurement | section | envbuild | peer | ratio | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for title, r in rows:
        ratio = r.get("ratio")
        met = "" if ratio is None else ("yes" if ratio <= r["goal"] else "**no**")
        unit = r.get("unit", "")
        lines.append(
            f"| {r['what']} | {str(title).split(' ', 1)[0].rstrip('.')} "
            f"| {_fmt(r.get('envbuild'), unit)} | {_fmt(r.get('peer'), unit)} "
            f"| {_ratio(ratio)} | <= {r['goal']:.2f}x | {met} |"
        )
    return [*lines, ""]


def _load_note(machine: Mapping[str, Any]) -> list[str]:
    """A sentence when other work kept the machine busy: its timings are noisy."""
    cpus = machine.get("cpus") or 0
    loads = []
    for key in ("load average at start", "load average at end"):
        try:
            loads.append(float(str(machine.get(key, "")).split()[0]))
        except (ValueError, IndexError):
            continue
    if not cpus or not loads or max(loads) <= cpus:
        return []
    return [
        f"**The machine was loaded** (1-minute load average up to {max(loads):.1f} on "
        f"{cpus} CPUs, other work running beside the benchmark): absolute times are noisy; "
        "the ratios come from samples interleaved with the peer's, so both saw the same load.",
        "",
    ]


def write_report(data: Mapping[str, Any]) -> str:
    """RESULTS.md text from the result dict `main` builds (pure: tests feed it canned data)."""
    lines = [
        "# envbuild benchmarks",
        "",
        "Generated by `make bench` (benchmarks/run.py); raw data: benchmarks/results/latest.json. "
        "Medians over repeated runs, each beside its peer measured in the same run, samples "
        "interleaved. Ratios are envbuild / peer: below 1 envbuild is faster or smaller.",
        "",
        "## Machine",
        "",
    ]
    lines += [f"- {k}: {_fmt(v)}" for k, v in data.get("machine", {}).items()]
    settings = data.get("settings", {})
    if settings:
        lines.append("- settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    lines.append("")
    lines += _load_note(data.get("machine", {}))
    lines += _goal_lines(data)
    for key in ("cli_start", "resolve", "lock", "build", "smoke_h200", "h200_build"):
        section = data.get(key)
        if not section:
            continue
        lines += [f"## {section.get('title', key)}", ""]
        if "skipped" in section:
            lines += [f"Skipped: {section['skipped']}", ""]
            continue
        if key == "smoke_h200":
            lines += _smoke_lines(section)
        elif "pending" in section:
            lines += [f"**{section['pending']}**", ""]
        elif section.get("rows"):
            lines += [*_table(section["rows"]), ""]
        if "error" in section:
            lines += ["**FAILED:**", "", "```", str(section["error"]).strip(), "```", ""]
        for label, name in (("size_envbuild", "envbuild"), ("size_peer", "peer")):
            if label in section:
                lines += _layer_lines(section[label], name)
        lines += [f"- {n}" for n in section.get("notes", [])]
        if section.get("notes"):
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


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
    data["smoke_h200"] = smoke_results()
    data["h200_build"] = h200_build_results()
    data["machine"]["load average at end"] = _load()
    _write_atomic(RESULTS_DIR / "latest.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
    report = write_report(data)
    _write_atomic(ROOT / "benchmarks" / "RESULTS.md", report)
    print(report)


if __name__ == "__main__":
    main()

"""Section 2 of `make bench`: `envbuild.resolver.resolve` in process, for one request, a mixed
fleet of 100 hosts and the whole matrix swept (no peer resolves a framework build against GPUs
and drivers)."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from benchmarks.common import Section, interleaved, row

if TYPE_CHECKING:
    from envbuild.core.models import Host, Request
    from envbuild.matrix.rows import Matrix


def _branches(drivers: Sequence[str]) -> list[str]:
    """One driver per branch (the major number): the newest release of it the matrix names."""
    from envbuild.core.versions import parse_version

    best: dict[str, str] = {}
    for d in drivers:
        major = d.split(".")[0]
        if major not in best or parse_version(d) > parse_version(best[major]):
            best[major] = d
    return [best[k] for k in sorted(best, key=int)]


def _fleet(matrix: Matrix) -> list[Host]:
    """A mixed fleet: data-centre and workstation GPUs from Volta to Blackwell, drivers of every
    branch from 570 up (fixed seed: the same fleet every run)."""
    from envbuild.core.errors import UserError
    from envbuild.core.models import Host, HostGpu, Request, Targets
    from envbuild.resolver import resolve

    rng = random.Random(8)
    archs = [
        a
        for a in matrix.archs
        if a.gpus and 70 <= int(a.sm.removeprefix("sm_")) <= 120 and "Jetson" not in a.gpus[0]
    ]
    drivers = [
        d for d in _branches([c.toolkit_driver for c in matrix.cuda]) if int(d.split(".")[0]) >= 570
    ]

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
    return hosts


def _sweep(matrix: Matrix, branches: Sequence[str]) -> tuple[list[Request], int, float]:
    """The whole matrix swept once, every framework release x GPU architecture x driver
    branch: the requests, how many of them found a stack, and the seconds the pass took."""
    from envbuild.core.models import Request, Targets, Unsatisfiable
    from envbuild.resolver import resolve

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
    return sweep, stacks, time.perf_counter() - t0


def bench_resolve(repeat: int) -> Section:
    from envbuild.core.models import Request, Targets, Unsatisfiable
    from envbuild.matrix import load_matrix
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

    hosts = _fleet(matrix)
    fleet_req = Request(framework="torch")
    fleet_result = resolve(fleet_req, matrix, hosts)
    fleet = interleaved({"fleet": lambda: resolve(fleet_req, matrix, hosts)}, repeat)["fleet"]

    branches = _branches([c.toolkit_driver for c in matrix.cuda])
    sweep, stacks, sweep_s = _sweep(matrix, branches)
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
            *_fleet_validate_rows(),
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


FLEET_HOSTS = 100_000


def _fleet_validate_rows() -> list[dict[str, object]]:
    """`envbuild validate --hosts` (and `--k8s-job`) over FLEET_HOSTS recorded hosts, the
    whole command: it must stay linear in the hosts (a scan per cell and a list count made
    the Job manifest quadratic). The hosts cycle through the hand-written fleet fixture,
    each under its own name."""
    import json
    import tempfile
    from pathlib import Path

    from benchmarks.common import ENVBUILD, ROOT, _run

    lines = (ROOT / "tests/fixtures/hosts/fleet-handwritten.jsonl").read_text().splitlines()
    with tempfile.TemporaryDirectory(prefix="envbuild-bench-") as tmp:
        hosts = Path(tmp) / "hosts.jsonl"
        with hosts.open("w") as f:
            for i in range(FLEET_HOSTS):
                doc = json.loads(lines[i % len(lines)])
                f.write(json.dumps({**doc, "name": f"node-{i}"}) + "\n")
        base = [
            ENVBUILD,
            "validate",
            "--hosts",
            str(hosts),
            "--lock",
            str(ROOT / "images/torch-train"),
        ]
        job = [*base, "--image", "registry.example/team/torch:1", "--k8s-job", f"{tmp}/job.yaml"]
        out = []
        for what, cmd in (("table", base), ("Kubernetes Jobs", job)):
            t0 = time.perf_counter()
            done = _run(cmd)
            took = time.perf_counter() - t0
            if done.returncode not in (0, 1):
                raise RuntimeError(
                    f"validate --hosts exited {done.returncode}: {done.stderr[-500:]}"
                )
            out.append(
                row(
                    f"validate --hosts: {FLEET_HOSTS} hosts, {what} (whole command)",
                    took,
                    unit="s",
                    note=f"{took / FLEET_HOSTS * 1e6:.0f} us per host",
                )
            )
    return out

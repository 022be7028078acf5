"""Which locks run on which recorded hosts: the fleet view of `envbuild validate --hosts`.

Pure: every cell is `envbuild.preflight.validate.preflight` of one lock on one host; nothing is started.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from envbuild.core.models import Host, Lock
from envbuild.cuda.archs import ArchRules
from envbuild.matrix import Matrix
from envbuild.preflight.validate import HostVerdict, Preflight, preflight
from envbuild.smoke.fit import Peak, matrix_memory, memory_of_name


@dataclass(frozen=True)
class FleetView:
    locks: tuple[str, ...]
    hosts: tuple[str, ...]
    results: tuple[Preflight, ...]
    """One per (lock, host), locks outer, hosts inner."""
    gpu_counts: dict[str, int] = field(default_factory=dict)
    require_cuda: dict[str, str] = field(default_factory=dict)
    """lock -> its whole NVIDIA_REQUIRE_CUDA ("" for CPU images)."""
    nodes: dict[str, str] = field(default_factory=dict)
    """host (as shown) -> the name its facts record ("" when they record none)."""
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    """host -> its smallest GPU against a smoke report's peak (`host_memory_fit`); empty
    without a report."""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results) and not self.too_small

    @property
    def too_small(self) -> list[str]:
        """Hosts whose GPUs cannot hold the smoke report's peak memory."""
        return [h for h in self.hosts if self.memory.get(h, {}).get("fits") is False]

    @functools.cached_property
    def _by_cell(self) -> dict[tuple[str, str], Preflight]:
        # Looked up once per cell by `passing` and the tables: a scan each time made
        # `validate --hosts ... --k8s-job` quadratic in the number of hosts.
        return {(r.lock, r.host): r for r in self.results}

    def result(self, lock: str, host: str) -> Preflight:
        return self._by_cell[(lock, host)]

    def passing(self, lock: str) -> list[str]:
        """The hosts `lock` runs on (with or without minor-version compatibility), in order."""
        small = set(self.too_small)
        return [h for h in self.hosts if self.result(lock, h).ok and h not in small]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "locks": list(self.locks),
            "hosts": list(self.hosts),
            "require_cuda": dict(self.require_cuda),
            "results": [_result_json(r) for r in self.results],
            "memory_fit": {h: dict(m) for h, m in self.memory.items()},
        }


def _result_json(r: Preflight) -> dict[str, Any]:
    verdict = r.verdict or HostVerdict("runs" if r.ok else "does_not_run", "")
    out: dict[str, Any] = {
        "lock": r.lock,
        "host": r.host,
        "runs": r.ok,
        "verdict": verdict.outcome,
        "reason": verdict.reason,
    }
    for key in ("fix", "gives_up"):
        if getattr(verdict, key):
            out[key] = getattr(verdict, key)
    if verdict.notes:
        out["notes"] = list(verdict.notes)
    out["failed"] = [c.to_json() for c in r.failed]
    return out


def host_memory_fit(host: Host, peak: Peak, table: Sequence[tuple[str, float]]) -> dict[str, Any]:
    """The host's smallest GPU against `peak` (`envbuild.smoke.fit`): its NVML memory when the
    facts record it, else the matrix's for its name; fits None when neither is known."""
    sizes = []
    for gpu in host.gpus:
        gib = gpu.memory_mib / 1024 if gpu.memory_mib else memory_of_name(gpu.name, table)
        sizes.append((gib, gpu.name))
    known = [(gib, name) for gib, name in sizes if gib is not None]
    need = round(peak.need_gib, 2)
    if not known:
        return {"fits": None, "gpu": "", "memory_gib": None, "need_gib": need}
    gib, name = min(known)
    return {"fits": need <= gib, "gpu": name, "memory_gib": round(gib, 1), "need_gib": need}


def unique_host_names(names: Sequence[str]) -> list[str]:
    """Host names made unique in order: a second "gpu-1" becomes "gpu-1#2"."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for i, n in enumerate(names):
        base = n or f"host{i + 1}"
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out


def fleet_view(
    locks: Sequence[tuple[str, Lock]],
    hosts: Sequence[tuple[Host, Mapping[str, Any] | None]],
    *,
    matrix: Matrix | None = None,
    rules: ArchRules | None = None,
    peak: Peak | None = None,
) -> FleetView:
    """Which locks run on which hosts, decided without running anything (`matrix`: see
    `envbuild.preflight.validate.preflight`); with `peak` (a smoke report's), each host's
    memory fit too."""
    names = unique_host_names([h.name for h, _ in hosts])
    if rules is None and matrix is not None:
        rules = ArchRules.from_archs(matrix.archs)  # once, not per host
    results: list[Preflight] = []
    for label, lock in locks:
        for (host, facts), name in zip(hosts, names, strict=True):
            pf = preflight(lock, host, facts=facts, lock_label=label, matrix=matrix, rules=rules)
            results.append(replace(pf, host=name))
    return FleetView(
        locks=tuple(label for label, _ in locks),
        hosts=tuple(names),
        results=tuple(results),
        gpu_counts={name: len(h.gpus) for (h, _), name in zip(hosts, names, strict=True)},
        require_cuda={label: lock.stack.base_image.require_cuda for label, lock in locks},
        nodes={name: h.name for (h, _), name in zip(hosts, names, strict=True)},
        memory=_memory(hosts, names, peak, matrix),
    )


def _memory(
    hosts: Sequence[tuple[Host, Mapping[str, Any] | None]],
    names: Sequence[str],
    peak: Peak | None,
    matrix: Matrix | None,
) -> dict[str, dict[str, Any]]:
    if peak is None:
        return {}
    table = matrix_memory(matrix) if matrix is not None else ()
    return {
        name: host_memory_fit(h, peak, table) for (h, _), name in zip(hosts, names, strict=True)
    }


@dataclass(frozen=True)
class FleetResult:
    view: FleetView
    manifest_path: Any = None
    """Where the Job manifest was written (a Path), or None."""
    manifest: str | None = None
    jobs: tuple[tuple[str, str], ...] = ()
    """(Job name, node) of every Job in the manifest."""

    def to_json(self) -> dict[str, Any]:
        out = self.view.to_json()
        if self.manifest_path is not None:
            out["k8s_job"] = str(self.manifest_path)
            out["k8s_jobs"] = [{"job": job, "node": node} for job, node in self.jobs]
        return out

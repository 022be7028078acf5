"""Smoke passes recorded on this host: an image id that passed its smoke test here, on the same
GPUs, driver and engine, with the same smoke settings, is not tested again (`envbuild image`
says so and shows when and where it passed; `--resmoke` runs the test anyway).

The image id covers everything inside the image (packages, payload, plan). What is not in it
is the host key: this machine's name, the engine (kind, address, product and version), the
NVIDIA driver and each GPU's UUID as NVML reports them (only for an engine on this machine:
a remote engine's GPUs are its own, and its address stands for them), how GPUs are attached,
the smoke settings given on the command line, and envbuild's version (it judges the report).

Each pass records the plan it passed under (`pass_plan`: tier, steps, the kill time, the
checks, the GPU devices); a pass is reused only for a plan it `covers`, i.e. one no stricter
(docs/reliability.md, "A recorded pass counts only for the plan it passed"): a pass under a
630 s limit says nothing about `--smoke-timeout 1`. A pass recorded without a plan (an older
envbuild) covers nothing.

A pass is also kept under the build's environment key (`env/<key>`: every input of the build
but the project's files, `envbuild.app.image.context_key`): a candidate that differs from a
passed one only in the project's code runs the project's own smoke command alone, as its
environment (base, packages, payload, plan, lock) is the one that passed (docs/smoke.md,
"Code changes").

One JSON file in the user cache folder, written atomically; an unreadable file is empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envbuild.core import usercache as codecache

FILE_NAME = "smoke-passes.json"
MAX_ENTRIES = 500
"""Passes kept; the oldest go first."""


def pass_plan(
    smoke_plan: Mapping[str, Any],
    *,
    kill_after_s: int,
    devices: Sequence[str],
    command: Sequence[str],
) -> dict[str, Any]:
    """What a pass is a pass of: the plan's tier and steps, the seconds the container had
    (`kill_after_s`), the GPU devices it had, and a digest of every other check (the rest of
    the smoke plan and the project's own smoke command), which must match exactly."""
    rest = {k: v for k, v in smoke_plan.items() if k not in ("tier", "steps", "timeout_s")}
    checks = json.dumps([rest, list(command)], sort_keys=True, default=str)
    return {
        "tier": smoke_plan.get("tier"),
        "steps": smoke_plan.get("steps"),
        "timeout_s": int(kill_after_s),
        "checks": hashlib.sha256(checks.encode()).hexdigest(),
        "devices": sorted(map(str, devices)),
    }


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def weaker(passed: Any, asked: Mapping[str, Any]) -> str | None:
    """Why the plan a pass ran under (`passed`, as recorded) is less strict than `asked`, in
    words; None when it covers it: a tier and steps at least as high, a limit no longer, the
    same checks and devices."""
    if not isinstance(passed, Mapping):
        return "it was recorded without its plan"
    for name, word in (("tier", "tier"), ("steps", "steps")):
        had, want = _count(passed.get(name)), _count(asked.get(name))
        if want is not None and (had is None or had < want):
            return f"{word} {had} there, {want} asked"
    had, want = _count(passed.get("timeout_s")), _count(asked.get("timeout_s"))
    if had is None or want is None or had > want:
        return f"a {had} s limit there, {want} s asked"
    if passed.get("checks") != asked.get("checks"):
        return "other checks there"
    if passed.get("devices") != asked.get("devices"):
        return f"GPU devices {passed.get('devices')} there, {asked.get('devices')} asked"
    return None


def _gpu_identity() -> list[str]:
    """The driver and each GPU's UUID (name where NVML has no UUID), or why there are none."""
    try:
        import pynvml
    except ImportError:
        return ["no NVML bindings"]
    from envbuild.host import probe as hostinfo
    from envbuild.core.errors import NoGpuError

    try:
        driver, gpus = hostinfo.probe_driver(pynvml)
    except NoGpuError:
        return ["no NVIDIA driver"]
    out = [f"driver {driver.get('version')}"]
    out += [str(g.get("uuid") or g.get("name") or g.get("error")) for g in gpus]
    return out


def host_key(
    *,
    engine: str,
    address: str,
    server: Sequence[str],
    local: bool,
    settings: Mapping[str, Any],
) -> tuple[str, str]:
    """(key, where): the key of this host's passes for these settings, and where in words."""
    import socket

    from envbuild import __version__

    host = socket.gethostname()
    gpus = _gpu_identity() if local else ["the engine's own"]
    facts = {
        "host": host,
        "engine": [engine, address, *server],
        "gpus": gpus,
        "settings": dict(settings),
        "envbuild": __version__,
    }
    key = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()
    product = " ".join(server) or engine
    gpu_text = ", ".join(gpus[:3]) + (f" and {len(gpus) - 3} more" if len(gpus) > 3 else "")
    return key, f"host {host}, {product} at {address}, {gpu_text}"


class FileStore:
    """The passes of one host key, in `<user cache>/smoke-passes.json`. `reuse=False`
    (`--resmoke`) finds nothing but still records the new pass."""

    def __init__(self, key: str, where: str, *, reuse: bool = True, path: Path | None = None):
        self.key = key
        self.where = where
        self.reuse = reuse
        self.path = path or Path(codecache.user_cache_dir()) / FILE_NAME

    def _read(self) -> dict[str, Any]:
        raw = codecache.read(os.fspath(self.path))
        try:
            data = json.loads(raw) if raw is not None else {}
        except (ValueError, RecursionError):
            return {}
        passes = data.get("passes") if isinstance(data, dict) else None
        return passes if isinstance(passes, dict) else {}

    def find(self, image_id: str) -> Mapping[str, Any] | None:
        return self._find(image_id)

    def record(self, image_id: str, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        stamp = {"passed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        stored = {**entry, **stamp, "where": self.where}
        self._write(f"{self.key}/{image_id}", stored)
        return stored

    def find_built(self, context_key: str) -> Mapping[str, Any] | None:
        """The tagged image last built here from this context key and passed."""
        return self._find(f"built/{context_key}")

    def record_built(self, context_key: str, entry: Mapping[str, Any]) -> None:
        self._write(f"{self.key}/built/{context_key}", dict(entry))

    def find_env(self, env_key: str) -> Mapping[str, Any] | None:
        """The payload's pass of an image built from this environment key (every input of the
        build but the project's files), when one passed here."""
        return self._find(f"env/{env_key}")

    def record_env(self, env_key: str, entry: Mapping[str, Any]) -> None:
        self._write(f"{self.key}/env/{env_key}", dict(entry))

    def _find(self, name: str) -> Mapping[str, Any] | None:
        """The entry stored under `<host key>/name` when it holds a report label (nothing
        with --resmoke)."""
        if not self.reuse:
            return None
        entry = self._read().get(f"{self.key}/{name}")
        ok = isinstance(entry, dict) and isinstance(entry.get("report_label"), str)
        return entry if ok else None

    def _write(self, name: str, entry: Mapping[str, Any]) -> None:
        passes = self._read()
        passes[name] = dict(entry)
        if len(passes) > MAX_ENTRIES:
            newest = sorted(passes.items(), key=lambda kv: str(kv[1].get("passed_at", "")))
            passes = dict(newest[-MAX_ENTRIES:])
        text = json.dumps({"schema": 1, "passes": passes}, sort_keys=True, indent=1)
        codecache.write_bytes(os.fspath(self.path), text.encode())

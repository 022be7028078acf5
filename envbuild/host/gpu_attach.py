"""How an engine attaches NVIDIA GPUs to a container: one rule for `image`, `validate` and
`doctor`, so the doctor's verdict and what `image` does cannot disagree [pure].

Three ways exist (docs.docker.com/engine/containers/resource_constraints/#gpu and
docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html):

- **cdi**: a CDI device request (`DeviceRequest(driver="cdi", device_ids=["nvidia.com/gpu=all"])`).
  Works when the engine reads CDI specs (`CDISpecDirs` in `docker info` is not empty: Docker >= 25
  with CDI on; an empty list means off, per the Engine API's SystemInfo schema) and one of
  them names the devices asked for under kind `nvidia.com/gpu`. Docker >= 28.3 lists the
  devices itself (`DiscoveredDevices`, Engine API 1.50); older engines are read through the
  spec files in those folders, which only a local engine allows.
- **gpus**: `--gpus` (`DeviceRequest(count=-1, capabilities=[["gpu"]])`). Docker serves it with
  its built-in `nvidia` device driver, which exists only when `nvidia-container-runtime-hook`
  is on the daemon's PATH (moby daemon/nvidia_linux.go). On a CDI-only engine it fails with
  `could not select device driver "" with capabilities: [[gpu]]`.
- **runtime**: the `nvidia` runtime registered in daemon.json (`Runtimes`), with
  `NVIDIA_VISIBLE_DEVICES` naming the devices.

`auto` takes the first way that works in that order: CDI is what NVIDIA recommends now and the
only way on hosts set up with `nvidia-ctk cdi generate` alone.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from envbuild.core.errors import UserError

Way = Literal["cdi", "gpus", "runtime"]
Choice = Literal["auto", "cdi", "gpus", "runtime"]
WAYS: tuple[Way, ...] = ("cdi", "gpus", "runtime")
CHOICES: tuple[str, ...] = ("auto", *WAYS)
CDI_KIND = "nvidia.com/gpu"
RUNTIME_HOOK = "nvidia-container-runtime-hook"
ALL = "all"

_UUID_RE = re.compile(r"(?:GPU|MIG)-[0-9A-Za-z-]+")
_KIND_RE = re.compile(r"""^["']?kind["']?\s*:\s*["']?([^"'\s#]+)""")
_NAME_RE = re.compile(r"""^(?:-\s+)?["']?name["']?\s*:\s*(.+?)\s*$""")


# --- inputs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineGpuFacts:
    """What the engine and (for a local engine) this machine say about attaching GPUs."""

    server_version: str | None
    runtimes: tuple[str, ...]
    cdi_spec_dirs: tuple[str, ...] | None
    """As `docker info` lists them; None: the engine does not report them (Docker < 25)."""
    cdi_devices: tuple[str, ...] | None
    """Fully qualified `nvidia.com/gpu=NAME` devices; None when nobody could tell."""
    cdi_devices_from: str
    """"engine" (DiscoveredDevices), "spec files" (read here) or "" (unknown)."""
    runtime_hook: str | None
    """Path of nvidia-container-runtime-hook on the daemon's machine; None: absent/unknown."""
    local: bool
    """The engine runs on this machine, so its files (hook, CDI specs) can be looked at."""
    cdi_spec_files: tuple[str, ...] = ()
    """The spec files the devices were read from (when read here)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "server_version": self.server_version,
            "runtimes": list(self.runtimes),
            "cdi_spec_dirs": None if self.cdi_spec_dirs is None else list(self.cdi_spec_dirs),
            "cdi_devices": None if self.cdi_devices is None else list(self.cdi_devices),
            "cdi_devices_from": self.cdi_devices_from,
            "runtime_hook": self.runtime_hook,
            "local": self.local,
            "cdi_spec_files": list(self.cdi_spec_files),
        }


def parse_cdi_devices(text: str) -> tuple[str | None, tuple[str, ...]]:
    """(kind, device names) of one CDI spec, JSON or the block YAML `nvidia-ctk` writes.

    A small reader instead of a YAML dependency: a spec's `kind` is a top-level scalar and each
    device's `name` a scalar directly inside one item of the top-level `devices` list (CDI
    SPEC.md, github.com/cncf-tags/container-device-interface/blob/main/SPEC.md); nvidia-ctk
    writes `name` first or, in older releases, after `containerEdits` (keys sorted).
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            return None, ()
        if not isinstance(data, dict):
            return None, ()
        kind = data.get("kind")
        devices = data.get("devices") or []
        names = [str(d["name"]) for d in devices if isinstance(d, dict) and "name" in d]
        return (str(kind) if kind else None), tuple(names)
    return _yaml_devices(text)


def _unquote(value: str) -> str:
    value = value.split(" #", 1)[0].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _yaml_devices(text: str) -> tuple[str | None, tuple[str, ...]]:
    kind: str | None = None
    names: list[str] = []
    in_devices = False
    item_indent: int | None = None
    key_indent = -1
    for raw in text.splitlines():
        line = raw.rstrip()
        body = line.lstrip()
        if not body or body.startswith("#") or body in ("---", "..."):
            continue
        indent = len(line) - len(body)
        if indent == 0 and not body.startswith("- "):
            match = _KIND_RE.match(body)
            if match:
                kind = match.group(1)
            in_devices = re.match(r"""["']?devices["']?\s*:""", body) is not None
            item_indent = None
            continue
        if not in_devices:
            continue
        if body.startswith("- ") and (item_indent is None or indent <= item_indent):
            item_indent = indent
            key_indent = indent + 2
        elif item_indent is None or indent != key_indent:
            continue
        match = _NAME_RE.match(body)
        if match:
            names.append(_unquote(match.group(1)))
    return kind, tuple(names)


def engine_facts(
    engine: Mapping[str, Any],
    *,
    cdi_specs: Sequence[Mapping[str, Any]] = (),
    runtime_hook: str | None = None,
) -> EngineGpuFacts:
    """The rule's input from the engine facts `hostinfo.parse_docker_info` returns (the
    `engine` object of `doctor --json`) and the CDI specs `hostinfo.probe_cdi` read here.

    Specs count only when they lie in a folder the engine reads. A spec recorded without its
    device list (host facts written before envbuild read it) is taken to name `all`, which
    every spec `nvidia-ctk cdi generate` writes has.
    """
    local = bool(engine.get("local", True))
    dirs_raw = engine.get("cdi_spec_dirs")
    dirs = tuple(str(d) for d in dirs_raw) if isinstance(dirs_raw, list | tuple) else None
    discovered = engine.get("discovered_devices")
    devices: tuple[str, ...] | None = None
    source = ""
    files: list[str] = []
    if isinstance(discovered, list | tuple):
        devices = tuple(sorted(str(d) for d in discovered if str(d).startswith(CDI_KIND + "=")))
        source = "engine"
    elif dirs and local:
        read = [os.path.normpath(d) for d in dirs]
        found: set[str] = set()
        for spec in cdi_specs:
            path = os.path.normpath(str(spec.get("path") or ""))
            if os.path.dirname(path) not in read or spec.get("kind") != CDI_KIND:
                continue
            names = spec.get("devices")
            found.update(f"{CDI_KIND}={n}" for n in (names if isinstance(names, list) else [ALL]))
            files.append(path)
        devices, source = tuple(sorted(found)), "spec files"
    runtimes = engine.get("runtimes") or []
    return EngineGpuFacts(
        server_version=engine.get("server_version"),
        runtimes=tuple(sorted(str(r) for r in runtimes)),
        cdi_spec_dirs=dirs,
        cdi_devices=devices,
        cdi_devices_from=source,
        runtime_hook=runtime_hook if local else None,
        local=local,
        cdi_spec_files=tuple(files),
    )


def from_host_facts(facts: Mapping[str, Any]) -> EngineGpuFacts:
    """The rule's input from a host-facts object (`doctor --json` "facts")."""
    toolkit = facts.get("toolkit") or {}
    return engine_facts(
        facts.get("engine") or {},
        cdi_specs=[s for s in facts.get("cdi") or [] if isinstance(s, Mapping)],
        runtime_hook=toolkit.get("nvidia_container_runtime_hook"),
    )


def parse_devices(text: str | None) -> tuple[str, ...]:
    """`--gpu-devices`: "all" (default), or GPU indexes / UUIDs separated by commas."""
    if text is None or text.strip().lower() in ("", ALL):
        return (ALL,)
    items = [t.strip() for t in text.split(",")]
    bad = [t for t in items if not (t.isdigit() or _UUID_RE.fullmatch(t))]
    if bad or not items:
        raise UserError(
            f"--gpu-devices {text!r}: {bad[0] if bad else 'empty'} is not a GPU index or UUID",
            hint="pass all, or indexes / UUIDs as nvidia-smi -L lists them: 0,1 or GPU-3f2a...",
        )
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class GpuChoice:
    """What the user asked for: `--gpu-attach` and `--gpu-devices`."""

    want: str = "auto"
    devices: tuple[str, ...] = (ALL,)

    @classmethod
    def parse(cls, want: str | None, devices: str | None) -> GpuChoice:
        """From the options' text; UserError (exit 2) for an unknown way or device."""
        way = want or "auto"
        if way not in CHOICES:
            raise UserError(
                f"--gpu-attach {way!r} is not one of {', '.join(CHOICES)}",
                hint="pass auto (the engine's facts decide), cdi, gpus or runtime",
            )
        return cls(way, parse_devices(devices))


# --- the rule ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WayCheck:
    way: Way
    ok: bool
    why: str


@dataclass(frozen=True)
class Attachment:
    """The way GPUs are attached (or "none") and why; recorded in reports and --json."""

    way: Way | Literal["none"]
    devices: tuple[str, ...]
    requested: Choice
    reason: str
    checks: tuple[WayCheck, ...] = ()
    runtime: str | None = None
    """The runtime name to start containers with, for the `runtime` way."""
    facts: EngineGpuFacts | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.way != "none"

    def cdi_device_ids(self) -> list[str]:
        return [f"{CDI_KIND}={d}" for d in self.devices]

    def to_json(self) -> dict[str, Any]:
        return {
            "way": self.way,
            "requested": self.requested,
            "devices": list(self.devices),
            "reason": self.reason,
            "runtime": self.runtime,
            "checks": {c.way: {"ok": c.ok, "why": c.why} for c in self.checks},
        }


def _check_cdi(facts: EngineGpuFacts, devices: Sequence[str]) -> WayCheck:
    engine = f"Docker {facts.server_version or '?'}"
    if facts.cdi_spec_dirs is None:
        why = (
            f"{engine} does not read CDI specs (CDI needs Docker >= 25 with "
            '"features": {"cdi": true} in daemon.json; on by default from Docker 28)'
        )
        return WayCheck("cdi", False, why)
    if not facts.cdi_spec_dirs:
        why = f'{engine} has CDI off (`docker info` lists no CDI spec dirs): set "features": {{"cdi": true}} in daemon.json'
        return WayCheck("cdi", False, why)
    dirs = ", ".join(facts.cdi_spec_dirs)
    if facts.cdi_devices is None:
        why = f"{engine} reads CDI specs from {dirs}, but they cannot be seen from here (a remote engine)"
        return WayCheck("cdi", False, why)
    names = {d.split("=", 1)[1] for d in facts.cdi_devices}
    if not names:
        why = f"no CDI spec of kind {CDI_KIND} in {dirs} ({facts.cdi_devices_from or 'read here'})"
        return WayCheck("cdi", False, why)
    missing = [d for d in devices if d not in names]
    if missing:
        why = f"the CDI specs in {dirs} name no {CDI_KIND} device {', '.join(missing)} (they name {', '.join(sorted(names))})"
        return WayCheck("cdi", False, why)
    count = f"{len(names)} {CDI_KIND} device" + ("s" if len(names) > 1 else "")
    if facts.cdi_spec_files:
        return WayCheck(
            "cdi", True, f"{engine} reads CDI {', '.join(facts.cdi_spec_files)} ({count})"
        )
    return WayCheck("cdi", True, f"{engine} lists {count} from its CDI specs in {dirs}")


def _check_gpus(facts: EngineGpuFacts) -> WayCheck:
    if facts.runtime_hook:
        return WayCheck("gpus", True, f"{RUNTIME_HOOK} is at {facts.runtime_hook}")
    if not facts.local:
        return WayCheck("gpus", False, f"a remote engine: whether it has {RUNTIME_HOOK} is unknown")
    return WayCheck(
        "gpus",
        False,
        f"no {RUNTIME_HOOK} on this machine, so docker has no `nvidia` device driver for --gpus",
    )


def _nvidia_runtime(facts: EngineGpuFacts) -> str | None:
    named = [r for r in facts.runtimes if "nvidia" in r.lower()]
    return "nvidia" if "nvidia" in named else (named[0] if named else None)


def _check_runtime(facts: EngineGpuFacts) -> WayCheck:
    name = _nvidia_runtime(facts)
    if name:
        return WayCheck("runtime", True, f"the engine has the `{name}` runtime")
    have = ", ".join(facts.runtimes) or "none"
    return WayCheck("runtime", False, f"the engine has no `nvidia` runtime (runtimes: {have})")


def check_ways(facts: EngineGpuFacts, devices: Sequence[str] = (ALL,)) -> tuple[WayCheck, ...]:
    return (_check_cdi(facts, devices), _check_gpus(facts), _check_runtime(facts))


def choose(
    facts: EngineGpuFacts, *, want: str = "auto", devices: Sequence[str] = (ALL,)
) -> Attachment:
    """The way to attach `devices` on this engine. `want` forces a way: it is used even where
    the facts say it would not work (they cannot see everything, e.g. a remote engine); the
    engine's own refusal then says why."""
    if want not in CHOICES:
        raise UserError(
            f"--gpu-attach {want!r} is not one of {', '.join(CHOICES)}",
            hint="pass auto (the engine's facts decide), cdi, gpus or runtime",
        )
    devs = tuple(devices) or (ALL,)
    checks = check_ways(facts, devs)
    by_way = {c.way: c for c in checks}
    runtime = _nvidia_runtime(facts)
    if want != "auto":
        forced = by_way[want]  # type: ignore[index]
        reason = f"forced with --gpu-attach {want}" + ("" if forced.ok else f" ({forced.why})")
        name = (runtime or "nvidia") if forced.way == "runtime" else None
        return Attachment(forced.way, devs, forced.way, reason, checks, name, facts)
    for check in checks:
        if check.ok:
            return Attachment(
                check.way,
                devs,
                "auto",
                check.why,
                checks,
                runtime if check.way == "runtime" else None,
                facts,
            )
    reason = "; ".join(f"{c.way}: {c.why}" for c in checks)
    return Attachment("none", devs, "auto", reason, checks, None, facts)


ATTACH_HINT = (
    "check the driver with `nvidia-smi`, the toolkit with `nvidia-ctk --version` and the "
    "engine with `docker info | grep -i runtime` (and `grep -i cdi`); then "
    "either write a CDI spec (`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`, "
    'with "features": {"cdi": true} in /etc/docker/daemon.json on Docker 25-27) or '
    "`sudo nvidia-ctk runtime configure --runtime=docker`, and restart docker; "
    "`envbuild doctor` shows each way (--gpu-attach forces one); on a machine without a GPU, "
    "pass --allow-cpu to run the smoke test's CPU path"
)
"""What to do when no way attaches the GPUs, or the engine refused the one chosen."""


def unavailable_message(attachment: Attachment) -> tuple[str, str]:
    """(message, hint) for a GPU image on an engine where no way works."""
    message = (
        "the engine cannot attach NVIDIA GPUs: " + attachment.reason
        if attachment.reason
        else "the engine cannot attach NVIDIA GPUs"
    )
    return message, ATTACH_HINT

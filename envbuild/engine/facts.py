"""What the container engine says of itself, for host facts (`envbuild doctor`): `GET /info`
over its unix socket (HTTP, standard library) or through the docker CLI, parsed into the
engine facts `host.gpu_attach` and `preflight.doctor` read.

Not through docker-py: doctor runs where docker-py may be missing. The host probe sits below
the engine layer, so the use case asks here and hands the facts to `host.probe.probe_facts`.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from typing import Any

from envbuild.engine.address import DOCKER_SOCKET


def parse_docker_info(info: dict[str, Any]) -> dict[str, Any]:
    """The engine facts envbuild needs from `GET /info` (`docker info` JSON)."""
    runtimes = info.get("Runtimes") or {}
    cdi_dirs = info.get("CDISpecDirs")
    # Docker >= 28.3 (Engine API 1.50) lists the CDI devices it found: [{"Source", "ID"}].
    found = info.get("DiscoveredDevices")
    discovered = (
        sorted(
            str(d.get("ID"))
            for d in found
            if isinstance(d, dict) and d.get("Source") == "cdi" and d.get("ID")
        )
        if isinstance(found, list)
        else None
    )
    return {
        "server_version": info.get("ServerVersion"),
        "runtimes": sorted(runtimes) if isinstance(runtimes, dict) else [],
        "default_runtime": info.get("DefaultRuntime"),
        "cdi_spec_dirs": list(cdi_dirs) if isinstance(cdi_dirs, list) else None,
        "discovered_devices": discovered,
    }


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the docker unix socket (stdlib only)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def _docker_info_socket(path: str, timeout: float = 5.0) -> dict[str, Any]:
    conn = _UnixHTTPConnection(path, timeout)
    try:
        conn.request("GET", "/info")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise OSError(f"GET /info answered HTTP {resp.status}")
        data = json.loads(body)
    finally:
        conn.close()
    if not isinstance(data, dict):
        raise OSError("GET /info did not answer a JSON object")
    return data


def _docker_info_cli(timeout: float = 10.0) -> dict[str, Any]:
    exe = shutil.which("docker")
    if exe is None:
        raise OSError("no docker CLI on PATH")
    proc = subprocess.run(
        [exe, "info", "--format", "{{json .}}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise OSError(lines[-1] if lines else f"docker info exited {proc.returncode}")
    data = json.loads(proc.stdout)
    if not isinstance(data, dict):
        raise OSError("docker info did not print a JSON object")
    return data


def probe_engine() -> dict[str, Any]:
    """The docker engine: socket present, reachable, runtimes, CDI spec dirs."""
    host = os.environ.get("DOCKER_HOST", "")
    sock_path = host[len("unix://") :] if host.startswith("unix://") else DOCKER_SOCKET
    socket_present = os.path.exists(sock_path) and not (host and not host.startswith("unix://"))
    out: dict[str, Any] = {
        "kind": "docker",
        "socket": sock_path if socket_present else None,
        "reachable": False,
        "via": None,
        "error": None,
        "server_version": None,
        "runtimes": [],
        "default_runtime": None,
        "cdi_spec_dirs": None,
        "discovered_devices": None,
        # Only a local engine's files (CDI specs, the toolkit's hook) can be read from here.
        "local": not host or host.startswith("unix://"),
    }
    errors: list[str] = []
    attempts: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    if socket_present:
        attempts.append(("socket", lambda: _docker_info_socket(sock_path)))
    attempts.append(("cli", _docker_info_cli))
    for via, fn in attempts:
        try:
            info = fn()
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            errors.append(f"{via}: {exc}")
            continue
        out.update(parse_docker_info(info))
        out["reachable"] = True
        out["via"] = via
        return out
    out["error"] = "; ".join(errors) if errors else None
    return out

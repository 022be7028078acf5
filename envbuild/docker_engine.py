"""The Docker engine through docker-py (classic builder). The only module that imports `docker`.

Every docker-py / requests failure is turned into a typed envbuild error here, so nothing above
this module sees a docker exception or a traceback. Containers this module starts are always
removed before `run` returns, also on errors and Ctrl-C.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tarfile
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest

from envbuild.engine import BuildResult, ProgressFn, RunResult, RunSpec, gpu_missing_message
from envbuild.errors import (
    BuildError,
    DiskFullError,
    EngineError,
    GpuUnavailableError,
    UserError,
)

LOG_TAIL_LINES = 25
POLL_S = 0.25
STEP_LINE_MAX = 160

_STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_BUILT_RE = re.compile(r"^Successfully built ([0-9a-f]+)$")
# What the engine prints when a FROM image is missing and cannot be pulled (Docker 20-28).
_PULL_FAILURES = (
    "pull access denied",
    "manifest unknown",
    "not found: manifest",
    "repository does not exist",
    "no such host",
    "dial tcp",
    "tls handshake timeout",
    "i/o timeout",
    "connection refused",
    "context deadline exceeded",
    "x509:",
)
# Docker's message when `--gpus`/DeviceRequest finds no NVIDIA device driver
# (moby daemon/devices.go: `could not select device driver %q with capabilities: %v`).
_NO_GPU_DRIVER = "could not select device driver"

DAEMON_HINT = (
    "start the engine (`sudo systemctl start docker`, or `sudo dockerd &`), check DOCKER_HOST "
    "(now {host}), and that you may use its socket (`docker info`; add yourself to the `docker` "
    "group)"
)


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def context_tar(context: Mapping[str, bytes]) -> bytes:
    """A deterministic tar of the build context: sorted, mtime 0, root-owned, 0644."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(context):
            data = context[name]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class BuildStream:
    """Turns the engine's JSON build stream into progress lines and a result or typed error.

    Pure over its input chunks, so unit tests feed it recorded streams.
    """

    def __init__(self, progress: ProgressFn) -> None:
        self.progress = progress
        self.tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self.step = ""
        self.image_id = ""
        self._partial = ""
        self._in_label = False

    def _line(self, text: str) -> None:
        text = text.rstrip()
        if not text:
            return
        step = _STEP_RE.match(text)
        if step:
            # The classic builder echoes build-API labels as a LABEL step with their values;
            # the lock label is the whole lock, so show the step's start only.
            self._in_label = step.group(3).startswith("LABEL ")
            if len(text) > STEP_LINE_MAX:
                text = text[: STEP_LINE_MAX - 3] + "..."
            self.step = text
        elif self._in_label:
            if not text.startswith(" ---> "):
                return
            self._in_label = False
        built = _BUILT_RE.match(text)
        if built and not self.image_id:
            self.image_id = built.group(1)
        self.tail.append(text)
        self.progress(text)

    def feed(self, chunk: Mapping[str, Any]) -> None:
        if "stream" in chunk:
            text = self._partial + str(chunk["stream"])
            *lines, self._partial = text.split("\n")
            for one in lines:
                self._line(one.replace("\r", ""))
        if "status" in chunk:
            # Pull progress: keep the status lines, drop the byte counters.
            ident = chunk.get("id")
            self._line(f"{ident}: {chunk['status']}" if ident else str(chunk["status"]))
        aux = chunk.get("aux")
        if isinstance(aux, Mapping) and isinstance(aux.get("ID"), str):
            self.image_id = aux["ID"]
        if "error" in chunk or "errorDetail" in chunk:
            detail = chunk.get("errorDetail") or {}
            message = str(chunk.get("error") or detail.get("message") or "unknown build error")
            self.flush()
            raise self.error(message)

    def flush(self) -> None:
        if self._partial:
            rest, self._partial = self._partial, ""
            self._line(rest)

    def error(self, message: str) -> EngineError | BuildError | DiskFullError:
        tail = list(self.tail)
        text = (message + "\n" + "\n".join(tail)).lower()
        fields: dict[str, Any] = {"step": self.step, "log_tail": tail, "engine_message": message}
        if "no space left on device" in text:
            return DiskFullError(
                "the engine ran out of disk space while building"
                + (f" ({self.step})" if self.step else ""),
                hint="free space where Docker keeps its data (`docker system df`, then "
                "`docker image prune` / `docker builder prune`), or move its data-root to a "
                "bigger disk; GPU images need about 10 GB free",
                fields=fields,
            )
        is_from = self.step.split(" : ", 1)[-1].upper().startswith("FROM ")
        # Pull markers only in the engine's own message: a RUN step's pip printing "connection
        # refused" in its output is a failing step, not a failing pull.
        if is_from or any(marker in message.lower() for marker in _PULL_FAILURES):
            base = self.step.split(" : ", 1)[-1][5:].strip() if is_from else ""
            return BuildError(
                f"the base image {base or '(FROM)'} is not in the engine and could not be pulled: "
                f"{message.strip()}",
                hint="pull it where a registry is reachable (`docker pull` / `docker load`), or "
                "pass --base-image with a mirror or a local image (`docker image ls`)",
                fields=fields,
            )
        where = self.step or "the build"
        return BuildError(
            f"build failed at {where}: {message.strip()}",
            hint="read the step's last output lines above (fields.log_tail with --json); fix "
            "the cause (network, index, CA: --ca-cert/--index-url/--find-links) and rerun",
            fields=fields,
        )


class DockerEngine:
    """ContainerEngine over docker-py (classic builder; no BuildKit, no `RUN --mount`)."""

    name = "docker"

    def __init__(self, *, base_url: str | None = None) -> None:
        self._base_url = base_url
        self._client: Any = None

    # --- connection --------------------------------------------------------------------------

    def _daemon_error(self, exc: BaseException) -> EngineError:
        host = self._base_url or docker_host()
        reason = str(exc)
        if "permission denied" in reason.lower():
            message = f"permission denied on the Docker engine socket at {host}"
        else:
            message = f"cannot reach the Docker engine at {host}"
        return EngineError(
            message,
            hint=DAEMON_HINT.format(host=host),
            fields={"docker_host": host, "reason": reason[-500:]},
        )

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                if self._base_url:
                    self._client = docker.DockerClient(base_url=self._base_url, timeout=120)
                else:
                    self._client = docker.from_env(timeout=120)
            except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
                raise self._daemon_error(exc) from None
        return self._client

    def ping(self) -> None:
        try:
            self.client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise self._daemon_error(exc) from None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None
        except docker.errors.APIError as exc:
            raise EngineError(
                f"the engine refused to {what}: {exc.explanation or exc}",
                hint="check `docker info` and the engine's log (`journalctl -u docker`)",
            ) from None

    # --- build -------------------------------------------------------------------------------

    def build(
        self,
        *,
        context: Mapping[str, bytes],
        labels: Mapping[str, str],
        progress: ProgressFn,
        pull: bool = False,
        tag: str | None = None,
    ) -> BuildResult:
        stream = BuildStream(progress)
        try:
            chunks: Iterator[Mapping[str, Any]] = self.client.api.build(
                fileobj=io.BytesIO(context_tar(context)),
                custom_context=True,
                # Intermediate containers are removed even when a step fails.
                rm=True,
                forcerm=True,
                labels=dict(labels),
                pull=pull,
                tag=tag,
                decode=True,
            )
            for chunk in chunks:
                stream.feed(chunk)
            stream.flush()
        except (requests.exceptions.ConnectionError, docker.errors.DockerException) as exc:
            if isinstance(exc, docker.errors.APIError) and exc.status_code is not None:
                err = stream.error(str(exc.explanation or exc))
                raise err from None
            raise self._daemon_error(exc) from None
        if not stream.image_id:
            raise BuildError(
                "the engine finished the build without an image id",
                hint="rerun; if it repeats, check the engine's log",
                fields={"log_tail": list(stream.tail)},
            )
        image_id = stream.image_id
        if not image_id.startswith("sha256:"):
            image_id = self._call("inspect the built image", self.client.images.get, image_id).id
        return BuildResult(image_id=image_id, log_tail=tuple(stream.tail))

    # --- run ---------------------------------------------------------------------------------

    def run(self, spec: RunSpec) -> RunResult:
        kwargs: dict[str, Any] = {
            "image": spec.image,
            "command": list(spec.command),
            "detach": True,
            "shm_size": spec.shm_size,
            "environment": dict(spec.environment),
            "labels": dict(spec.labels),
            # Named up front: a Ctrl-C that lands while `create` is in flight leaves us without
            # the container object, but the name still finds it for removal.
            "name": f"envbuild-smoke-{uuid.uuid4().hex[:16]}",
        }
        if spec.gpus:
            kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        container: Any = None
        started = time.monotonic()
        try:
            container = self._call(
                "create the smoke container", self.client.containers.create, **kwargs
            )
            try:
                container.start()
            except docker.errors.APIError as exc:
                text = str(exc.explanation or exc)
                if _NO_GPU_DRIVER in text or "nvidia-container-cli" in text:
                    message, hint = gpu_missing_message()
                    raise GpuUnavailableError(
                        message, hint=hint, fields={"engine_message": text}
                    ) from None
                raise EngineError(
                    f"the engine could not start the smoke container: {text}",
                    hint="check `docker info` and the engine's log",
                ) from None
            timed_out = False
            exit_code: int | None = None
            while True:
                container.reload()
                if container.status in ("exited", "dead"):
                    exit_code = int(container.attrs["State"]["ExitCode"])
                    break
                if time.monotonic() - started >= spec.timeout_s:
                    timed_out = True
                    # It may exit between the check and the kill.
                    with contextlib.suppress(docker.errors.APIError):
                        container.kill()
                    break
                time.sleep(POLL_S)
            stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
            return RunResult(
                exit_code=None if timed_out else exit_code,
                stdout=stdout,
                stderr=stderr,
                timed_out=timed_out,
                duration_s=round(time.monotonic() - started, 3),
            )
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None
        finally:
            if container is None:
                with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                    container = self.client.containers.get(kwargs["name"])
            if container is not None:
                self._remove_container(container)

    def _remove_container(self, container: Any) -> None:
        # Runs in `finally`, also after Ctrl-C: a second failure must not hide the first.
        for _ in range(3):
            try:
                container.remove(force=True)
                return
            except docker.errors.NotFound:
                return
            except (docker.errors.APIError, requests.exceptions.RequestException):
                time.sleep(0.5)

    # --- images ------------------------------------------------------------------------------

    def tag(self, image_id: str, ref: str, *, labels: Mapping[str, str]) -> str:
        """Adds labels (a new config layer: `FROM <id>` built with the labels through the build
        API, never as Dockerfile text) and tags the result as `ref` ("" = labels only)."""
        dockerfile = f"FROM {image_id}\n".encode()
        result = self.build(
            context={"Dockerfile": dockerfile},
            labels=labels,
            progress=lambda _: None,
            tag=ref or None,
        )
        return result.image_id

    def remove_image(self, image_id: str) -> None:
        """Remove an image nobody else uses. Not forced: a cached build can give a candidate
        the id of an image another tag depends on (it is the parent of an earlier passing
        image), and removing that is not ours to do; the engine's 409 conflict leaves it."""
        try:
            self.client.images.remove(image_id, force=False)
        except docker.errors.ImageNotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                return
            raise EngineError(
                f"could not remove image {image_id}: {exc.explanation or exc}",
                hint=f"remove it by hand: docker image rm {image_id}",
            ) from None
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None

    def image_labels(self, ref: str) -> dict[str, str]:
        try:
            image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            raise UserError(
                f"no image {ref} in the engine",
                hint="list images with `docker image ls`; build one with `envbuild image DIR`",
            ) from None
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None
        labels = image.labels or {}
        return {str(k): str(v) for k, v in labels.items()}

    def image_exists(self, ref: str) -> bool:
        try:
            self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return False
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None
        return True

    def containers(self, label: str) -> list[str]:
        found = self._call(
            "list containers", self.client.containers.list, all=True, filters={"label": label}
        )
        return sorted(str(c.id) for c in found)

    def has_nvidia_runtime(self) -> bool:
        info: dict[str, Any] = self._call("report its configuration", self.client.info)
        return nvidia_available(info, local=_is_local(self._base_url or docker_host()))


def _is_local(host: str) -> bool:
    return host.startswith("unix://") or host.startswith("npipe://")


CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


def nvidia_available(info: Mapping[str, Any], *, local: bool) -> bool:
    """Whether the engine described by `docker info` can attach NVIDIA GPUs.

    Three ways exist: the `nvidia` runtime registered in daemon.json (`Runtimes`); Docker's
    built-in `nvidia` device driver, present when `nvidia-container-runtime-hook` is on the
    daemon's PATH (what `--gpus` uses); CDI specs for `nvidia.com/gpu` (Docker 25+ with CDI on,
    `CDISpecDirs` in `docker info`). Sources: NVIDIA Container Toolkit install guide,
    docs.docker.com/engine/containers/resource_constraints/#gpu, reference/peers.md A4.
    The hook and spec checks read this machine's files, so they only count for a local engine.
    """
    runtimes = info.get("Runtimes") or {}
    if any("nvidia" in str(name).lower() for name in runtimes):
        return True
    if not local:
        return False
    if shutil.which("nvidia-container-runtime-hook"):
        return True
    spec_dirs = [str(d) for d in (info.get("CDISpecDirs") or ())] or list(CDI_DIRS)
    for folder in spec_dirs:
        path = Path(folder)
        if path.is_dir() and any(p.name.startswith("nvidia") for p in path.iterdir()):
            return True
    return False

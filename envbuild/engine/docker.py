"""The Docker engine through docker-py (classic builder); Podman's differences are in
engine/podman.py. Only the engine modules import `docker`.

Every docker-py / requests failure is turned into a typed envbuild error here, so nothing above
this module sees a docker exception or a traceback. Containers this module starts are always
removed before `run` returns, also on errors and Ctrl-C.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
import urllib3.exceptions
from docker.types import DeviceRequest

from envbuild.core.errors import (
    BuildError,
    DiskFullError,
    EngineError,
    EnvbuildError,
    GpuUnavailableError,
    UserError,
)
from envbuild.core.tarball import context_tar as context_tar
from envbuild.engine import podman
from envbuild.engine.address import docker_address
from envbuild.engine.facts import parse_docker_info
from envbuild.engine.protocol import (
    BuildResult,
    ProgressFn,
    RunResult,
    RunSpec,
    kept_container_note,
)
from envbuild.host.gpu_attach import (
    ALL,
    ATTACH_HINT,
    Attachment,
    EngineGpuFacts,
    choose,
    engine_facts,
    unavailable_message,
)
from envbuild.host.probe import probe_cdi, probe_toolkit

LOG_TAIL_LINES = 25
API_TIMEOUT_S = 120
"""docker-py's read timeout of one API call. A smoke poll that outlasts it is asked again
until the smoke's own deadline (`answered_by`): a slow engine is not a dead one."""
LOGS_GRACE_S = 60
"""After the smoke's deadline (or its end), how long a slow engine may take to hand over the
container's output before the run is given up as the engine's failure (exit 4)."""
_PUSHED_RE = re.compile(r"digest: (sha256:[0-9a-f]{64})")
POLL_S = 0.25
REMOVE_GRACE_S = 30
"""How long a container the engine would not remove is asked again before it is reported
left behind (`RunResult.left_behind`)."""
REMOVE_RETRY_S = 0.5
STEP_LINE_MAX = 160

# Docker's classic builder: "Step 3/9 : RUN ..."; Buildah behind Podman's API: "STEP 3/9: RUN ...".
_STEP_RE = re.compile(r"^(?:Step|STEP) (\d+)/(\d+) ?: (.*)$")
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
# What the engine answers when the GPU attach way it was given does not work: `--gpus` without
# an NVIDIA device driver (moby daemon/devices.go: `could not select device driver %q with
# capabilities: %v`), CDI devices no spec names (`unresolvable CDI devices`), CDI off
# (`CDI device injection is disabled`), no such runtime (`unknown or invalid runtime name`;
# Docker 20.10: `Unknown runtime specified nvidia`),
# the toolkit's legacy hook failing (`nvidia-container-cli`).
_GPU_REFUSALS = (
    "could not select device driver",
    "unresolvable CDI devices",
    "CDI device injection",
    "unknown or invalid runtime name",
    "Unknown runtime specified",
    "nvidia-container-cli",
)

DAEMON_HINT = (
    "start the engine (`sudo systemctl start docker`, or `sudo dockerd &`), check DOCKER_HOST "
    "(now {host}), and that you may use its socket (`docker info`; add yourself to the `docker` "
    "group)"
)


def docker_host() -> str:
    return docker_address()


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
        step = _STEP_RE.match(self.step)
        instruction = step.group(3) if step else self.step
        is_from = instruction.upper().startswith("FROM ")
        # Pull markers only in the engine's own message: a RUN step's pip printing "connection
        # refused" in its output is a failing step, not a failing pull.
        if is_from or any(marker in message.lower() for marker in _PULL_FAILURES):
            base = instruction[5:].strip() if is_from else ""
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


T = TypeVar("T")


def stalled(exc: BaseException) -> bool:
    """The engine answered too slowly, as opposed to not at all: a connect or read timeout
    (requests' `Timeout`), or one while reading the body, which requests raises as a
    `ConnectionError` around urllib3's `ReadTimeoutError` (requests/models.py
    `iter_content`). A refused or reset connection is not a stall."""
    if isinstance(exc, requests.exceptions.Timeout):
        return True
    if isinstance(exc, requests.exceptions.ConnectionError):
        inner = exc.args[0] if exc.args else None
        return isinstance(inner, urllib3.exceptions.ReadTimeoutError)
    return False


def answered_by(
    deadline: float, ask: Callable[[], T], *, clock: Callable[[], float] = time.monotonic
) -> tuple[bool, T | None]:
    """(True, ask()) once the engine answers; a question it answered too slowly (`stalled`)
    is asked again while `clock()` is before `deadline`, then (False, None). Anything else,
    a refused connection first, is raised as it is."""
    while True:
        try:
            return True, ask()
        except (requests.exceptions.RequestException, OSError) as exc:
            if not stalled(exc):
                raise
        if clock() >= deadline:
            return False, None


class DockerEngine:
    """ContainerEngine over docker-py (classic builder; no BuildKit, no `RUN --mount`)."""

    name = "docker"

    def __init__(self, *, base_url: str | None = None) -> None:
        self._base_url = base_url
        self._client: Any = None
        self._server: tuple[str, str] | None = None

    # --- connection --------------------------------------------------------------------------

    def _daemon_error(self, exc: BaseException) -> EngineError:
        host = self._base_url or docker_host()
        reason = str(exc)
        if "permission denied" in reason.lower():
            message = f"permission denied on the Docker engine socket at {host}"
        else:
            message = f"cannot reach the Docker engine at {host}"
        hint = (podman.HINT if "podman" in host else DAEMON_HINT).format(host=host)
        return EngineError(
            message,
            hint=hint,
            fields={"docker_host": host, "reason": reason[-500:]},
        )

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                if self._base_url:
                    self._client = docker.DockerClient(
                        base_url=self._base_url, timeout=API_TIMEOUT_S
                    )
                else:
                    self._client = docker.from_env(timeout=API_TIMEOUT_S)
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
        platform: str | None = None,
        tag: str | None = None,
        build_args: Mapping[str, str] | None = None,
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
                # `POST /build?platform=` (API 1.32+): the RUN steps of another architecture
                # run under emulation; the image's config names that architecture.
                platform=platform,
                buildargs=dict(build_args) if build_args else None,
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
        return BuildResult(image_id=image_id, log_tail=tuple(stream.tail), builder=self.builder())

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
        if spec.platform is not None:
            # `POST /containers/create?platform=` (API 1.41): an image of another platform
            # is refused instead of run under whatever emulation happens to be registered.
            kwargs["platform"] = spec.platform
        attached: dict[str, Any] | None = None
        if spec.gpus:
            attachment = spec.gpu_attach or self.gpu_attach()
            attached = attachment.to_json()
            if not attachment.ok:
                message, hint = unavailable_message(attachment)
                raise GpuUnavailableError(
                    message, hint=hint, fields={"gpu_attach": attachment.to_json()}
                )
            kwargs.update(attach_kwargs(attachment, spec.environment))
        container: Any = None
        started = time.monotonic()
        try:
            try:
                container = self._create(kwargs)
                container.start()
            except docker.errors.APIError as exc:
                raise _start_error(exc, gpu_attach=attached) from None
            exit_code, timed_out = _wait(container, started + spec.timeout_s)
            stdout, stderr = _output(container, started + spec.timeout_s)
            duration_s = round(time.monotonic() - started, 3)
            removed = _remove_container(container)
            return RunResult(
                exit_code=None if timed_out else exit_code,
                stdout=stdout,
                stderr=stderr,
                timed_out=timed_out,
                duration_s=duration_s,
                left_behind="" if removed else kwargs["name"],
            )
        except BaseException as exc:
            # Every failure (Ctrl-C too) removes the container first, then says whether it
            # could: a kept one is named with its removal, never left unnoticed.
            kept = "" if self._cleanup(container, kwargs["name"]) else kwargs["name"]
            if isinstance(exc, requests.exceptions.RequestException):
                raise self._run_error(exc, kept) from None
            if kept and isinstance(exc, EnvbuildError):
                exc.hint = (
                    f"{exc.hint}; {kept_container_note(kept)}"
                    if exc.hint
                    else kept_container_note(kept)
                )
                exc.fields["left_behind"] = kept
            raise

    def _cleanup(self, container: Any, name: str) -> bool:
        """After a failure: the container removed (found by its name when `create` never
        answered), True when the engine no longer knows it."""
        if container is None:
            # A slow engine may answer the lookup late too: asked again for a while.
            get = functools.partial(self.client.containers.get, name)
            try:
                container = answered_by(time.monotonic() + LOGS_GRACE_S, get)[1]
            except docker.errors.NotFound:
                return True
            except (docker.errors.DockerException, requests.RequestException):
                return False
            if container is None:
                return False  # the engine never answered the lookup
        return _remove_container(container)

    def _run_error(self, exc: requests.exceptions.RequestException, kept: str) -> EngineError:
        """The engine's failure while the smoke container ran, saying what became of it."""
        if not stalled(exc):
            error = self._daemon_error(exc)
        else:
            # Past the smoke's deadline (polls are asked again until then: `_wait`), or while
            # creating or starting the container.
            error = EngineError(
                f"the engine stopped answering while the smoke container ran: {exc}",
                hint="check the engine's load and log (`docker info`, `journalctl -u docker`), "
                "then rerun",
            )
        error.hint += (
            f"; {kept_container_note(kept)}" if kept else "; the smoke container was removed"
        )
        if kept:
            error.fields["left_behind"] = kept
        return error

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
        """Remove an image nobody else uses, and only it. Not forced: a cached build can give
        a candidate the id of an image another tag depends on (it is the parent of an earlier
        passing image), and removing that is not ours to do; the engine's 409 conflict leaves
        it. `noprune`: docker's default also deletes the untagged parents, which are the
        classic builder's layer cache, so a rebuild after a fix would run every step again
        (`DELETE /images/{name}?noprune=1`, docs.docker.com/reference/api/engine/)."""
        try:
            self.client.images.remove(image_id, force=False, noprune=True)
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

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        """(image id, registry digest or None) of `ref`, pulled first when the engine lacks
        it. The digest is the one the registry stored for `ref`'s repository (RepoDigests);
        an image built or imported here has none."""
        try:
            image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            if not pull:
                raise UserError(f"no image {ref} in the engine") from None
            image = self._pull(ref)
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None
        repo = ref.split("@", 1)[0]
        if ":" in repo.rsplit("/", 1)[-1]:  # a tag, not a registry port
            repo = repo.rsplit(":", 1)[0]
        digests = [d for d in image.attrs.get("RepoDigests") or [] if d.split("@")[0] == repo]
        return str(image.id), (digests[0].split("@", 1)[1] if digests else None)

    def _pull(self, ref: str) -> Any:
        try:
            return self.client.images.pull(ref)
        except docker.errors.APIError as exc:
            raise UserError(
                f"the base image {ref} is not in the engine and could not be pulled: "
                f"{exc.explanation or exc}",
                hint="pull or load it first (`docker pull`, `docker load`), or check the name",
            ) from None
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None

    def containers(self, label: str) -> list[str]:
        found = self._call(
            "list containers", self.client.containers.list, all=True, filters={"label": label}
        )
        return sorted(str(c.id) for c in found)

    # --- which engine, which builder ------------------------------------------------------

    def server(self) -> tuple[str, str]:
        """("Docker", "20.10.24+dfsg1") or ("Podman", "4.3.1"): who answers on the socket
        (Podman's Docker-compatible API names itself in `GET /version`'s Components)."""
        if self._server is None:
            info: dict[str, Any] = self._call("report its version", self.client.version)
            product = "Podman" if podman.answers_podman(info) else "Docker"
            self._server = (product, str(info.get("Version") or "?"))
        return self._server

    @property
    def is_podman(self) -> bool:
        return self.server()[0] == "Podman"

    def builder(self) -> str:
        """The builder behind the build API, in words (`envbuild image` prints it)."""
        product, version = self.server()
        if product == "Podman":
            return podman.builder(version)
        return f"classic builder (Docker {version})"

    def _create(self, kwargs: dict[str, Any]) -> Any:
        """`containers.create`, except for CDI devices on Podman, which its own API creates
        (`podman.create_with_cdi` says why)."""
        cdi = podman.cdi_devices(kwargs)
        if not (cdi and self.is_podman):
            return self.client.containers.create(**kwargs)
        return podman.create_with_cdi(self.client, kwargs, cdi)

    # --- registry and archive -----------------------------------------------------------

    def push(self, image: str, ref: str, *, progress: ProgressFn) -> str:
        """Tag `image` as `ref` and push it; the digest the registry stored. Retrying is the
        engine's: dockerd retries each layer upload 5 times (measured on 20.10: a registry
        answering 503 is asked 5 times over about 50 s, "Retrying in N seconds") and stops at
        once on answers that retrying cannot fix (401/403, 429 `toomanyrequests`)."""
        from envbuild.engine.registry import push_error, split_tag

        repo, tag = split_tag(ref)
        self._call("tag the image for the push", self.client.api.tag, image, repo, tag)
        digest = ""
        try:
            for chunk in self.client.api.push(repo, tag=tag, stream=True, decode=True):
                if "error" in chunk or "errorDetail" in chunk:
                    detail = chunk.get("errorDetail") or {}
                    raise push_error(ref, str(chunk.get("error") or detail.get("message")))
                aux = chunk.get("aux")
                if isinstance(aux, Mapping) and str(aux.get("Digest", "")).startswith("sha256:"):
                    digest = str(aux["Digest"])
                status = str(chunk.get("status") or "")
                # Podman's compatible API sends no aux; its status line has the digest.
                found = _PUSHED_RE.search(status)
                if found and not digest:
                    digest = found.group(1)
                if status and not chunk.get("progress"):
                    ident = chunk.get("id")
                    progress(f"{ident}: {status}" if ident else status)
        except docker.errors.APIError as exc:
            raise push_error(ref, str(exc.explanation or exc)) from None
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None
        if not digest:
            raise push_error(ref, "the engine finished the push without reporting a digest")
        return digest

    def save(self, ref: str, dest: Path) -> int:
        """`docker save REF` into `dest` (a docker-archive: what `apptainer build x.sif
        docker-archive://FILE` and `podman load` read), streamed and written atomically."""
        from envbuild.core.fsio import write_output

        written = 0

        def counted(chunks: Any) -> Any:  # a FIFO or a terminal has no size to stat after
            nonlocal written
            for chunk in chunks:
                written += len(chunk)
                yield chunk

        try:
            write_output(dest, counted(self.client.api.get_image(ref)), what="--save")
        except docker.errors.ImageNotFound:
            raise UserError(f"no image {ref} in the engine to save") from None
        except docker.errors.APIError as exc:
            raise EngineError(
                f"the engine could not export {ref}: {exc.explanation or exc}",
                hint="check the engine's log and the free space where the archive goes",
            ) from None
        except requests.exceptions.ConnectionError as exc:
            raise self._daemon_error(exc) from None
        except OSError as exc:
            raise UserError(
                f"cannot write {dest}: {exc.strerror or exc}",
                hint="pass --save a path in a writable folder with room for the whole image",
            ) from None
        return written

    # --- GPUs ----------------------------------------------------------------------------

    def gpu_facts(self) -> EngineGpuFacts:
        """What `gpu_attach.choose` needs: `docker info`, and for a local engine the CDI
        specs in the folders it reads and the toolkit's hook on this machine."""
        info: dict[str, Any] = self._call("report its configuration", self.client.info)
        engine = parse_docker_info(info)
        engine["local"] = _is_local(self._base_url or docker_host())
        if self.is_podman:
            engine = podman.gpu_engine_facts(engine)
        specs = probe_cdi(engine["cdi_spec_dirs"] or ()) if engine["local"] else []
        hook = probe_toolkit()["nvidia_container_runtime_hook"] if engine["local"] else None
        hook = None if self.is_podman else hook
        return engine_facts(engine, cdi_specs=specs, runtime_hook=hook)

    def gpu_attach(self, *, want: str = "auto", devices: tuple[str, ...] = (ALL,)) -> Attachment:
        return choose(self.gpu_facts(), want=want, devices=devices)

    def has_nvidia_runtime(self) -> bool:
        return self.gpu_attach().ok


def _remove_container(container: Any, grace_s: float | None = None) -> bool:
    """Remove the container, asked again for up to `grace_s` (REMOVE_GRACE_S); True once the engine no
    longer knows it. Runs in `finally` too (after Ctrl-C), so it never raises: a second
    failure must not hide the first. Podman answers a removal racing its own cleanup of
    an exited container with 500 ("container state improper", "unlinkat ...: directory
    not empty": github.com/containers/podman issues 6260, 7535). CI once found a Podman
    smoke container left after a pass, when this gave up in silence after 3 tries in 1.5 s."""
    deadline = time.monotonic() + (REMOVE_GRACE_S if grace_s is None else grace_s)
    unanswered = 0
    while True:
        try:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
            # Gone only when the engine says so: a removal it answered may still be running.
            container.reload()
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError:
            unanswered = 0  # it answered, refusing: asked again until the deadline
        except requests.exceptions.RequestException:
            unanswered += 1  # no engine to ask (it stopped or went away): not for long
            if unanswered >= 3:
                return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(REMOVE_RETRY_S)


def _wait(container: Any, deadline: float) -> tuple[int | None, bool]:
    """(exit code, False) once the container exits; (None, True) at `deadline`, the container
    killed. A poll the engine answers too slowly is asked again until then (`answered_by`):
    under load one inspect took longer than docker-py's read timeout while the smoke had
    minutes left, and the whole gate was given up (exit 4)."""
    while True:
        answered, _ = answered_by(deadline, container.reload)
        if answered and container.status in ("exited", "dead"):
            return int(container.attrs["State"]["ExitCode"]), False
        if time.monotonic() >= deadline:
            # It may exit between the check and the kill; a slow engine may not answer it
            # (the container is removed with force below either way).
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.Timeout):
                container.kill()
            return None, True
        time.sleep(POLL_S)


def _output(container: Any, deadline: float) -> tuple[str, str]:
    """The container's stdout and stderr; a slow engine has until LOGS_GRACE_S past the
    smoke's deadline (or now, when later), then the run is the engine's failure."""
    until = max(deadline, time.monotonic()) + LOGS_GRACE_S
    out = []
    for stdout in (True, False):
        answered, data = answered_by(
            until, functools.partial(container.logs, stdout=stdout, stderr=not stdout)
        )
        if not answered:
            raise requests.exceptions.ReadTimeout(
                f"no answer for the smoke container's output within {LOGS_GRACE_S} s of its end"
            )
        out.append(bytes(data or b"").decode("utf-8", "replace"))
    return out[0], out[1]


def _start_error(
    exc: docker.errors.APIError, *, gpu_attach: dict[str, Any] | None
) -> EngineError | GpuUnavailableError:
    """A refused create/start: exit 7 when it is the GPU attach way that failed."""
    text = str(exc.explanation or exc)
    if gpu_attach is not None and any(m in text for m in _GPU_REFUSALS):
        return GpuUnavailableError(
            f"the engine refused to attach NVIDIA GPUs through {gpu_attach['way']} "
            f"({gpu_attach['reason']}): {text.strip()}",
            hint=ATTACH_HINT,
            fields={"engine_message": text, "gpu_attach": gpu_attach},
        )
    return EngineError(
        f"the engine could not start the smoke container: {text}",
        hint="check `docker info` and the engine's log",
        fields={"engine_message": text},
    )


def _is_local(host: str) -> bool:
    return host.startswith("unix://") or host.startswith("npipe://")


def attach_kwargs(attachment: Attachment, environment: Mapping[str, str]) -> dict[str, Any]:
    """docker-py `containers.create` arguments for one attach way (gpu_attach.py says which
    works where). `--gpus` with devices names them as `device_ids`, as `docker run --gpus
    '"device=0,1"'` does."""
    devices = list(attachment.devices)
    every = devices == [ALL]
    if attachment.way == "cdi":
        requests_ = [DeviceRequest(driver="cdi", device_ids=attachment.cdi_device_ids())]
        return {"device_requests": requests_}
    if attachment.way == "gpus":
        if every:
            return {"device_requests": [DeviceRequest(count=-1, capabilities=[["gpu"]])]}
        return {"device_requests": [DeviceRequest(device_ids=devices, capabilities=[["gpu"]])]}
    # The nvidia runtime reads the devices and driver capabilities from the environment
    # (docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html).
    env = {
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        **environment,
        "NVIDIA_VISIBLE_DEVICES": ",".join(devices),
    }
    return {"runtime": attachment.runtime or "nvidia", "environment": env}

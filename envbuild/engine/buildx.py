"""BuildKit through the `docker buildx build` CLI, used when the user passes --buildkit.

Only the build differs from `DockerEngine`: the context is written to a temporary folder and
built by `docker buildx build --load` (BuildKit features such as `RUN --mount` work there);
labels are then added through the engine API by `DockerEngine` (a `FROM <id>` step with the
labels as build-API parameters), never as Dockerfile text or command-line arguments: the lock
label is the whole lock, which can exceed Linux's 128 KiB limit on one argument
(MAX_ARG_STRLEN, execve(2)). Running, tagging, pushing and cleanup are `DockerEngine`'s.

Secrets (the proxy CA) are files of the context named to `docker buildx build --secret`, so
they reach only the `RUN --mount=type=secret` steps and no layer. `--cache-from`/`--cache-to`
are passed through as given (docs.docker.com/build/cache/backends/); with buildx's default
`docker` driver only `type=inline` exports, which the error explains.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envbuild.core import fsio
from envbuild.core.errors import BuildError, UserError
from envbuild.engine.docker import BuildStream, DockerEngine
from envbuild.engine.protocol import BuildResult, ProgressFn, RunResult, RunSpec
from envbuild.host.gpu_attach import ALL, Attachment

# `#7 [3/5] RUN pip install ...` in buildx's plain progress output.
_STEP_RE = re.compile(r"^#\d+ (\[[^\]]+\] .*)$")
# `github.com/docker/buildx 0.13.1+ds1 0.13.1+ds1-3` (`docker buildx version`).
_VERSION_RE = re.compile(r"^\S+ v?(\S+)")
# What buildx says when the builder's driver cannot export a cache type (buildx
# build/build.go: "Cache export is not supported for the docker driver").
_NO_CACHE_EXPORT = ("cache export is not supported", "cache export feature is currently not")


@dataclass(frozen=True)
class BuildxOptions:
    """What a BuildKit build takes beyond the context (`envbuild image` flags)."""

    cache_from: tuple[str, ...] = ()
    """`--cache-from` values, e.g. `type=registry,ref=REG/IMG:cache`."""
    cache_to: tuple[str, ...] = ()
    """`--cache-to` values, e.g. `type=inline` or `type=registry,ref=...,mode=max`."""
    secrets: Mapping[str, str] | None = None
    """Secret id -> path of the file in the context (sent when the context has it)."""


def buildx_command(
    *,
    context_dir: Path,
    iidfile: Path,
    pull: bool = False,
    docker: str = "docker",
    options: BuildxOptions | None = None,
    platform: str | None = None,
    build_args: Mapping[str, str] | None = None,
) -> list[str]:
    """The `docker buildx build` command line for one build (unit-tested)."""
    options = options or BuildxOptions()
    cmd = [
        docker,
        "buildx",
        "build",
        "--load",
        "--progress=plain",
        "--iidfile",
        str(iidfile),
        "--file",
        str(context_dir / "Dockerfile"),
    ]
    for secret_id, rel in sorted((options.secrets or {}).items()):
        if (context_dir / rel).is_file():
            cmd += ["--secret", f"id={secret_id},src={context_dir / rel}"]
    for spec in options.cache_from:
        cmd += ["--cache-from", spec]
    for spec in options.cache_to:
        cmd += ["--cache-to", spec]
    if platform is not None:
        cmd += ["--platform", platform]
    for name, value in sorted((build_args or {}).items()):
        cmd += ["--build-arg", f"{name}={value}"]
    if pull:
        cmd.append("--pull")
    cmd.append(str(context_dir))
    return cmd


def buildx_version(docker: str = "docker") -> str | None:
    """The buildx plugin's version ("0.13.1+ds1"), None when the CLI or plugin is missing."""
    if shutil.which(docker) is None:
        return None
    try:
        done = subprocess.run(
            [docker, "buildx", "version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    found = _VERSION_RE.match(done.stdout.strip())
    return found.group(1) if found else "?"


def buildx_available(docker: str = "docker") -> bool:
    """True when the docker CLI and its buildx plugin answer."""
    return buildx_version(docker) is not None


def write_context(context: Mapping[str, bytes], root: Path) -> None:
    for name in sorted(context):
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise UserError(f"build context path {name!r} leaves the context")
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(context[name])


def _failure(stream: BuildStream, code: int) -> Exception:
    errors = [t for t in stream.tail if t.startswith("ERROR")]
    message = errors[-1] if errors else f"docker buildx exited {code}"
    if any(marker in message.lower() for marker in _NO_CACHE_EXPORT):
        return UserError(
            f"this buildx builder cannot export that cache: {message}",
            hint="use --cache-to type=inline with buildx's default `docker` driver, or make a "
            "builder that exports every type: `docker buildx create --use "
            "--driver docker-container` (docs.docker.com/build/cache/backends/)",
            fields={"log_tail": list(stream.tail)},
        )
    return stream.error(message)


class BuildxEngine:
    """ContainerEngine whose builds go through BuildKit (`docker buildx`)."""

    name = "buildx"

    def __init__(
        self,
        *,
        docker_engine: DockerEngine | None = None,
        docker: str = "docker",
        options: BuildxOptions | None = None,
    ):
        self.docker = docker_engine or DockerEngine()
        self.docker_cli = docker
        self.options = options or BuildxOptions()
        self._version: str | None = None

    def ping(self) -> None:
        self.docker.ping()
        if self.docker.is_podman:
            raise UserError(
                "--buildkit needs Docker's buildx, and the engine answering is Podman",
                hint="drop --buildkit: with Podman, envbuild builds through Buildah",
            )
        self._version = buildx_version(self.docker_cli)
        if self._version is None:
            raise UserError(
                "--buildkit needs the `docker buildx` plugin, which is not installed here",
                hint="install it (Debian 13 / Ubuntu: `apt-get install docker-buildx`; Debian "
                "12: `tools/install-buildx` in envbuild's repository; Docker's repo: "
                "docker-buildx-plugin) and check with `docker buildx version`, or drop "
                "--buildkit to build with the classic builder",
            )

    def builder(self) -> str:
        product, server = self.docker.server()
        return f"BuildKit (docker buildx {self._version or '?'}, {product} {server})"

    def build(
        self,
        *,
        context: Mapping[str, bytes],
        labels: Mapping[str, str],
        progress: ProgressFn,
        pull: bool = False,
        platform: str | None = None,
        build_args: Mapping[str, str] | None = None,
    ) -> BuildResult:
        stream = BuildStream(progress)
        fsio.remove_dead_temp()
        with tempfile.TemporaryDirectory(prefix=fsio.temp_prefix("envbuild-ctx-")) as tmp:
            root = Path(tmp) / "context"
            root.mkdir()
            write_context(context, root)
            iidfile = Path(tmp) / "iid"
            cmd = buildx_command(
                context_dir=root,
                iidfile=iidfile,
                pull=pull,
                docker=self.docker_cli,
                options=self.options,
                platform=platform,
                build_args=build_args or {},
            )
            code = _run_buildx(cmd, stream)
            stream.flush()
            if code != 0:
                raise _failure(stream, code)
            image_id = iidfile.read_text().strip() if iidfile.exists() else ""
        if not image_id:
            raise BuildError(
                "docker buildx finished without an image id",
                hint="check that the build used --load (a docker-container builder needs it)",
            )
        if labels:
            # Labels through the engine API, never on the command line (see module docstring).
            image_id = self.docker.tag(image_id, "", labels=labels)
        return BuildResult(image_id=image_id, log_tail=tuple(stream.tail), builder=self.builder())

    def run(self, spec: RunSpec) -> RunResult:
        return self.docker.run(spec)

    def tag(self, image_id: str, ref: str, *, labels: Mapping[str, str]) -> str:
        return self.docker.tag(image_id, ref, labels=labels)

    def remove_image(self, image_id: str) -> None:
        """`DockerEngine.remove_image`: the candidate (the labelled `FROM <id>` image) goes,
        the image buildx loaded stays as its parent, and BuildKit's own cache is the
        builder's, not an image (`docker buildx du` lists it): no image removal touches it."""
        self.docker.remove_image(image_id)

    def image_labels(self, ref: str) -> dict[str, str]:
        return self.docker.image_labels(ref)

    def image_exists(self, ref: str) -> bool:
        return self.docker.image_exists(ref)

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        return self.docker.image_ids(ref, pull=pull)

    def containers(self, label: str) -> list[str]:
        return self.docker.containers(label)

    def has_nvidia_runtime(self) -> bool:
        return self.docker.has_nvidia_runtime()

    def gpu_attach(self, *, want: str = "auto", devices: tuple[str, ...] = (ALL,)) -> Attachment:
        return self.docker.gpu_attach(want=want, devices=devices)

    def push(self, image: str, ref: str, *, progress: ProgressFn) -> str:
        return self.docker.push(image, ref, progress=progress)

    def save(self, ref: str, dest: Path) -> int:
        return self.docker.save(ref, dest)


def _run_buildx(cmd: Sequence[str], stream: BuildStream) -> int:
    """Run buildx, feeding its plain progress to `stream`; its exit code. Killed on any
    exception (Ctrl-C included), so no build outlives envbuild."""
    env = {**os.environ, "BUILDKIT_PROGRESS": "plain"}
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
        )
    except OSError as exc:
        raise UserError(
            f"cannot run {cmd[0]}: {exc}", hint="install the docker CLI with buildx"
        ) from None
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            step = _STEP_RE.match(line)
            if step and not step.group(1).startswith("[internal]"):
                stream.step = step.group(1)
            stream.feed({"stream": line + "\n"})
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

"""BuildKit through the `docker buildx build` CLI, used when the user passes --buildkit.

Only the build differs from `DockerEngine`: the context is written to a temporary folder and
built by `docker buildx build --load` (BuildKit features such as `RUN --mount` work there);
labels are then added through the engine API by `DockerEngine` (a `FROM <id>` step with the
labels as build-API parameters), never as Dockerfile text or command-line arguments: the lock
label is the whole lock, which can exceed Linux's 128 KiB limit on one argument
(MAX_ARG_STRLEN, execve(2)). Running, tagging and cleanup are `DockerEngine`'s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from envbuild.docker_engine import BuildStream, DockerEngine
from envbuild.engine import BuildResult, ProgressFn, RunResult, RunSpec
from envbuild.errors import BuildError, UserError

# `#7 [3/5] RUN pip install ...` in buildx's plain progress output.
_STEP_RE = re.compile(r"^#\d+ (\[[^\]]+\] .*)$")


def buildx_command(
    *, context_dir: Path, iidfile: Path, pull: bool = False, docker: str = "docker"
) -> list[str]:
    """The `docker buildx build` command line for one build (unit-tested)."""
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
    if pull:
        cmd.append("--pull")
    cmd.append(str(context_dir))
    return cmd


def buildx_available(docker: str = "docker") -> bool:
    """True when the docker CLI and its buildx plugin answer."""
    if shutil.which(docker) is None:
        return False
    try:
        done = subprocess.run(
            [docker, "buildx", "version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def write_context(context: Mapping[str, bytes], root: Path) -> None:
    for name in sorted(context):
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise UserError(f"build context path {name!r} leaves the context")
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(context[name])


class BuildxEngine:
    """ContainerEngine whose builds go through BuildKit (`docker buildx`)."""

    name = "buildx"

    def __init__(self, *, docker_engine: DockerEngine | None = None, docker: str = "docker"):
        self.docker = docker_engine or DockerEngine()
        self.docker_cli = docker

    def ping(self) -> None:
        self.docker.ping()
        if not buildx_available(self.docker_cli):
            raise UserError(
                "--buildkit needs the `docker buildx` plugin, which is not installed here",
                hint="install it (Debian: `apt-get install docker-buildx`; Docker's repo: "
                "docker-buildx-plugin) and check with `docker buildx version`, or drop "
                "--buildkit to build with the classic builder",
            )

    def build(
        self,
        *,
        context: Mapping[str, bytes],
        labels: Mapping[str, str],
        progress: ProgressFn,
        pull: bool = False,
    ) -> BuildResult:
        stream = BuildStream(progress)
        with tempfile.TemporaryDirectory(prefix="envbuild-ctx-") as tmp:
            root = Path(tmp) / "context"
            root.mkdir()
            write_context(context, root)
            iidfile = Path(tmp) / "iid"
            cmd = buildx_command(
                context_dir=root, iidfile=iidfile, pull=pull, docker=self.docker_cli
            )
            env = {**os.environ, "BUILDKIT_PROGRESS": "plain"}
            try:
                proc = subprocess.Popen(
                    cmd,
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
                code = proc.wait()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            stream.flush()
            if code != 0:
                errors = [t for t in stream.tail if t.startswith("ERROR")]
                raise stream.error(errors[-1] if errors else f"docker buildx exited {code}")
            image_id = iidfile.read_text().strip() if iidfile.exists() else ""
        if not image_id:
            raise BuildError(
                "docker buildx finished without an image id",
                hint="check that the build used --load (a docker-container builder needs it)",
            )
        if labels:
            # Labels through the engine API, never on the command line (see module docstring).
            image_id = self.docker.tag(image_id, "", labels=labels)
        return BuildResult(image_id=image_id, log_tail=tuple(stream.tail))

    def run(self, spec: RunSpec) -> RunResult:
        return self.docker.run(spec)

    def tag(self, image_id: str, ref: str, *, labels: Mapping[str, str]) -> str:
        return self.docker.tag(image_id, ref, labels=labels)

    def remove_image(self, image_id: str) -> None:
        self.docker.remove_image(image_id)

    def image_labels(self, ref: str) -> dict[str, str]:
        return self.docker.image_labels(ref)

    def image_exists(self, ref: str) -> bool:
        return self.docker.image_exists(ref)

    def containers(self, label: str) -> list[str]:
        return self.docker.containers(label)

    def has_nvidia_runtime(self) -> bool:
        return self.docker.has_nvidia_runtime()

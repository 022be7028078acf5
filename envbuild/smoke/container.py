"""The one smoke container (pure): what every runner of an image's payload starts with, worked
out once from the lock's smoke settings. `envbuild image` (a candidate), `validate` (a built
image on this host) and validate's Kubernetes Job (a built image on a node) all read it, so
they run the same command with the same /dev/shm and time limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from envbuild.core.models import SmokeSettings
from envbuild.engine.protocol import RunResult, RunSpec, kept_container_note
from envbuild.host.gpu_attach import Attachment
from envbuild.smoke.plan import kill_after_s, payload_command

DEFAULT_SHM_MIB = 2048
"""Docker's default /dev/shm is 64 MB; DataLoader workers and NCCL need far more
(https://docs.docker.com/reference/cli/docker/container/run/#shm-size; NCCL's
troubleshooting page names /dev/shm as the cause of its "Bus error" failures)."""

# Host variables a smoke container inherits: NCCL's own settings (a node whose NVLink multicast
# must stay off runs with NCCL_NVLS_ENABLE=0; a NIC choice is NCCL_SOCKET_IFNAME), as the
# variables are listed in https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html.
PASSTHROUGH_PREFIXES = ("NCCL_", "TORCH_NCCL_", "NVSHMEM_")
ROLE_LABEL = "envbuild.role"
"""The label of every container envbuild starts (`envbuild.role=smoke`)."""


def left_behind_note(result: RunResult) -> str:
    """What to tell the user when the engine would not remove a smoke container ("" when it
    did): its name and how to remove it, so nothing is left behind unnoticed."""
    return f"warning: {kept_container_note(result.left_behind)}" if result.left_behind else ""


def shm_mib_for(min_shm_mib: int) -> int:
    """At least what the plan needs (the payload asserts it), and never below 2 GiB."""
    return max(DEFAULT_SHM_MIB, min_shm_mib)


def passthrough_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The NCCL settings of the invoking environment, for the smoke container (sorted)."""
    return {
        key: environ[key]
        for key in sorted(environ)
        if key.startswith(PASSTHROUGH_PREFIXES) and "\n" not in environ[key]
    }


@dataclass(frozen=True)
class SmokeLimits:
    """The /dev/shm size and the time limits of one smoke run (`limits_for`)."""

    shm_mib: int
    kill_after_s: int
    """When a runner kills the container (`plan.kill_after_s` of the plan's timeout, or
    --smoke-timeout)."""
    timeout_s: int | None = None
    """The plan's timeout_s, when known: the payload's own watchdog fires then, and a
    Kubernetes Job's deadline counts from it."""


def limits_for(settings: SmokeSettings, *, kill_after: int | None = None) -> SmokeLimits:
    """The limits of a lock's smoke settings; `kill_after` (seconds, --smoke-timeout)
    replaces the kill time the plan's timeout gives."""
    return SmokeLimits(
        shm_mib=shm_mib_for(settings.min_shm_mib),
        kill_after_s=kill_after or kill_after_s(settings.timeout_s),
        timeout_s=int(settings.timeout_s),
    )


@dataclass(frozen=True)
class SmokeContainer:
    """The smoke container of one image: what a container engine runs (`run_spec`) and what a
    Kubernetes Job carries (command, shm_mib, environment, limits)."""

    image: str
    command: tuple[str, ...]
    limits: SmokeLimits
    attach: Attachment | None = None
    """The GPUs to attach, the way chosen (None: no GPU)."""
    environment: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def shm_mib(self) -> int:
        return self.limits.shm_mib

    def run_spec(self) -> RunSpec:
        """The engine's RunSpec: killed at `limits.kill_after_s`."""
        return RunSpec(
            image=self.image,
            command=self.command,
            gpus=self.attach is not None,
            gpu_attach=self.attach,
            shm_size=f"{self.limits.shm_mib}m",
            timeout_s=self.limits.kill_after_s,
            environment=dict(self.environment),
            labels=dict(self.labels),
        )


def smoke_container(
    image: str,
    limits: SmokeLimits,
    *,
    allow_cpu: bool,
    attach: Attachment | None,
    environ: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
) -> SmokeContainer:
    """The one smoke container (`image` tests a candidate, `validate` a built image): the image's
    own payload and plan, the GPUs `attach` names (None: none), the NCCL settings of `environ`,
    and the ROLE_LABEL every smoke container carries so a leftover one can be found."""
    return SmokeContainer(
        image=image,
        command=payload_command(allow_cpu=allow_cpu),
        limits=limits,
        attach=attach,
        environment=passthrough_environment(environ),
        labels={ROLE_LABEL: "smoke", **(labels or {})},
    )

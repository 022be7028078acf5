"""The `envbuild image` use case: fresh lock -> build context -> build -> smoke in the
container -> tag only on pass (`envbuild.build.pipeline` does the engine part over any engine).

Never re-resolves: a stale lock stops here with the command to run (StaleLockError). Raises
GpuUnavailableError (7) before building when a GPU image cannot get a GPU, BuildError (5) /
DiskFullError (3) / EngineError (4) from the engine, SmokeFailed (6); after a pass,
`--save` writes a docker-archive and `--push` pushes (RegistryError (8) when the registry
refuses: the image stays tagged here).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envbuild import matrix as matrix_data
from envbuild.app import evidence, inputs
from envbuild.app.project_version import project_version
from envbuild.build.pipeline import (
    ImageJob,
    ImageOutcome,
    Judge,
    PassStore,
    StepClock,
    build_and_verify,
    default_tag,
)
from envbuild.core.errors import EnvbuildError, RegistryError, UserError
from envbuild.core.fsio import check_output
from envbuild.core.models import ENGINE_PLATFORMS, Lock
from envbuild.core.values import parse_image_ref
from envbuild.engine import select
from envbuild.engine.protocol import ContainerEngine, RunResult
from envbuild.engine.registry import split_tag
from envbuild.host.gpu_attach import GpuChoice
from envbuild.lock import format as lock_format
from envbuild.lock.format import lock_sha256
from envbuild.payload.smoke_checks import SmokePlan
from envbuild.render.dockerfile import (
    CA_CONTEXT_PATH,
    CA_SECRET_ID,
    BuildInputs,
    build_context,
    render_options,
    wheel_paths,
)
from envbuild.render.local_wheels import lock_wheelhouse
from envbuild.request.project import VERSION_ARG
from envbuild.request.sourcetree import CONTEXT_DIR
from envbuild.smoke import plan as smoke
from envbuild.smoke.container import limits_for


@dataclass(frozen=True)
class ImageRequest:
    """One `envbuild image` run's choices beyond the build inputs."""

    tag: str | None = None
    allow_cpu: bool = False
    smoke_timeout: int | None = None
    """Seconds before the smoke container is killed; None = the one smoke timeout rule."""
    keep_failed: bool = False
    push: str | None = None
    """After a pass, push to this reference ("" = the tag); None = no push."""
    save: Path | None = None
    """After a pass, write the image as a docker-archive here; None = no archive."""
    engine: str = select.DEFAULT_ENGINE
    """A name in the engine registry (`envbuild.engine.select.ENGINES`)."""
    cache_from: tuple[str, ...] = ()
    """BuildKit `--cache-from` specs, passed through (needs --buildkit)."""
    cache_to: tuple[str, ...] = ()
    """BuildKit `--cache-to` specs, passed through (needs --buildkit)."""
    gpu: GpuChoice = field(default_factory=GpuChoice)
    """How the smoke container gets its GPUs (`--gpu-attach`, `--gpu-devices`)."""
    resmoke: bool = False
    """Run the smoke test even when this image id already passed it on this host."""
    record_passes: bool = True
    """Look up and record smoke passes (`envbuild.build.passes`); False: neither."""
    sign_key: Path | None = None
    """After a pass, sign a smoke attestation and the SBOM with this PEM private key."""
    evidence: Path | None = None
    """A folder for the attestation bundle and SBOM (besides the `--save` archive's)."""


def build_image(
    *,
    image_dir: Path,
    request: ImageRequest | None = None,
    build_inputs: BuildInputs | None = None,
    progress: Callable[[str], None] | None = None,
    engine: ContainerEngine | None = None,
    matrix_overlay: Path | None = None,
) -> ImageOutcome:
    """`envbuild image DIR`: the tagged image that passed its smoke test, saved and pushed
    when asked (only then: `build_and_verify` raises on every failure, so a failing image is
    never pushed)."""
    request = request or ImageRequest()
    build_inputs = build_inputs or BuildInputs()
    progress = progress or (lambda _: None)
    clock = StepClock()
    with clock.step("inputs"):
        # A key that cannot sign fails now, not after a build of many minutes.
        check_delivery(request, buildkit=build_inputs.buildkit)
        signer = evidence.load_signer(request.sign_key) if request.sign_key is not None else None
        job, judge = prepare(
            image_dir=image_dir,
            request=request,
            build_inputs=build_inputs,
            matrix_overlay=matrix_overlay,
            progress=progress,
        )
    with clock.step("engine"):
        engine = engine or _default_engine(request, build_inputs)
    with clock.step("pass_store"):
        passes = pass_store(engine, job, request) if request.record_passes else None
    if passes is not None:
        # Under --resmoke too: the store finds nothing then, but records this run's pass.
        with clock.step("context_key"):
            job = replace(job, context_key=context_key(engine, job))
            if job.context_key and has_project_files(job):
                job = replace(job, env_key=context_key(engine, job, environment=True))
    outcome = build_and_verify(
        engine, job, judge=judge, progress=progress, passes=passes, clock=clock
    )
    with clock.step("deliver"):
        outcome = deliver(engine, outcome, push=request.push, save=request.save, progress=progress)
    if signer is not None:
        with clock.step("attest"):
            outcome = attest(outcome, request, signer=signer, engine=engine.name, progress=progress)
    return replace(outcome, steps_s=dict(clock.seconds))


def _default_engine(request: ImageRequest, build_inputs: BuildInputs) -> ContainerEngine:
    """The engine the request names, with the BuildKit options it asks for."""
    from envbuild.engine.buildx import BuildxOptions

    buildx = BuildxOptions(
        cache_from=request.cache_from,
        cache_to=request.cache_to,
        secrets={CA_SECRET_ID: CA_CONTEXT_PATH},
    )
    return inputs.make_engine(buildkit=build_inputs.buildkit, engine=request.engine, buildx=buildx)


def attest(
    outcome: ImageOutcome,
    request: ImageRequest,
    *,
    signer: Any,
    engine: str,
    progress: Callable[[str], None],
) -> ImageOutcome:
    """The signed smoke attestation and SBOM of a pass (docs/evidence.md), about the image id
    and, once pushed, the registry's manifest digest; written beside `--save` and into
    `--evidence`."""
    subjects = [evidence.Subject(outcome.tag, outcome.image_id)]
    if outcome.pushed is not None:
        repo, _tag = split_tag(outcome.pushed["ref"])
        subjects.append(evidence.Subject(repo, outcome.pushed["digest"]))
    docs = evidence.make(
        lock=lock_format.loads(outcome.job.lock_text),
        lock_sha256=outcome.job.lock_sha256,
        report=outcome.report,
        subjects=subjects,
        gpu_attach=(outcome.gpu_attach or {}).get("way") or "none",
        engine=engine,
        signer=signer,
    )
    # Beside an archive file only: a --save into a FIFO or /dev/stdout has no "beside".
    stems = [request.save] if request.save is not None and request.save.is_file() else []
    if request.evidence is not None:
        stems.append(request.evidence / _tag_name(outcome.job.name))
    written: dict[str, Any] = {}
    for stem in stems:
        progress(f"signing the smoke attestation and SBOM: {stem}{evidence.BUNDLE_SUFFIX}")
        written = evidence.write(docs, stem)
    written["subjects"] = [s.digest for s in subjects]
    if outcome.pushed is not None:
        progress(f"attaching the signed evidence to {outcome.pushed['repo_digest']}")
        written["attached"] = evidence.attach(docs, outcome.pushed["ref"], outcome.pushed["digest"])
    return replace(outcome, evidence=written)


class BuildContext(Mapping[str, bytes]):
    """A build context whose wheelhouse files are read when the engine sends them: a rebuild
    where nothing changed (`context_key` finds it built) reads none of those large files."""

    def __init__(self, files: Mapping[str, bytes], on_disk: Mapping[str, Path]) -> None:
        self._files = dict(files)
        self._on_disk = {k: v for k, v in on_disk.items() if k not in self._files}

    def __getitem__(self, name: str) -> bytes:
        if name in self._files:
            return self._files[name]
        return self._on_disk[name].read_bytes()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self._files, *self._on_disk}))

    def __len__(self) -> int:
        return len(self._files) + len(self._on_disk)

    def digest(self, *, environment: bool = False) -> str:
        """sha256 of every file: the bytes of those in memory, and (size, mtime, inode) of the
        wheelhouse's (a changed wheel is a new file or a new mtime, as for rsync and make).
        `environment`: of every file but the project's (`project/...`, and the .dockerignore
        lines about them, the only ones envbuild writes there)."""
        h = hashlib.sha256()
        for name in self:
            if environment and name.startswith(PROJECT_FILES):
                continue
            if name in self._files:
                data = self._files[name]
                if environment and name == ".dockerignore":
                    data = _not_about_project(data)
                elif environment and name == "Dockerfile":
                    data = _without_project_version(data)
                h.update(f"{name}\0{hashlib.sha256(data).hexdigest()}\0".encode())
            else:
                st = self._on_disk[name].stat()
                h.update(f"{name}\0{st.st_size}:{st.st_mtime_ns}:{st.st_ino}\0".encode())
        return h.hexdigest()


PROJECT_FILES = f"{CONTEXT_DIR}/"
"""Where the project's files are in the build context (`envbuild.request.sourcetree`)."""


def _not_about_project(dockerignore: bytes) -> bytes:
    lines = dockerignore.decode("utf-8", "replace").splitlines()
    # Comments and blank lines mean nothing to the engine (docs.docker.com/build/concepts/context/).
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    kept = [rule for rule in rules if not rule.lstrip("!").startswith(PROJECT_FILES)]
    return "\n".join(kept).encode()


def _without_project_version(dockerfile: bytes) -> bytes:
    """The Dockerfile without the project's version from git (its ARG line): it changes with
    every commit, like the project's files, and is no more about the environment than they
    are (templates/macros.j2 `project_code`)."""
    arg = f"ARG {VERSION_ARG}=".encode()
    return b"\n".join(line for line in dockerfile.split(b"\n") if not line.startswith(arg))


def has_project_files(job: ImageJob) -> bool:
    return any(name.startswith(PROJECT_FILES) for name in job.context)


def context_key(engine: ContainerEngine, job: ImageJob, *, environment: bool = False) -> str:
    """sha256 of what the build reads: the context, the id of each image a FROM names (as the
    engine has it now), the builder and the build's labels; "" when a FROM image is missing
    here (the build pulls it: nothing to compare). `environment`: the same without the
    project's files, the key of every layer below the project's COPY (the Dockerfile copies
    them last: templates/macros.j2 `project_code`)."""
    context = job.context
    digest = context.digest(environment=environment) if isinstance(context, BuildContext) else ""
    if not digest:
        return ""
    ids: list[str] = []
    stages: set[str] = set()
    for line in context.get("Dockerfile", b"").decode("utf-8", "replace").splitlines():
        words = [w for w in line.split() if not w.startswith("--")]
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        if words[1] not in stages:
            try:
                ids.append(engine.image_ids(words[1], pull=False)[0])
            except EnvbuildError:
                return ""
        if len(words) >= 4 and words[2].upper() == "AS":
            stages.add(words[3])
    builder = getattr(engine, "builder", None)
    facts = {
        "context": digest,
        "from": ids,
        "engine": engine.name,
        "builder": builder() if callable(builder) else "",
        "labels": [job.lock_sha256, sorted(job.extra_labels.items())],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def pass_store(engine: ContainerEngine, job: ImageJob, request: ImageRequest) -> PassStore:
    """This host's smoke passes for this run's settings (`envbuild.build.passes`)."""
    from envbuild.build import passes as smokepass

    address = select.kind_of(request.engine).address()
    server = getattr(engine, "server", None)
    try:
        identity: tuple[str, ...] = tuple(server()) if callable(server) else ()
    except Exception:  # the engine answers the build next; its identity is best effort
        identity = ()
    key, where = smokepass.host_key(
        engine=request.engine,
        address=address,
        server=identity,
        local=address.startswith("unix://"),
        settings={
            "allow_cpu": job.allow_cpu,
            "shm_mib": job.shm_mib,
            "gpu": [job.gpu.want, *job.gpu.devices] if job.needs_gpu else [],
            "command": list(job.smoke_command),
        },
    )
    return smokepass.FileStore(key, where, reuse=not request.resmoke)


def deliver(
    engine: ContainerEngine,
    outcome: ImageOutcome,
    *,
    push: str | None,
    save: Path | None,
    progress: Callable[[str], None],
) -> ImageOutcome:
    """The passing image written as an archive, then pushed (a registry failure leaves the
    archive for the HPC hand-off); the digest the registry stored is reported."""
    saved: dict[str, Any] | None = None
    if save is not None:
        progress(f"saving {outcome.tag} to {save} (docker-archive)")
        size = engine.save(outcome.tag, save)
        saved = {"path": str(save), "bytes": size, "format": "docker-archive"}
    pushed: dict[str, str] | None = None
    if push is not None:
        ref = push or outcome.tag
        progress(f"pushing {ref}")
        try:
            digest = engine.push(outcome.image_id, ref, progress=progress)
        except RegistryError as err:
            err.fields.update(tag=outcome.tag, image_id=outcome.image_id, saved=saved)
            raise
        repo, _tag = split_tag(ref)
        pushed = {"ref": ref, "digest": digest, "repo_digest": f"{repo}@{digest}"}
    return replace(outcome, pushed=pushed, saved=saved)


def check_tag(ref: str) -> str:
    """Refuse a tag the engine would refuse, before a long build rather than after it: an
    image reference (`envbuild.core.values`, the request's and render's grammar) without a
    digest (`docker tag` refuses to create a tag with a digest)."""
    parsed = parse_image_ref(ref)
    if parsed is None or parsed.digest is not None:
        raise UserError(
            f"{ref!r} is not a valid image reference"
            + (" for a tag (it names a digest)" if parsed is not None else ""),
            hint="use lowercase name[:tag], e.g. --tag registry.example.com/team/torch:1",
        )
    return ref


def check_delivery(request: ImageRequest, *, buildkit: bool) -> None:
    """Refuse --push/--save/--cache-* values before a long build rather than after it."""
    if request.push:
        check_tag(request.push)
    if request.save is not None:
        check_output(request.save, what="--save")
    if (
        request.sign_key is not None
        and request.save is None
        and request.evidence is None
        and request.push is None
    ):
        raise UserError(
            "--sign-key needs somewhere to put the attestation",
            hint="add --push (attached in the registry), --save FILE (written beside it) or "
            "--evidence DIR",
        )
    if request.evidence is not None and request.evidence.exists() and not request.evidence.is_dir():
        raise UserError(f"--evidence {request.evidence} is not a folder")
    if (request.cache_from or request.cache_to) and not buildkit:
        raise UserError(
            "--cache-from/--cache-to need --buildkit (they are BuildKit cache backends)",
            hint="add --buildkit, or drop the cache options",
        )


def _tag_name(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("._-")
    return cleaned or "image"


def make_judge(plan: SmokePlan) -> Judge:
    """The orchestration's judge: the container's stdout judged against `plan`. Its summary
    has no time: the one smoke time `image` reports is `ImageOutcome.smoke_s`."""

    def judge(result: RunResult) -> smoke.SmokeJudgement:
        return smoke.judge(result.stdout, plan, timed=False)

    return judge


MIRROR_ARG = "UV_PYTHON_INSTALL_MIRROR"
"""The ARG a managed Python's install step declares (templates/macros.j2); its value comes
from the variable of the same name where `envbuild image` runs, the one uv itself reads
(https://docs.astral.sh/uv/reference/environment/#uv_python_install_mirror)."""
_MIRROR_RE = re.compile(r"(https?|file)://[^\s\"'\\$`]+")


def build_args(lock: Lock, environ: Mapping[str, str]) -> dict[str, str]:
    """The build arguments of this lock's image: the managed Python's mirror, when the lock
    has a managed Python and the variable is set (anything else ignores it, as uv does
    without a download); UserError (exit 2) for a value that is not a URL."""
    mirror = environ.get(MIRROR_ARG, "")
    if lock.stack.managed_python is None or not mirror:
        return {}
    if not _MIRROR_RE.fullmatch(mirror):
        raise UserError(
            f"{MIRROR_ARG}={mirror!r} is not an http(s):// or file:// URL without spaces, "
            "quotes, backslashes, $ or backticks",
            hint=f"set it to the URL that replaces https://github.com/astral-sh/"
            f"python-build-standalone/releases/download, or unset {MIRROR_ARG}",
        )
    return {MIRROR_ARG: mirror}


def prepare(
    *,
    image_dir: Path,
    request: ImageRequest,
    build_inputs: BuildInputs,
    matrix_overlay: Path | None = None,
    progress: Callable[[str], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[ImageJob, Judge]:
    """Everything the engine part needs, decided before the engine is touched; `progress`
    hears the choices made for the user (the lock's wheel folder as the wheelhouse, a
    managed Python's mirror); `environ` (os.environ) gives the build arguments."""
    if request.tag is not None:
        check_tag(request.tag)
    check_delivery(request, buildkit=build_inputs.buildkit)
    if request.smoke_timeout is not None and request.smoke_timeout < 1:
        raise UserError("--smoke-timeout must be at least 1 second")
    # The options a user typed are checked as `envbuild render` checks them, before the lock.
    options = render_options(build_inputs)
    _request, lock, lock_text = inputs.load_fresh_text(image_dir, matrix_overlay=matrix_overlay)
    options, note = lock_wheelhouse(lock, options, image_dir=image_dir)
    if note is not None and progress is not None:
        progress(note)
    args = build_args(lock, os.environ if environ is None else environ)
    if args and progress is not None:
        progress(f"Python {lock.stack.python} from the mirror {args[MIRROR_ARG]} ({MIRROR_ARG})")
    matrix = matrix_data.load_matrix_from(matrix_overlay)
    sha = lock_sha256(lock_text)
    version = project_version(lock, image_dir, os.environ if environ is None else environ)
    if version is not None and progress is not None:
        progress(f"the project's version: {version.value} ({version.source})")
    files = build_context(
        lock,
        lock_text,
        image_dir=image_dir,
        options=options,
        matrix=matrix,
        wheels=False,
        project_version=version,
    )
    wheels = wheel_paths(options.find_links) if options.find_links is not None else {}
    context = BuildContext(files, wheels)
    # A CPU image's plan allows the CPU without the flag (as render writes it into the image).
    plan = smoke.plan(lock, allow_cpu=request.allow_cpu or not lock.is_gpu, matrix=matrix)
    limits = limits_for(lock.smoke, kill_after=request.smoke_timeout)
    locked_base = lock.stack.base_image.ref
    name = lock.name or image_dir.name
    job = ImageJob(
        name=name,
        context=context,
        lock_text=lock_text,
        lock_sha256=sha,
        tag=request.tag or default_tag(_tag_name(name), sha),
        needs_gpu=lock.is_gpu,
        allow_cpu=request.allow_cpu,
        timeout_s=limits.kill_after_s,
        shm_mib=limits.shm_mib,
        locked_base_image=locked_base,
        base_image=build_inputs.base_image or locked_base,
        keep_failed=request.keep_failed,
        gpu=request.gpu,
        smoke_command=lock.smoke.command,
        target_gpus=tuple(lock.targets.gpus),
        smoke_plan=dict(plan),
        # As the Dockerfile's FROM says it (render/dockerfile.py): explicit for aarch64 only,
        # so an x86_64 lock builds as before on every engine.
        platform=None if lock.platform == "x86_64" else ENGINE_PLATFORMS[lock.platform],
        build_args=args,
    )
    return job, make_judge(plan)

"""Build -> smoke in the container -> evaluate -> tag only on pass, over any `ContainerEngine`.

No docker here and no printing: the engine does the I/O, the caller passes a progress callback
and a `judge` that turns the container's output into a verdict (`envbuild.app.image` wires
in `envbuild.smoke.plan.judge`). Unit tests drive this with a fake engine.

Guarantees: the tag is written only after a passing smoke report;
every smoke container is removed by the engine; on failure or Ctrl-C the candidate image is
removed unless `keep_failed` (only it: its layers stay as the next build's cache,
`ContainerEngine.remove_image`); the final image carries `envbuild.lock`, `envbuild.lock.sha256`
and `envbuild.smoke.report` (compact JSON with "ok": true).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from envbuild.build.buildlog import compile_failure, pip_hash_mismatch_message
from envbuild.build.passes import pass_plan, weaker
from envbuild.core.errors import (
    BuildError,
    EngineError,
    EnvbuildError,
    GpuUnavailableError,
    SmokeFailed,
    UserError,
)
from envbuild.engine.protocol import BuildResult, ContainerEngine, ProgressFn, RunResult, RunSpec
from envbuild.host.gpu_attach import Attachment, GpuChoice, unavailable_message
from envbuild.smoke.container import SmokeLimits, left_behind_note, smoke_container
from envbuild.smoke.plan import SmokeJudgement
from envbuild.smoke.project_step import run_command

LOCK_LABEL = "envbuild.lock"
LOCK_SHA_LABEL = "envbuild.lock.sha256"
REPORT_LABEL = "envbuild.smoke.report"

STDERR_TAIL_LINES = 30
LOCK_LABEL_MAX_BYTES = 256 * 1024
"""docker-py sends build-API labels in the request URL; Docker 20.10 answered a 900 KiB label
with "431 Request Header Fields Too Large" and took 400 KiB (measured while writing this module)."""


def default_tag(name: str, lock_sha256: str) -> str:
    """`envbuild/<name>:<first 12 hex of the lock's sha256>`."""
    return f"envbuild/{name or 'image'}:{lock_sha256[:12]}"


Judge = Callable[[RunResult], SmokeJudgement]
"""Raises ValueError (or an EnvbuildError) when the output carries no readable report."""


@dataclass(frozen=True)
class ImageJob:
    """Everything one `envbuild image` run needs, decided before the engine is touched."""

    name: str
    context: Mapping[str, bytes]
    lock_text: str
    lock_sha256: str
    tag: str
    needs_gpu: bool
    """A GPU image (the lock's framework variant is not CPU)."""
    allow_cpu: bool
    timeout_s: int
    """When the smoke container is killed (`SmokeLimits.kill_after_s` of `limits_for`)."""
    shm_mib: int
    """Its /dev/shm (`SmokeLimits.shm_mib`)."""
    locked_base_image: str
    base_image: str
    """The base actually built from (== locked unless --base-image replaced it)."""
    keep_failed: bool = False
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    gpu: GpuChoice = field(default_factory=GpuChoice)
    """How to attach GPUs (auto: gpu_attach.choose decides) and which ones."""
    smoke_command: tuple[str, ...] = ()
    """The project's own smoke step (`[smoke] command`), run after the payload passed."""
    target_gpus: tuple[str, ...] = ()
    """The lock's [targets] gpus: what the memory fit is held against (all known: none)."""
    smoke_plan: Mapping[str, Any] = field(default_factory=dict)
    """The plan the judge holds (`envbuild.smoke.plan.plan`): its tier and steps are part of
    what a recorded pass is a pass of (`envbuild.build.passes.pass_plan`)."""
    platform: str | None = None
    """The lock's platform as the engine names it ("linux/arm64"), for the build and the
    smoke container; None: the engine's own (an x86_64 lock: `app.image.prepare`)."""
    build_args: Mapping[str, str] = field(default_factory=dict)
    """Values for the Dockerfile's ARGs (`app.image.build_args`: a managed Python's mirror).
    Not part of the context key: the mirror serves the locked archive, whose sha256 the build
    checks, so the image is the same."""
    context_key: str = ""
    """sha256 of what the build reads (context, base image id, builder: `app.image`); a
    tagged image built from the same key that passed here is used as it is. "": never."""
    env_key: str = ""
    """The same without the project's files: a candidate whose environment passed here runs
    only the project's own smoke command. "": never (no project, or no pass store); under
    --resmoke it is set, so the pass is recorded, but the store finds nothing."""


class StepClock:
    """Wall seconds of each named step of one `envbuild image` run, in the order they ran
    (`steps_s` of `--json`, docs/image-json.md): where a run's own fixed cost goes, beside
    the build and the smoke test (benchmarks/RESULTS.md section 6 reads it)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            spent = self.seconds.get(name, 0.0) + time.monotonic() - started
            self.seconds[name] = round(spent, 3)


@dataclass(frozen=True)
class ImageOutcome:
    """A passed, tagged image."""

    tag: str
    image_id: str
    candidate_id: str
    report: Mapping[str, Any]
    report_label: str
    summary: str
    build_s: float
    smoke_s: float
    """The one smoke time: wall seconds of the payload's container (`smoke_payload_s`) plus
    the project's step's (`smoke_command["duration_s"]`), as the engine measured each run;
    0 when the pass was reused. The payload's own `timings` (inside the container) are not
    it: they leave out the container's start."""
    job: ImageJob
    builder: str = ""
    """Which builder ran (`BuildResult.builder`)."""
    pushed: Mapping[str, str] | None = None
    """{"ref", "digest", "repo_digest"} after `--push`; None when not pushed."""
    gpu_attach: Mapping[str, Any] | None = None
    """How the smoke container got its GPUs (`Attachment.to_json()`); None: no GPU."""
    saved: Mapping[str, Any] | None = None
    smoke_command: Mapping[str, Any] | None = None
    """The project's smoke step (`envbuild.smoke.project_step.record`); None when it has none."""
    """{"path", "bytes", "format"} after `--save`; None when not saved."""
    tag_s: float = 0.0
    """Seconds to label and tag the passing candidate."""
    smoke_reused: Mapping[str, Any] | None = None
    """The earlier pass of this image id on this host (`PassStore` entry: when, where) when
    the smoke test was not run again; None when it ran in this run."""
    unchanged: bool = False
    """Nothing the build reads changed since the tag was built and passed here: neither
    built nor tested again (`ImageJob.context_key`)."""
    smoke_payload_s: float = 0.0
    """The payload's part of `smoke_s`."""
    evidence: Mapping[str, Any] | None = None
    """{"bundle", "sbom", "subjects"} of the signed attestation and SBOM written after the pass
    (`envbuild.app.evidence`); None without --sign-key."""
    steps_s: Mapping[str, float] = field(default_factory=dict)
    """Seconds of each step of the run (`StepClock`), the build and the smoke test included."""

    def to_json(self) -> dict[str, Any]:
        """The `envbuild image --json` document on success (docs/image-json.md)."""
        job = self.job
        return {
            "ok": True,
            "name": job.name,
            "tag": self.tag,
            "image_id": self.image_id,
            "candidate_id": self.candidate_id,
            "lock_sha256": job.lock_sha256,
            "base_image": job.base_image,
            "locked_base_image": job.locked_base_image,
            "base_image_replaced": job.base_image != job.locked_base_image,
            "allow_cpu": job.allow_cpu,
            "gpu_image": job.needs_gpu,
            "device": self.report.get("device"),
            "labels": sorted([LOCK_LABEL, LOCK_SHA_LABEL, REPORT_LABEL]),
            "build_s": self.build_s,
            "smoke_s": self.smoke_s,
            "smoke_payload_s": self.smoke_payload_s,
            "smoke": dict(self.report),
            "smoke_summary": self.summary,
            "builder": self.builder,
            "pushed": dict(self.pushed) if self.pushed is not None else None,
            "saved": dict(self.saved) if self.saved is not None else None,
            "gpu_attach": dict(self.gpu_attach) if self.gpu_attach is not None else None,
            "smoke_command": dict(self.smoke_command) if self.smoke_command else None,
            "target_gpus": list(job.target_gpus),
            "tag_s": self.tag_s,
            "smoke_reused": dict(self.smoke_reused) if self.smoke_reused else None,
            "unchanged": self.unchanged,
            "evidence": dict(self.evidence) if self.evidence is not None else None,
            "steps_s": dict(self.steps_s),
        }


def report_label(
    report: Mapping[str, Any],
    job: ImageJob,
    gpu_attach: Attachment | None = None,
    smoke_command: Mapping[str, Any] | None = None,
    environment_pass: Mapping[str, Any] | None = None,
) -> str:
    """The `envbuild.smoke.report` label: compact, sorted JSON with "ok": true, and what the
    image was built from (a replaced base is recorded here) and how the smoke test got its
    GPUs; `environment_pass`: the earlier candidate whose payload checks this report holds
    (only the project's code differs)."""
    data = dict(report)
    data["ok"] = True
    data["envbuild"] = {
        "base_image": job.base_image,
        "locked_base_image": job.locked_base_image,
        "lock_sha256": job.lock_sha256,
        "allow_cpu": job.allow_cpu,
    }
    if gpu_attach is not None:
        attached = gpu_attach.to_json()
        attached.pop("checks")
        data["envbuild"]["gpu_attach"] = attached
    if smoke_command is not None:
        data["envbuild"]["smoke_command"] = dict(smoke_command)
    if environment_pass is not None:
        data["envbuild"]["environment_pass"] = dict(environment_pass)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def preflight(engine: ContainerEngine, job: ImageJob) -> Attachment | None:
    """Fail before a long build when the smoke test could never pass on this engine; the way
    its GPUs will be attached (None: the smoke test runs without a GPU)."""
    size = len(job.lock_text.encode())
    if size > LOCK_LABEL_MAX_BYTES:
        raise UserError(
            f"the lock of {job.name} is {size // 1024} KiB, too large for the envbuild.lock "
            f"label (at most {LOCK_LABEL_MAX_BYTES // 1024} KiB through the engine API)",
            hint="lock fewer extra packages, or only the target platform's wheels",
            fields={"lock_bytes": size},
        )
    engine.ping()
    if not job.needs_gpu or job.allow_cpu:
        return None
    attach = engine.gpu_attach(want=job.gpu.want, devices=job.gpu.devices)
    if not attach.ok:
        message, hint = unavailable_message(attach)
        raise GpuUnavailableError(
            f"{job.name or 'this'} is a GPU image and its smoke test needs a GPU, but {message}",
            hint=hint,
            fields={"tag": None, "stage": "preflight", "gpu_attach": attach.to_json()},
        )
    return attach


def _tail(text: str, n: int = STDERR_TAIL_LINES) -> list[str]:
    return [line for line in text.splitlines() if line.strip()][-n:]


def _smoke_failure(
    job: ImageJob,
    result: RunResult,
    candidate: str,
    kept: bool,
    judgement: SmokeJudgement | None,
    why: str,
) -> SmokeFailed:
    fields: dict[str, Any] = {
        "tag": None,
        "candidate_id": candidate if kept else None,
        "kept": kept,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "duration_s": result.duration_s,
        "stderr_tail": _tail(result.stderr),
        "failed": [dict(f) for f in judgement.failed] if judgement else [],
        "report": dict(judgement.report) if judgement else None,
    }
    keep_note = (
        f"the candidate is kept as {candidate} (docker run --rm -it {candidate} bash)"
        if kept
        else "rerun with --keep-failed to keep the candidate for a look inside"
    )
    if result.timed_out:
        return SmokeFailed(
            f"smoke test of {job.name} did not finish within {job.timeout_s} s: the container "
            "was killed and removed; no tag was written",
            hint=f"raise --smoke-timeout (or smoke.timeout_s in envbuild.toml) if the host is "
            f"slow, or look for a hang (a GPU that does not answer, NCCL); {keep_note}",
            fields=fields,
        )
    if judgement is None:
        return SmokeFailed(
            f"smoke payload of {job.name} crashed (exit {result.exit_code}) without a report: "
            f"{why}; no tag was written",
            hint=f"read stderr_tail (--json) or the lines above; {keep_note}",
            fields=fields,
        )
    names = ", ".join(f["name"] for f in judgement.failed) or why
    first_hint = next((f.get("hint", "") for f in judgement.failed if f.get("hint")), "")
    return SmokeFailed(
        f"smoke test of {job.name} failed: {names}; no tag was written",
        hint="; ".join(h for h in (first_hint, keep_note) if h),
        fields={**fields, "summary": judgement.summary},
    )


def _explain_hash_mismatch(err: BuildError, job: ImageJob) -> BuildError:
    """A build that failed on pip's `--require-hashes` gets the lock's explanation: the index
    may have re-uploaded the wheel (the PyTorch index has), not only tampering. Engine-neutral:
    it reads the step output every engine puts into the error's fields."""
    tail = err.fields.get("log_tail") or ()
    text = "\n".join([str(err.fields.get("engine_message", "")), *map(str, tail)])
    explained = pip_hash_mismatch_message(text)
    if explained is None:
        compiled = compile_failure(text)  # a source package the builder stage compiles
        if compiled is None:
            return err
        return BuildError(compiled[0], hint=compiled[1], fields=err.fields)
    return BuildError(
        explained,
        hint=f"re-lock {job.name}'s folder to take the index's current file (`envbuild lock "
        "--upgrade-package NAME DIR`; compare the new hash with the publisher's first), or "
        "restore the original wheel in your mirror",
        fields=err.fields,
    )


def _passed(job: ImageJob, result: RunResult, judge: Judge, candidate: str) -> SmokeJudgement:
    """The judgement of a payload run that passed; SmokeFailed for any other run."""
    judgement: SmokeJudgement | None = None
    why = ""
    if not result.timed_out:
        try:
            judgement = judge(result)
        except (ValueError, EnvbuildError) as exc:
            why = str(exc)
    ok = judgement is not None and judgement.ok and result.exit_code == 0 and not result.timed_out
    if not ok:
        if judgement is not None and judgement.ok:
            why = f"the report says ok but the payload exited {result.exit_code}"
            judgement = SmokeJudgement(ok=False, report=judgement.report, summary=why)
        raise _smoke_failure(job, result, candidate, job.keep_failed, judgement, why)
    assert judgement is not None
    return judgement


class PassStore(Protocol):
    """Smoke passes recorded on this host (`envbuild.build.passes`): an image id that passed
    here is not tested again. The store is keyed to the host and the run's settings."""

    def find(self, image_id: str) -> Mapping[str, Any] | None: ...

    def record(self, image_id: str, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        """Store a pass; the entry as stored (with when and where)."""
        ...

    def find_built(self, context_key: str) -> Mapping[str, Any] | None: ...

    def record_built(self, context_key: str, entry: Mapping[str, Any]) -> None: ...

    def find_env(self, env_key: str) -> Mapping[str, Any] | None: ...

    def record_env(self, env_key: str, entry: Mapping[str, Any]) -> None: ...


def build_and_verify(
    engine: ContainerEngine,
    job: ImageJob,
    *,
    judge: Judge,
    progress: ProgressFn,
    passes: PassStore | None = None,
    clock: StepClock | None = None,
) -> ImageOutcome:
    """Build a candidate, smoke-test it in a container, and tag it only when the test passes
    (or when `passes` says this image id already passed here: then it is tagged as then;
    or, when nothing the build reads changed since the tag passed here, as it is). `clock`
    hears each step's seconds."""
    clock = clock or StepClock()
    asked = _plan_of(job)
    with clock.step("up_to_date_check"):
        unchanged = _unchanged(engine, job, passes, asked)
    if unchanged is not None:
        progress(
            f"{job.tag} is up to date: built from the same context and base image, and it "
            f"passed its smoke test here at {unchanged.get('passed_at')} "
            f"({unchanged.get('where')}); not built or tested again (--resmoke runs both)"
        )
        return _outcome_of(job, unchanged, build_s=0.0, tag_s=0.0, unchanged=True)
    with clock.step("preflight"):
        attach = preflight(engine, job)
    with clock.step("build"):
        built, build_s = _build(engine, job, progress)
    candidate = built.image_id
    earlier = _earlier_pass(passes, candidate, asked, progress)
    if earlier is not None:
        progress(
            f"candidate {candidate} built in {build_s:.0f} s by {built.builder or engine.name}; "
            f"it passed its smoke test here at {earlier.get('passed_at')} "
            f"({earlier.get('where')}): not run again (--resmoke runs it)"
        )
        with clock.step("tag"):
            outcome = _tag_earlier_pass(engine, job, candidate, earlier, built, build_s)
        _record_built(passes, job, outcome, earlier)
        return outcome
    spec = _smoke_spec(job, candidate, attach)
    env_pass = _env_pass(passes, job, asked)
    if env_pass is not None:
        return _reuse_environment(
            engine, job, spec, attach, env_pass, built, build_s, progress, passes, clock, asked
        )
    progress(
        f"candidate {candidate} built in {build_s:.0f} s by {built.builder or engine.name}; "
        "running the smoke test"
    )
    passed = _smoke_and_tag(engine, job, spec, attach, judge=judge, progress=progress, clock=clock)
    result, judgement, command, label, image_id, tag_s = passed
    with clock.step("labels_check"):
        _check_labels(engine, job)
    payload_s = round(result.duration_s, 3)
    smoke_s = round(payload_s + (command["duration_s"] if command else 0.0), 3)
    entry = {"report_label": label, "summary": judgement.summary, "smoke_s": smoke_s}
    entry["plan"] = asked
    with clock.step("record_pass"):
        stored = passes.record(candidate, {**entry, "image_id": image_id}) if passes else entry
    outcome = ImageOutcome(
        tag=job.tag,
        image_id=image_id,
        candidate_id=candidate,
        report=judgement.report,
        report_label=label,
        summary=judgement.summary,
        build_s=build_s,
        smoke_s=smoke_s,
        job=job,
        builder=built.builder,
        gpu_attach=attach.to_json() if attach is not None else None,
        smoke_command=command,
        tag_s=tag_s,
        smoke_payload_s=payload_s,
    )
    _record_built(passes, job, outcome, stored)
    if passes is not None and job.env_key:
        passes.record_env(job.env_key, {**stored, "candidate_id": candidate})
    return outcome


def _reuse_environment(
    engine: ContainerEngine,
    job: ImageJob,
    spec: RunSpec,
    attach: Attachment | None,
    env_pass: Mapping[str, Any],
    built: BuildResult,
    build_s: float,
    progress: ProgressFn,
    passes: PassStore | None,
    clock: StepClock,
    asked: Mapping[str, Any],
) -> ImageOutcome:
    """Only the project's code changed since this environment passed here: the project's
    smoke step alone, the tag, and the candidate's pass recorded (as its own)."""
    progress(
        f"candidate {built.image_id} built in {build_s:.0f} s by {built.builder or engine.name}; "
        f"only the project's code changed since its environment passed the smoke test here "
        f"at {env_pass.get('passed_at')} ({env_pass.get('where')}): running the project's "
        "smoke step alone (--resmoke runs the whole test)"
    )
    with clock.step("smoke"):
        outcome = _project_only(engine, job, spec, attach, env_pass, built, build_s, progress)
    done: dict[str, Any] = {"report_label": outcome.report_label, "summary": outcome.summary}
    done |= {"smoke_s": outcome.smoke_s, "plan": dict(asked), "image_id": outcome.image_id}
    with clock.step("record_pass"):
        stored = passes.record(built.image_id, done) if passes is not None else done
    _record_built(passes, job, outcome, stored)
    return outcome


def _env_pass(
    passes: PassStore | None, job: ImageJob, asked: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The recorded pass of this build's environment (`job.env_key`), when its plan covers
    the one asked for."""
    if passes is None or not job.env_key:
        return None
    found = passes.find_env(job.env_key)
    if found is None or weaker(found.get("plan"), asked) is not None:
        return None
    return found


def _project_only(
    engine: ContainerEngine,
    job: ImageJob,
    spec: RunSpec,
    attach: Attachment | None,
    env_pass: Mapping[str, Any],
    built: BuildResult,
    build_s: float,
    progress: ProgressFn,
) -> ImageOutcome:
    """Tag a candidate whose environment passed here (`env_pass`) after the project's own
    smoke step alone passed in it. Its report is the environment's, marked as such
    (`envbuild.environment_pass`), with this run's project step; a failure leaves no tag."""
    candidate = built.image_id
    report = json.loads(str(env_pass["report_label"]))
    report.pop("envbuild", None)
    judgement = SmokeJudgement(ok=True, report=report, summary=str(env_pass.get("summary", "")))
    with _removed_on_failure(engine, job, candidate):
        command = _project_step(engine, spec, job, candidate, progress, judgement)
        since = {
            "image_id": str(env_pass.get("candidate_id", "")),
            **{k: env_pass[k] for k in ("passed_at", "where", "smoke_s") if k in env_pass},
        }
        label = report_label(report, job, attach, command, environment_pass=since)
        image_id, tag_s = _tag(engine, job, candidate, label)
        _check_labels(engine, job)
    smoke_s = round(command["duration_s"], 3) if command else 0.0
    return ImageOutcome(
        tag=job.tag,
        image_id=image_id,
        candidate_id=candidate,
        report=report,
        report_label=label,
        summary=judgement.summary,
        build_s=build_s,
        smoke_s=smoke_s,
        job=job,
        builder=built.builder,
        gpu_attach=attach.to_json() if attach is not None else None,
        smoke_command=command,
        tag_s=tag_s,
        smoke_payload_s=0.0,
        smoke_reused={**since, "scope": "environment"},
    )


def _smoke_and_tag(
    engine: ContainerEngine,
    job: ImageJob,
    spec: RunSpec,
    attach: Attachment | None,
    *,
    judge: Judge,
    progress: ProgressFn,
    clock: StepClock,
) -> tuple[RunResult, SmokeJudgement, dict[str, Any] | None, str, str, float]:
    """The smoke container, the project's own step, then the tag; on any failure (Ctrl-C and
    engine errors too) the candidate is removed unless kept."""
    candidate = spec.image
    with _removed_on_failure(engine, job, candidate):
        with clock.step("smoke"):
            result = engine.run(spec)
            if note := left_behind_note(result):
                progress(note)
            judgement = _passed(job, result, judge, candidate)
            # The project's own step runs only after the payload passed, as the payload ran.
            command = _project_step(engine, spec, job, candidate, progress, judgement)
        label = report_label(judgement.report, job, attach, command)
        with clock.step("tag"):
            image_id, tag_s = _tag(engine, job, candidate, label)
    return result, judgement, command, label, image_id, tag_s


@contextlib.contextmanager
def _removed_on_failure(engine: ContainerEngine, job: ImageJob, candidate: str) -> Iterator[None]:
    """On any failure inside (Ctrl-C and engine errors too) the candidate is removed unless
    kept (--keep-failed)."""
    try:
        yield
    except BaseException:
        # A failing cleanup must not hide why the run failed.
        if not job.keep_failed:
            with contextlib.suppress(EnvbuildError):
                engine.remove_image(candidate)
        raise


def _tag(engine: ContainerEngine, job: ImageJob, candidate: str, label: str) -> tuple[str, float]:
    """Tag the candidate with its report label and the lock's sha256: the new image id and
    the seconds it took."""
    started = time.monotonic()
    image_id = engine.tag(
        candidate, job.tag, labels={REPORT_LABEL: label, LOCK_SHA_LABEL: job.lock_sha256}
    )
    return image_id, round(time.monotonic() - started, 3)


def _project_step(
    engine: ContainerEngine,
    spec: RunSpec,
    job: ImageJob,
    candidate: str,
    progress: ProgressFn,
    judgement: SmokeJudgement,
) -> dict[str, Any] | None:
    """The project's own step (`[smoke] command`): run only after the payload passed (its
    `judgement`, whose report a failure of this step keeps), as the payload ran; None when
    the project has none."""
    if not job.smoke_command:
        return None
    return run_command(
        engine,
        spec,
        job.smoke_command,
        name=job.name,
        keep_failed=job.keep_failed,
        candidate=candidate,
        progress=progress,
        report=judgement.report,
    )


def _build(
    engine: ContainerEngine, job: ImageJob, progress: ProgressFn
) -> tuple[BuildResult, float]:
    """The untagged candidate, labelled with its lock, and the seconds the build took."""
    labels = {LOCK_LABEL: job.lock_text, LOCK_SHA_LABEL: job.lock_sha256, **job.extra_labels}
    started = time.monotonic()
    try:
        built = engine.build(
            context=job.context,
            labels=labels,
            progress=progress,
            platform=job.platform,
            build_args=job.build_args,
        )
    except BuildError as err:
        raise _explain_hash_mismatch(err, job) from None
    return built, round(time.monotonic() - started, 3)


def _smoke_spec(job: ImageJob, candidate: str, attach: Attachment | None) -> RunSpec:
    """The smoke container: the payload in the candidate, with the job's GPUs and limits, on
    the lock's platform."""
    container = smoke_container(
        candidate,
        SmokeLimits(shm_mib=job.shm_mib, kill_after_s=job.timeout_s),
        allow_cpu=job.allow_cpu,
        attach=attach,
        environ=os.environ,
        labels={LOCK_SHA_LABEL: job.lock_sha256},
    )
    return replace(container.run_spec(), platform=job.platform)


def _earlier_pass(
    passes: PassStore | None, candidate: str, asked: Mapping[str, Any], progress: ProgressFn
) -> Mapping[str, Any] | None:
    """The recorded pass of `candidate` when its plan covers the one `asked` for."""
    earlier = passes.find(candidate) if passes is not None else None
    why = weaker(earlier.get("plan"), asked) if earlier is not None else None
    if earlier is not None and why is not None:
        progress(
            f"candidate {candidate} passed its smoke test here at {earlier.get('passed_at')} "
            f"under a less strict plan ({why}): that pass does not count for this one"
        )
        return None
    return earlier


def _plan_of(job: ImageJob) -> dict[str, Any]:
    """The plan this run asks a pass for (`envbuild.build.passes.pass_plan`)."""
    devices = [job.gpu.want, *job.gpu.devices] if job.needs_gpu and not job.allow_cpu else []
    return pass_plan(
        job.smoke_plan,
        kill_after_s=job.timeout_s,
        devices=devices,
        command=job.smoke_command,
    )


def _unchanged(
    engine: ContainerEngine, job: ImageJob, passes: PassStore | None, asked: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The recorded build of this context key when the tag still names its image and its
    pass covers the plan asked for."""
    if passes is None or not job.context_key:
        return None
    done = passes.find_built(job.context_key)
    if done is None or not isinstance(done.get("report_label"), str):
        return None
    if weaker(done.get("plan"), asked) is not None:
        return None
    try:
        image_id, _ = engine.image_ids(job.tag, pull=False)
    except EnvbuildError:  # no such tag (removed, or moved to another engine): build
        return None
    return done if image_id == done.get("image_id") else None


def _record_built(
    passes: PassStore | None, job: ImageJob, outcome: ImageOutcome, passed: Mapping[str, Any]
) -> None:
    if passes is None or not job.context_key:
        return
    passes.record_built(
        job.context_key,
        {
            "image_id": outcome.image_id,
            "candidate_id": outcome.candidate_id,
            "report_label": outcome.report_label,
            "summary": outcome.summary,
            "builder": outcome.builder,
            **{k: passed[k] for k in ("passed_at", "where", "smoke_s", "plan") if k in passed},
        },
    )


def _outcome_of(
    job: ImageJob, done: Mapping[str, Any], *, build_s: float, tag_s: float, unchanged: bool
) -> ImageOutcome:
    """The outcome of a run that reused a recorded pass (its label holds the report)."""
    label = str(done["report_label"])
    report = json.loads(label)
    meta = report.pop("envbuild", None) or {}
    return ImageOutcome(
        tag=job.tag,
        image_id=str(done.get("image_id", "")),
        candidate_id=str(done.get("candidate_id", "")),
        report=report,
        report_label=label,
        summary=str(done.get("summary", "")),
        build_s=build_s,
        smoke_s=0.0,
        job=job,
        builder=str(done.get("builder", "")),
        gpu_attach=meta.get("gpu_attach"),
        smoke_command=meta.get("smoke_command"),
        tag_s=tag_s,
        smoke_reused={k: done[k] for k in ("passed_at", "where", "smoke_s") if k in done},
        unchanged=unchanged,
    )


def _check_labels(engine: ContainerEngine, job: ImageJob) -> None:
    written = engine.image_labels(job.tag)
    missing = [k for k in (LOCK_LABEL, LOCK_SHA_LABEL, REPORT_LABEL) if k not in written]
    if missing:
        raise EngineError(
            f"the engine tagged {job.tag} but dropped the labels {', '.join(missing)}",
            hint=f"inspect it: docker image inspect {job.tag}; remove the tag with "
            f"docker image rm {job.tag}",
        )


def _tag_earlier_pass(
    engine: ContainerEngine,
    job: ImageJob,
    candidate: str,
    earlier: Mapping[str, Any],
    built: Any,
    build_s: float,
) -> ImageOutcome:
    """Tag a candidate whose image id passed here before, with the report label of that pass
    (the same label: the same final image id as then)."""
    image_id, tag_s = _tag(engine, job, candidate, str(earlier["report_label"]))
    _check_labels(engine, job)
    done = {**earlier, "image_id": image_id, "candidate_id": candidate, "builder": built.builder}
    return _outcome_of(job, done, build_s=build_s, tag_s=tag_s, unchanged=False)

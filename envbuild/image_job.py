"""Gathers what one `envbuild image` run needs (thin I/O): the fresh lock, the options' files,
the rendered build context, the smoke plan, and the judge that reads the payload's report.

Kept apart from `build.py` (engine orchestration over a fake-able protocol) so that module
stays free of file reads; imported lazily by `api.build_image`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild.build import (
    ImageJob,
    Judge,
    SmokeJudgement,
    default_tag,
    shm_mib_for,
)
from envbuild.engine import ContainerEngine, RunResult
from envbuild.errors import UserError
from envbuild.models import Lock

# docker/distribution reference grammar (reference/regexp.go), simplified to one expression:
# [host[:port]/]path-component(/path-component)*[:tag]; lowercase path; tag <= 128 chars.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REF_RE = re.compile(
    # A registry host has a dot or a port, or is localhost (docker's splitDockerDomain).
    r"(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::[0-9]+)?/|[a-zA-Z0-9-]+:[0-9]+/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
)


def check_tag(ref: str) -> str:
    """Refuse a tag the engine would refuse, before a long build rather than after it."""
    if not _REF_RE.fullmatch(ref) or len(ref) > 255:
        raise UserError(
            f"{ref!r} is not a valid image reference",
            hint="use lowercase name[:tag], e.g. --tag registry.example.com/team/torch:1",
        )
    return ref


def _tag_name(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("._-")
    return cleaned or "image"


def make_engine(*, buildkit: bool) -> ContainerEngine:
    if buildkit:
        from envbuild.buildx_engine import BuildxEngine

        return BuildxEngine()
    from envbuild.docker_engine import DockerEngine

    return DockerEngine()


def make_judge(plan: Mapping[str, Any]) -> Judge:
    """Wire `envbuild.smoke.parse_report`/`evaluate` into the orchestration's judge."""
    from envbuild import smoke

    def judge(result: RunResult) -> SmokeJudgement:
        report = smoke.parse_report(result.stdout)
        verdict = smoke.evaluate(report, plan)
        return SmokeJudgement(
            ok=verdict.ok,
            report=report,
            failed=tuple(
                {"name": f.name, "figure": f.figure, "hint": f.hint} for f in verdict.failed
            ),
            summary=verdict.summary,
        )

    return judge


def needs_gpu(lock: Lock) -> bool:
    """A GPU image: its stack has CUDA. A CPU stack's smoke test runs its CPU path, no flag."""
    return lock.stack.cuda is not None


def prepare(
    *,
    image_dir: Path,
    tag: str | None,
    base_image: str | None,
    allow_cpu: bool,
    ca_cert: Path | None,
    find_links: Path | None,
    index_url: str | None,
    smoke_timeout: int | None,
    keep_failed: bool,
    buildkit: bool,
) -> tuple[ImageJob, Judge]:
    from envbuild.lockfile import load_fresh_text, lock_sha256
    from envbuild.matrix import load_matrix
    from envbuild.render import RenderOptions, build_context, check_options, read_ca_cert
    from envbuild.smoke import plan as smoke_plan

    if tag is not None:
        check_tag(tag)
    if smoke_timeout is not None and smoke_timeout < 1:
        raise UserError("--smoke-timeout must be at least 1 second")
    # The options a user typed are checked as `envbuild render` checks them, before the lock.
    options = check_options(
        RenderOptions(
            base_image=base_image,
            ca_cert=read_ca_cert(ca_cert) if ca_cert is not None else None,
            index_url=index_url,
            find_links=find_links,
            buildkit=buildkit,
        )
    )
    # Never re-resolves: a stale lock raises StaleLockError with the command to run.
    _request, lock, lock_text = load_fresh_text(image_dir)
    sha = lock_sha256(lock_text)
    context = build_context(lock, lock_text, image_dir=image_dir, options=options)
    # A CPU image's plan allows the CPU without the flag (as render writes it into the image).
    plan = smoke_plan(lock, allow_cpu=allow_cpu or not needs_gpu(lock), matrix=load_matrix())
    min_shm = int(plan.get("min_shm_mib", lock.smoke.min_shm_mib) or lock.smoke.min_shm_mib)
    locked_base = lock.stack.base_image.ref
    job = ImageJob(
        name=lock.name or image_dir.name,
        context=context,
        lock_text=lock_text,
        lock_sha256=sha,
        tag=tag or default_tag(_tag_name(lock.name or image_dir.name), sha),
        needs_gpu=needs_gpu(lock),
        allow_cpu=allow_cpu,
        timeout_s=smoke_timeout or lock.smoke.timeout_s,
        shm_mib=shm_mib_for(min_shm),
        locked_base_image=locked_base,
        base_image=base_image or locked_base,
        keep_failed=keep_failed,
    )
    return job, make_judge(plan)

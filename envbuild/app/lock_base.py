"""`envbuild lock` of a request on a framework base (`[image] base`): probe what the base holds
through the engine, check the request and targets against it, lock the extra packages under
the base's installed versions, write the lock.

The probe runs in a short container of the base itself (no GPU; `envbuild/payload/
base_probe.py`, standard library only), so it reads what the image really holds rather than
what its tag promises. The lock records those facts and the base's id and registry digest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envbuild.app import lock_base_extras as base_extras
from envbuild.core.errors import EngineError, UserError, redact
from envbuild.core.fsio import write_if_changed
from envbuild.core.models import BaseFacts, Lock, Request
from envbuild.core.resources import payload_dir
from envbuild.engine.protocol import ContainerEngine, RunSpec
from envbuild.lock.assemble import LockPins, assemble_lock
from envbuild.lock.format import dumps, lock_path, regenerate_command
from envbuild.matrix import Matrix, NgcImage
from envbuild.request.parse import parse_framework_requirement
from envbuild.resolver import base as framework_base

PROBE_TIMEOUT_S = 180
PROBE_ROLE = "base-probe"


def probe_base(engine: ContainerEngine, ref: str, framework: str) -> BaseFacts:
    """Run the probe in `ref` (pulled when missing) and read its facts."""
    image_id, _digest = engine.image_ids(ref)
    script = (payload_dir() / "base_probe.py").read_text(encoding="utf-8")
    last: EngineError | None = None
    for python in ("python3", "python"):
        spec = RunSpec(
            image=image_id,
            command=(python, "-c", script, framework),
            gpus=False,
            timeout_s=PROBE_TIMEOUT_S,
            labels={"envbuild.role": PROBE_ROLE},
        )
        try:
            result = engine.run(spec)
        except EngineError as err:  # no such executable: try the next name
            last = err
            continue
        if result.timed_out:
            raise framework_base.ProbeError(
                f"the base {ref}: the probe did not finish in {PROBE_TIMEOUT_S} s",
                hint=f"check that `docker run --rm {ref} {python} -c 'import {framework}'` returns",
            )
        # Set on the error after it is made: redacted and cut here (errors.redact, MAX_MESSAGE).
        stderr = redact(" | ".join(ln[:300] for ln in result.stderr.strip().splitlines()[-3:]))
        try:
            return framework_base.parse_probe(
                result.stdout, ref=ref, framework=framework, image_id=image_id
            )
        except framework_base.ProbeError as err:
            if stderr:
                err.fields["stderr_tail"] = stderr
            raise
    assert last is not None
    raise framework_base.ProbeError(
        f"the base {ref} has no python3 or python to run: {last.message}",
        hint="a framework base needs the Python that holds the framework on its PATH",
    )


def read_facts(
    engine: ContainerEngine,
    request: Request,
    framework: str,
    *,
    matrix: Matrix,
    previous: Lock | None = None,
    offline: bool = False,
) -> tuple[BaseFacts, str | None, list[str]]:
    """(facts, registry digest, warnings) of the request's base. A base with a matrix row
    (matrix/ngc.toml) is probed only when the engine answers and already has it (an NGC image
    is many GB: the lock does not pull it for the row's facts), and the probe must agree with
    the row; otherwise the row's facts are recorded, with where they come from."""
    assert request.base is not None
    ref = request.base
    ngc = matrix.ngc_image(ref)
    if ngc is not None:
        why = _not_probed(engine, ref)
        if why and "@" in ref:
            # Pulled by digest, the tag is ignored: the row of the tag says nothing about it.
            raise UserError(
                f"{ref} names a digest, so the matrix row of its tag ({ngc.source}) cannot "
                f"stand in for the image, and it cannot be probed: {why}",
                hint=f"`docker pull {ref}` and lock again (the probe is then checked against "
                "the row), or name the tag alone",
                fields={"image": ref},
            )
        if why:
            return _row_facts(request, ngc, matrix, why, previous, offline)
    facts = probe_base(engine, ref, framework)
    if ngc is not None:
        framework_base.check_row(ngc, facts, matrix, ref)
    _image_id, digest = engine.image_ids(ref, pull=False)
    warnings: list[str] = []
    if digest is None:
        warnings.append(
            f"{ref} has no registry digest (built or loaded here): the lock records "
            f"its image id {facts.image_id[:19]}, and a build uses whatever the tag names then"
        )
    return facts, digest, warnings


def _not_probed(engine: ContainerEngine, ref: str) -> str:
    """Why the image cannot be probed without pulling it; "" when it can."""
    try:
        engine.image_ids(ref, pull=False)
    except EngineError as err:
        return f"the engine does not answer ({err.message})"
    except UserError:
        return f"the engine does not have it (`docker pull {ref}` and lock again to probe it)"
    return ""


def _row_facts(
    request: Request,
    ngc: NgcImage,
    matrix: Matrix,
    why: str,
    previous: Lock | None,
    offline: bool,
) -> tuple[BaseFacts, str | None, list[str]]:
    """The row's facts, the digest (the previous lock's for the same ref, else the
    registry's), and the warning that says where the facts come from."""
    ref = ngc.image if request.base is None else request.base
    where = matrix.where(ngc)
    added = (("[packages]", request.packages), ("[project]", request.project))
    adds = " and ".join(key for key, value in added if value)
    if adds or not ngc.python:
        problem = (
            f"{adds} go into the Python of {ref}, whose installed versions only a probe of "
            f"the image reads; {where} cannot stand in for it"
            if adds
            else f"{where} does not give the Python of {ref}, and only a probe reads it"
        )
        raise UserError(
            f"{problem}: {why}",
            hint=f"lock where the engine has the image (`docker pull {ref}`)",
            fields={"base": ref, "row": ngc.key},
        )
    from envbuild.engine import registry

    digest = registry.lock_digest(
        ref,
        previous.stack.base_image.ref if previous is not None else None,
        previous.base_digest if previous is not None else None,
        offline=offline,
    )
    warnings = [f"{ref}: facts from the matrix row {where} ({ngc.source}), not probed: {why}"]
    if digest is None:
        warnings.append(
            f"{ref}: no registry digest ({'--offline' if offline else 'no registry answered'}), "
            "so the base is not pinned; re-lock where the registry answers to pin it"
        )
    return framework_base.facts_from_row(ngc), digest, warnings


def lock_framework_base(
    image_dir: Path,
    request: Request,
    *,
    matrix: Matrix,
    engine: ContainerEngine,
    previous: Lock | None = None,
    upgrade: bool = False,
    upgrade_packages: Sequence[str] = (),
    offline: bool = False,
    runner: Any = None,
) -> tuple[Lock, str, tuple[str, ...], str, bool]:
    """(lock, text, warnings, tool, written) of a framework-base request; the lock is written
    only when its text changed."""
    assert request.base is not None
    framework, _extras, _spec = parse_framework_requirement(request.framework)
    ngc = matrix.ngc_image(request.base)
    facts, digest, warnings = read_facts(
        engine, request, framework, matrix=matrix, previous=previous, offline=offline
    )
    stack = framework_base.stack_for_base(request, facts, matrix, ngc)
    extras = base_extras.lock_extras(
        image_dir,
        request,
        facts,
        stack,
        kept=previous.packages if previous is not None and not upgrade else (),
        upgrade_packages=upgrade_packages,
        offline=offline,
        runner=runner,
    )
    warnings += extras.notes
    pins = LockPins(
        packages=extras.packages,
        # uv pinned the extras from the request's own indexes (lock_base_extras.lock_extras).
        index_url=request.indexes.index_url,
        extra_index_urls=request.indexes.extra_index_urls,
        build=extras.build,
    )
    lock = assemble_lock(
        request,
        stack,
        pins,
        matrix_fingerprints=matrix.fingerprints(),
        files=extras.project.files if extras.project is not None else (),
        base_digest=digest,
        base_facts=facts,
    )
    text = dumps(lock, command=regenerate_command(image_dir))
    written = write_if_changed(lock_path(image_dir), text)
    return lock, text, tuple(warnings), extras.tool, written

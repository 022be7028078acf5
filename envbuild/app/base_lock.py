"""`envbuild lock` of a request on a framework base (`[image] base`): probe what the base holds
through the engine, check the request and targets against it, lock the extra packages under
the base's installed versions, write the lock.

The probe runs in a short container of the base itself (no GPU; `envbuild/payload/
base_probe.py`, standard library only), so it reads what the image really holds rather than
what its tag promises. The lock records those facts and the base's id and registry digest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuild import framework_base, pydeps
from envbuild.engine import ContainerEngine, RunSpec
from envbuild.errors import EngineError
from envbuild.fsio import write_if_changed
from envbuild.locations import is_remote, resolve_local
from envbuild.lockfile import dumps, input_hash, lock_path, regenerate_command, row_fingerprints
from envbuild.matrix import Matrix
from envbuild.models import BaseFacts, Lock, LockedPackage, Request
from envbuild.request import parse_framework_requirement, request_hash
from envbuild.resources import payload_dir

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
        stderr = " | ".join(result.stderr.strip().splitlines()[-3:])
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
    facts = probe_base(engine, request.base, framework)
    framework_base.check_extras(request, facts)
    stack = framework_base.stack_for_base(request, facts, matrix)
    _image_id, digest = engine.image_ids(request.base, pull=False)
    warnings: list[str] = []
    if digest is None:
        warnings.append(
            f"{request.base} has no registry digest (built or loaded here): the lock records "
            f"its image id {facts.image_id[:19]}, and a build uses whatever the tag names then"
        )
    packages, tool = _pin_extras(
        image_dir, request, facts, previous, upgrade, upgrade_packages, offline, runner
    )
    fingerprints = row_fingerprints(stack.rows, matrix.fingerprints())
    lock = Lock(
        name=request.name,
        input_hash=input_hash(request, fingerprints),
        stack=stack,
        targets=request.targets,
        platform=request.platform,
        indexes=dataclasses.replace(
            request.indexes,
            find_links=tuple(link for link in request.indexes.find_links if is_remote(link)),
        ),
        smoke=request.smoke,
        base_digest=digest,
        packages=packages,
        compat=request.compat,
        request_hash=request_hash(request),
        row_fingerprints=tuple(sorted(fingerprints.items())),
        base_facts=facts,
    )
    text = dumps(lock, command=regenerate_command(image_dir))
    written = write_if_changed(lock_path(image_dir), text)
    return lock, text, tuple(warnings), tool, written


def _pin_extras(
    image_dir: Path,
    request: Request,
    facts: BaseFacts,
    previous: Lock | None,
    upgrade: bool,
    upgrade_packages: Sequence[str],
    offline: bool,
    runner: Any,
) -> tuple[tuple[LockedPackage, ...], str]:
    """The extra packages with hashes, resolved under the base's installed versions (so none
    of them is replaced), for the base's Python; minus what the base already holds."""
    if not request.packages:
        return (), ""
    upgrade_set = {str(canonicalize_name(n)) for n in upgrade_packages}
    kept = previous.packages if previous is not None and not upgrade else ()
    pinned = pydeps.pin(
        pydeps.PinRequest(
            requirements=request.packages,
            python=facts.python,
            platform=request.platform,
            index_url=request.indexes.index_url,
            extra_index_urls=request.indexes.extra_index_urls,
            find_links=tuple(resolve_local(f, image_dir) for f in request.indexes.find_links),
            preferences=tuple(p for p in kept if p.name not in upgrade_set),
            upgrade_packages=tuple(sorted(upgrade_set)),
            offline=offline,
            constraints=framework_base.constraints(facts),
        ),
        runner=runner,
    )
    return framework_base.extras_only(pinned.packages, facts), pinned.tool

"""The `envbuild lock` use case: request -> resolve -> pin (uv) -> lock text -> written only
when it changed; and `lock --check`, which verifies a lock without network.

Without --upgrade, previous picks that still satisfy the request are kept: the framework
version (resolved again pinned to it) and every Python package (uv preferences). The lock
format itself (dumps/loads/hashes/freshness) is `envbuild.lock.format`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    canonicalize_name,
)
from packaging.version import Version

from envbuild import matrix as matrix_data
from envbuild import resolver
from envbuild.app import inputs, lock_background, lock_reach, lock_steps
from envbuild.app import lock_project as project_lock
from envbuild.app import lock_source as source_lock
from envbuild.core.errors import LockError, MatrixError, PinError, UnsatisfiableError, UserError
from envbuild.core.fsio import write_if_changed
from envbuild.core.locations import (
    folder_distributions,
    is_direct_url,
    is_remote,
    local_path,
    resolve_local,
)
from envbuild.core.models import (
    LOCK_SCHEMA_VERSION,
    Lock,
    LockedPackage,
    Request,
    Stack,
    Unsatisfiable,
)
from envbuild.core.versions import major_minor
from envbuild.cuda.archs import cc_tuple
from envbuild.cuda.wheels import cuda_libs
from envbuild.lock import pins as pydeps
from envbuild.lock.assemble import LockPins, assemble_lock
from envbuild.lock.companions import check_companions, companion_constraints, without_series
from envbuild.lock.format import (
    body_edited,
    check_fresh,
    check_schema,
    dumps,
    loads,
    lock_path,
    read_lock_text,
    regenerate_command,
    schema_version_of,
)
from envbuild.matrix import Matrix
from envbuild.request import sourcetree
from envbuild.request.parse import load_request

if TYPE_CHECKING:  # the project readers load only for requests with project files
    from envbuild.engine.protocol import ContainerEngine
    from envbuild.lock.projectdeps import ProjectInputs

DigestLookup = Callable[[str], "str | None"]


@dataclass(frozen=True)
class LockOutcome:
    path: Path
    status: str
    """ "written", "unchanged" (re-locked, same bytes) or "fresh" (--check passed)."""
    lock: Lock
    text: str
    warnings: tuple[str, ...] = ()
    tool: str = ""
    """The delegated Python resolver ("uv", "pip"); "" for --check."""
    left_out: tuple[sourcetree.LeftOut, ...] | None = None
    """What of the project stays out of /app (None without a project, and for --check)."""


def lock(
    *,
    image_dir: Path,
    check: bool = False,
    upgrade: bool = False,
    upgrade_packages: Sequence[str] = (),
    offline: bool = False,
    matrix_overlay: Path | None = None,
    runner: pydeps.Runner | None = None,
) -> LockOutcome:
    """`envbuild lock DIR`: write `DIR/envbuild.lock` (only when it changes); with `check`,
    verify it without network (StaleLockError, exit 1, when missing/stale/edited). `runner`
    runs uv (`envbuild.lock.headstart` passes one that may have started it already)."""
    if check:
        return check_image(image_dir, matrix_overlay=matrix_overlay)
    # Decided before anything is written: a project the build cannot copy leaves no lock.
    survey = sourcetree.project_survey(load_request(image_dir).project, image_dir)
    outcome = lock_image(
        image_dir,
        upgrade=upgrade,
        upgrade_packages=upgrade_packages,
        offline=offline,
        matrix_overlay=matrix_overlay,
        runner=runner,
    )
    if survey is None:
        return outcome
    # Said at lock time, before a build copies the code: what of the project stays out.
    return dataclasses.replace(outcome, left_out=survey.left_out)


def check_image(image_dir: Path, *, matrix_overlay: Path | None = None) -> LockOutcome:
    """`lock --check`: no network, no resolving; fresh -> outcome, else StaleLockError."""
    request = load_request(image_dir)
    text = read_lock_text(image_dir)
    matrix = matrix_data.load_matrix_from(matrix_overlay)
    fresh = check_fresh(
        request,
        text,
        matrix.fingerprints(),
        image_dir=image_dir,
        files=inputs.project_files(image_dir, request),
    )
    assert text is not None  # check_fresh raised otherwise
    return LockOutcome(path=lock_path(image_dir), status="fresh", lock=fresh, text=text)


def lock_image(
    image_dir: Path,
    *,
    upgrade: bool = False,
    upgrade_packages: Sequence[str] = (),
    offline: bool = False,
    matrix_overlay: Path | None = None,
    runner: Any = None,
    digest_lookup: DigestLookup | None = None,
    engine: ContainerEngine | None = None,
) -> LockOutcome:
    """`lock`: request -> resolve -> pin (delegated) -> lock text -> write only when changed."""
    request = load_request(image_dir)  # a bad request stops here: nothing is written
    if request.base is not None:
        return _lock_base(
            image_dir,
            request,
            upgrade=upgrade,
            upgrade_packages=upgrade_packages,
            offline=offline,
            matrix_overlay=matrix_overlay,
            runner=runner,
            engine=engine,
        )
    previous, not_kept = read_previous(image_dir)
    options = _LockOptions(
        upgrade,
        tuple(upgrade_packages),
        offline,
        runner,
        previous,
        not_kept,
        matrix_data.load_matrix_from(matrix_overlay),
        project_lock.read_inputs(image_dir, request),  # [packages] files, build backend
    )
    return lock_steps.stepping_down(
        lambda skipped: _lock_stack(image_dir, request, options, digest_lookup, skipped)
    )


@dataclass(frozen=True)
class _LockOptions:
    """What every attempt of one `lock` shares (read once, whatever series it leaves out)."""

    upgrade: bool
    upgrade_packages: tuple[str, ...]
    offline: bool
    runner: Any
    previous: Lock | None
    not_kept: str
    matrix: Matrix
    project: ProjectInputs | None


def _lock_stack(
    image_dir: Path,
    request: Request,
    options: _LockOptions,
    digest_lookup: DigestLookup | None,
    skipped: tuple[tuple[str, str], ...],
) -> LockOutcome:
    """One resolve -> pin -> write of a request without a framework base; `skipped`: the
    framework series left out and why (envbuild.app.lock_steps; said in a warning)."""
    upgrade, offline, runner = options.upgrade, options.offline, options.runner
    upgrade_set = {canonicalize_name(n) for n in options.upgrade_packages}
    previous, not_kept = options.previous, options.not_kept
    kept = None if upgrade else previous  # the picks --upgrade does not keep
    matrix, project = options.matrix, options.project
    series = [each for each, _ in skipped]
    narrowed = dataclasses.replace(request, framework=without_series(request.framework, series))
    stack, reached = _resolve_reaching(
        narrowed, project, matrix, kept, upgrade_set, offline, image_dir
    )
    indexes = _pin_indexes(request, stack, image_dir)
    notes = (not_kept, credentials_note(request), reached, lock_steps.skipped_note(skipped, stack))
    warnings = [*(note for note in notes if note), *indexes.warnings]
    # The registry answers while uv pins (and what writing the lock imports loads meanwhile).
    digest_job = lock_background.in_background(
        lambda: _base_digest(stack, kept, offline, digest_lookup)
    )
    # The matrix rows' fingerprints (the lock's inputs) are hashed once uv runs: before, this
    # thread would only take the interpreter from the work that starts uv.
    uv_started = threading.Event()
    fingerprints_job = lock_background.in_background(matrix.fingerprints, after=uv_started)
    pin = _pin_request(request, stack, indexes, kept, upgrade_set, offline)
    # The installer is pinned in the same resolution (it has no dependencies), then split off.
    with_installer = pin_installer(pin, offline, kept)
    signalling = lock_background.signalling(runner or pydeps.run_subprocess, uv_started)
    sourced = _pin_with_project(stack, matrix, request, with_installer, project, signalling)
    requested = source_lock.as_requested(sourced.result, request.indexes.find_links, pin.find_links)
    pinned, installed_by = split_installer(requested, request)
    warnings += [*(project.notes if project is not None else ()), *sourced.notes]
    warnings += sourced.result.warnings  # uv's own, about what it locked
    check_pins_installable(pinned.packages)
    check_framework_source(stack, pinned.packages)
    check_companions(stack.framework.name, pinned.packages)
    # The framework's own wheel metadata is authoritative for the CUDA libraries it ships.
    stack, library_warnings = apply_wheel_pins(stack, pinned.packages)
    warnings += library_warnings
    check_pinned_cudnn(stack, matrix)
    if previous is not None:
        warnings += reuploaded(previous.packages, pinned.packages)
    digest, digest_warning = digest_job()
    warnings += digest_warning
    pins = _lock_pins(stack, matrix, request, runner, pin, pinned, indexes, installed_by)
    files, fingerprints = (project.files if project is not None else ()), fingerprints_job()
    new_lock = assemble_lock(
        request, stack, pins, matrix_fingerprints=fingerprints, files=files, base_digest=digest
    )
    text = dumps(new_lock, command=regenerate_command(image_dir))
    written = write_if_changed(lock_path(image_dir), text)
    if written and kept is not None:
        warnings += [note for note in (kept_note(kept, pinned.packages, image_dir),) if note]
    return LockOutcome(
        path=lock_path(image_dir),
        status="written" if written else "unchanged",
        lock=new_lock,
        text=text,
        warnings=tuple(warnings),
        tool=pinned.tool,
    )


def _resolve_reaching(
    request: Request,
    project: ProjectInputs | None,
    matrix: Matrix,
    kept: Lock | None,
    upgrade_set: AbstractSet[str],
    offline: bool,
    image_dir: Path,
) -> tuple[Stack, str | None]:
    """The stack (with the project's range on the framework), from a framework index that
    answers (envbuild.app.lock_reach), and the line that says when that is not the best fit.
    A framework wheel in a local find_links folder stands in for its index (no probe)."""
    find_links = tuple(resolve_local(link, image_dir) for link in request.indexes.find_links)
    reached = lock_reach.Reach(
        offline=offline,
        local=lambda s: (
            wheelhouse_has(find_links, s.framework.name, s.framework.version) is not None
        ),
        held=lambda name: wheelhouse_versions(find_links, name),
    )
    stack = project_lock.resolve(
        request,
        project,
        lambda r: reached.resolve(
            r, lambda q, gone: _resolve_keeping(q, matrix, kept, upgrade_set, gone)
        ),
    )
    return lock_reach.recorded(stack, reached, kept), reached.line


def _lock_base(
    image_dir: Path,
    request: Request,
    *,
    upgrade: bool,
    upgrade_packages: Sequence[str],
    offline: bool,
    matrix_overlay: Path | None,
    runner: Any,
    engine: ContainerEngine | None,
) -> LockOutcome:
    """A framework base: its facts come from the image itself (envbuild.app.lock_base)."""
    from envbuild.app.lock_base import lock_framework_base

    lock, text, notes, tool, written = lock_framework_base(
        image_dir,
        request,
        matrix=matrix_data.load_matrix_from(matrix_overlay),
        engine=engine or inputs.make_engine(buildkit=False),
        previous=_previous_lock(image_dir),
        upgrade=upgrade,
        upgrade_packages=upgrade_packages,
        offline=offline,
        runner=runner,
    )
    status = "written" if written else "unchanged"
    return LockOutcome(lock_path(image_dir), status, lock, text, notes, tool)


def _pin_request(
    request: Request,
    stack: Stack,
    indexes: _PinIndexes,
    kept: Lock | None,
    upgrade_set: AbstractSet[str],
    offline: bool,
) -> pydeps.PinRequest:
    """What uv pins: the stack's and the request's packages, preferring the kept picks."""
    kept_packages = (*kept.packages, *kept.installer) if kept is not None else ()
    preferences = tuple(p for p in kept_packages if canonicalize_name(p.name) not in upgrade_set)
    return pydeps.PinRequest(
        requirements=(*_stack_requirements(stack), *request.packages),
        constraints=companion_constraints(stack.framework.name, stack.framework.version),
        python=stack.python,
        platform=request.platform,
        index_url=indexes.index_url,
        extra_index_urls=indexes.extra_index_urls,
        find_links=indexes.find_links,
        preferences=preferences,
        upgrade_packages=tuple(sorted(upgrade_set)),
        offline=offline,
    )


def _lock_pins(
    stack: Stack,
    matrix: Matrix,
    request: Request,
    runner: Any,
    pin: pydeps.PinRequest,
    pinned: pydeps.PinResult,
    indexes: _PinIndexes,
    installer: tuple[LockedPackage, ...],
) -> LockPins:
    """The lock's pins: the image's packages, the installer and, for source packages, the
    builder stage's toolchain and build requirements, pinned too (written as the request
    wrote its sources)."""
    build = source_lock.lock_build(
        lambda r: _pin_or_pypi_hint(stack, matrix, request, r, runner), pin, stack, pinned.packages
    )
    if build is not None:
        build_pins = source_lock.as_requested(
            pydeps.PinResult(build.packages, pinned.tool),
            request.indexes.find_links,
            pin.find_links,
        )
        build = dataclasses.replace(build, packages=build_pins.packages)
    return LockPins(pinned.packages, indexes.index_url, indexes.extra_index_urls, installer, build)


INSTALLER = "uv"
"""What the image build installs the lock's packages with (the lock's `installer` list,
hash-checked like every package): uv installs with `--require-hashes` in a fraction of pip's
time (benchmarks/RESULTS.md, build)."""


def pin_installer(pin: pydeps.PinRequest, offline: bool, kept: Lock | None) -> pydeps.PinRequest:
    """`pin` with the installer added: for a new lock, `--upgrade`, a previous lock that had
    one, or `--upgrade-package uv`. A kept lock without one stays without (a re-lock changes
    no bytes nobody asked to change; pip installs it as before). Offline only where the
    previous lock had one (uv's cache then holds it)."""
    had = kept is not None and bool(kept.installer)
    asked = canonicalize_name(INSTALLER) in pin.upgrade_packages
    if (offline and not had) or (kept is not None and not had and not asked):
        return pin
    return dataclasses.replace(pin, requirements=(*pin.requirements, INSTALLER))


def split_installer(
    pinned: pydeps.PinResult, request: Request
) -> tuple[pydeps.PinResult, tuple[LockedPackage, ...]]:
    """(the image's packages, the installer's pins): the installer is pinned with the
    packages but not installed into the image, unless the request asks for it too."""
    name = canonicalize_name(INSTALLER)
    installer = tuple(p for p in pinned.packages if canonicalize_name(p.name) == name)
    if not installer or any(_requirement_name(r) == name for r in request.packages):
        return pinned, installer
    rest = tuple(p for p in pinned.packages if canonicalize_name(p.name) != name)
    return dataclasses.replace(pinned, packages=rest), installer


def _requirement_name(text: str) -> str:
    try:
        return str(canonicalize_name(Requirement(text).name))
    except Exception:
        return ""


def _pin_with_project(
    stack: Stack,
    matrix: Matrix,
    request: Request,
    pin: pydeps.PinRequest,
    project: ProjectInputs | None,
    runner: Any,
) -> source_lock.SourcePins:
    """The pins, with the project's requirement lines and constraints added; a conflict they
    cause is worded as the project's (envbuild.app.lock_project). A requirement that only
    has an sdist is locked from it where the request compiles extensions (source_lock)."""
    if project is not None:
        pin = dataclasses.replace(
            pin,
            requirements=(*pin.requirements, *project.lines),
            constraints=(*pin.constraints, *(c.text for c in project.constraints)),
        )
    try:
        return source_lock.pin_allowing_sources(
            lambda r: _pin_or_pypi_hint(stack, matrix, request, r, runner), pin, request
        )
    except UnsatisfiableError as err:
        raise project_lock.pin_conflict(err, project, stack) from None


def _stack_requirements(stack: Stack) -> tuple[str, ...]:
    """The framework, and the cuDNN the resolver planned when the framework's own range would
    install one that does not support every target."""
    if stack.cudnn_requirement:
        return (stack.framework.requirement, stack.cudnn_requirement)
    return (stack.framework.requirement,)


def _pin_or_pypi_hint(
    stack: Stack, matrix: Matrix, request: Request, pin: pydeps.PinRequest, runner: Any
) -> pydeps.PinResult:
    """pydeps.pin; when the framework's own index is unreachable, the error names the newest
    PyPI build that the resolver finds fits the request, if there is one."""
    try:
        return pydeps.pin(pin, runner=runner)
    except PinError as err:
        if not stack.framework.index_url or "could not reach" not in err.message:
            raise
        fit = lock_reach.pypi_fit(request, matrix)
        if fit is None:
            raise
        raise PinError(
            err.message,
            hint=f"{stack.framework.index_url} may be unreachable: {fit}; {err.hint}",
            fields=err.fields,
        ) from None


def check_pinned_cudnn(stack: Stack, matrix: Matrix) -> None:
    """The cuDNN wheel the lock actually pinned must support every target GPU (cuDNN >= 9.11
    dropped compute capability < 7.5; a range-pinned framework gets whatever the installer
    picks)."""
    if not stack.cudnn or not stack.target_archs:
        return
    row = matrix.lib("cudnn", stack.cudnn)
    if row is None:
        return
    for sm in stack.target_archs:
        arch = matrix.arch(sm)
        if arch is None:
            continue
        cc = cc_tuple(arch.cc)
        below = row.min_cc and cc < cc_tuple(row.min_cc)
        above = row.max_cc and cc > cc_tuple(row.max_cc) and not row.forward_compatible
        if below or above:
            raise LockError(
                f"the lock pinned cuDNN {stack.cudnn}, which supports compute capability "
                f"{row.min_cc} to {row.max_cc}; the target {sm} is {arch.cc}",
                hint="constrain cuDNN in [packages] (for example nvidia-cudnn-cu12<=9.10.2.21), "
                "or re-lock with --upgrade after updating envbuild's matrix",
                fields={"cudnn": stack.cudnn, "arch": sm},
            )


def _previous_lock(image_dir: Path) -> Lock | None:
    """The lock already in the folder, when its picks may be kept (`read_previous`)."""
    return read_previous(image_dir)[0]


def read_previous(image_dir: Path) -> tuple[Lock | None, str]:
    """(the lock already in the folder, why its picks are not kept). Its picks are kept only
    when it verifies: a lock edited by hand (its body no longer matches content_hash) or one
    that cannot be read is regenerated from the request alone, and the reason says so. A lock
    of a newer schema is refused (LockError, exit 2), never rewritten in this version's
    format; a FIFO, device or folder in its place is refused by `read_lock_text`."""
    path = str(lock_path(image_dir))
    text = read_lock_text(image_dir)
    if text is None:
        return None, ""
    version = schema_version_of(text)
    if version is not None and version > LOCK_SCHEMA_VERSION:
        check_schema(text, path=path)  # raises: newer than this envbuild reads
    if body_edited(text):
        return None, (
            f"{path} was edited by hand (its body no longer matches content_hash), so its "
            "picks were not kept: the new lock is resolved from the request alone"
        )
    try:
        return loads(text, path=path), ""
    except LockError as err:
        return None, f"{err.message}; its picks were not kept"


def kept_note(previous: Lock, packages: Sequence[LockedPackage], image_dir: Path) -> str:
    """What a re-lock kept of the previous lock's picks, and the command that would not."""
    before = {(p.name, p.version) for p in previous.packages}
    kept = [p for p in packages if (p.name, p.version) in before]
    if not kept:
        return ""
    framework = canonicalize_name(previous.stack.framework.name)
    kept.sort(key=lambda p: (p.name != framework, p.name))
    shown = ", ".join(f"{p.name} {p.version}" for p in kept[:3])
    more = f" and {len(kept) - 3} more" if len(kept) > 3 else ""
    return (
        f"kept the previous lock's picks where they still fit ({shown}{more}); "
        f"`envbuild lock --upgrade {image_dir}` picks the newest that fit instead"
    )


def credentials_note(request: Request) -> str:
    """The warning for URLs whose credentials were removed when the request was read."""
    keys = request.indexes.credentials_removed
    if not keys:
        return ""
    return (
        f"[indexes] {', '.join(keys)} in envbuild.toml carried credentials; envbuild removed "
        "them (they would be written to the lock, put on uv's command line and printed). "
        "Remove them from the file and give them to uv and pip through ~/.netrc (or "
        "NETRC=FILE) or a keyring (UV_KEYRING_PROVIDER=subprocess)"
    )


def check_pins_installable(packages: Sequence[LockedPackage]) -> None:
    """Every pinned package must be installable by the build with --require-hashes: from an
    index, a find-links folder or an http(s) URL, with a hash. Refused here, at lock time, so
    no lock that `lock --check` calls fresh is one `render` refuses (UserError, exit 2)."""
    for p in packages:
        if is_direct_url(p.source) and not is_remote(p.source):
            raise UserError(
                f"{p.name} {p.version} comes from the local file {p.source} (a direct URL): a "
                "build cannot reach it",
                hint="put the wheel in a folder, list the folder in [indexes] find_links and "
                f'require "{p.name}=={p.version}" (the lock records its sha256)',
                fields={"package": p.name, "source": p.source},
            )
        if not p.hashes:
            raise UserError(
                f"{p.name} {p.version} was pinned without a hash ({p.source}); the build's "
                "pip --require-hashes would refuse it",
                hint="require it from an index or a find_links folder, or as a direct https:// "
                "URL to a wheel (uv records the wheel's sha256)",
                fields={"package": p.name, "source": p.source},
            )


def _resolve_keeping(
    request: Request,
    matrix: Matrix,
    previous: Lock | None,
    upgrade_set: AbstractSet[str],
    unreachable: frozenset[str] = frozenset(),
) -> Stack:
    """The stack for `request`, keeping the previous framework version while it still fits;
    builds from the `unreachable` indexes are left out (envbuild.app.lock_reach)."""

    def resolve(req: Request) -> Stack | Unsatisfiable:
        # Ways out in the request's own words: a lock is changed through envbuild.toml.
        return resolver.resolve(req, matrix, unreachable=unreachable, words="keys")

    framework_requirement = Requirement(request.framework)
    framework_name = canonicalize_name(framework_requirement.name)
    result: Stack | Unsatisfiable | None = None
    if (
        previous is not None
        and framework_name not in upgrade_set
        and canonicalize_name(previous.stack.framework.name) == framework_name
        and framework_requirement.specifier.contains(
            previous.stack.framework.version, prereleases=True
        )
    ):
        kept = dataclasses.replace(
            request, framework=_with_version(request.framework, previous.stack.framework.version)
        )
        result = resolve(kept)
        if isinstance(result, Unsatisfiable):
            result = None  # the old pick no longer fits the targets: resolve afresh
    if result is None:
        result = resolve(request)
    if isinstance(result, Unsatisfiable):
        raise _unsatisfiable(result)
    return result


@dataclass(frozen=True)
class _PinIndexes:
    index_url: str | None
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    warnings: tuple[str, ...]


def _pin_indexes(request: Request, stack: Stack, image_dir: Path) -> _PinIndexes:
    """Where uv looks for the pins.

    The framework's own index (when it is not PyPI) goes first among the extra indexes,
    because uv gives --extra-index-url priority over --index-url and takes each name from the
    first index that has it (https://docs.astral.sh/uv/concepts/indexes/). Passed as
    --index-url, PyPI's torch (another CUDA variant under the same version) would win.
    """
    index_url = request.indexes.index_url
    extra = list(request.indexes.extra_index_urls)
    find_links = tuple(resolve_local(link, image_dir) for link in request.indexes.find_links)
    framework = stack.framework
    warnings: tuple[str, ...] = ()
    local = wheelhouse_has(find_links, framework.name, framework.version)
    if local:
        warnings = (
            f"{framework.name} {framework.version} ({framework.variant}) is pinned from the "
            f"local wheelhouse {local}, not from {framework.index_url or 'PyPI'}: build with "
            "`envbuild image --find-links` pointing at the same files (the hashes in the lock "
            "decide)",
        )
    elif (
        framework.index_url
        and framework.index_url not in extra
        and framework.index_url != index_url
    ):
        extra = [framework.index_url, *extra]
    return _PinIndexes(index_url, tuple(extra), find_links, warnings)


def _base_digest(
    stack: Stack, previous: Lock | None, offline: bool, digest_lookup: DigestLookup | None
) -> tuple[str | None, list[str]]:
    """The base image digest: the locked one for the same ref, else the registry's."""
    from envbuild.engine import registry

    ref = stack.base_image.ref
    digest = registry.lock_digest(
        ref,
        previous.stack.base_image.ref if previous is not None else None,
        previous.base_digest if previous is not None else None,
        offline=offline,
        lookup=digest_lookup,
    )
    if digest is not None:
        return digest, []
    why = "--offline: registry not asked" if offline else "no registry reachable"
    return None, [
        f"base image {ref}: {why}, so its digest is not pinned "
        "(pinned = false); re-lock where the registry answers to pin it"
    ]


def _unsatisfiable(result: Unsatisfiable) -> UnsatisfiableError:
    alternatives = list(getattr(result, "alternatives", ()))
    return UnsatisfiableError(
        "nothing in the matrix fits the request:\n  " + "\n  ".join(result.reasons),
        hint=("try: " + "; or ".join(alternatives))
        if alternatives
        else "loosen the request (see the reasons)",
        fields={"reasons": list(result.reasons), "alternatives": alternatives},
    )


def _with_version(requirement: str, version: str) -> str:
    parsed = Requirement(requirement)
    parsed.specifier = SpecifierSet(f"=={version}")
    return str(parsed)


def apply_wheel_pins(stack: Stack, packages: Sequence[LockedPackage]) -> tuple[Stack, list[str]]:
    """cuDNN/NCCL from the resolved nvidia-cudnn-cuXX / nvidia-nccl-cuXX wheels; warn where the
    matrix row said otherwise (torch 2.11's
    RELEASE.md said cuDNN 9.17.1.4 for cu130, its wheels pin 9.19.0.56)."""
    libs = cuda_libs(packages)
    warnings: list[str] = []
    changes: dict[str, Any] = {}
    for what, wheel in (("cudnn", libs.cudnn), ("nccl", libs.nccl)):
        if wheel is None:
            continue
        matrix_value = getattr(stack, what)
        if matrix_value is not None and not pydeps.same_release(matrix_value, wheel):
            warnings.append(
                f"{what}: the matrix says {matrix_value} for {stack.framework.name} "
                f"{stack.framework.version} ({stack.framework.variant}), but its wheels pin "
                f"{wheel}; the lock records {wheel} (the wheel metadata is what gets installed)"
            )
        changes[what] = wheel
    cuda_pin = libs.cuda_toolkit or libs.cuda_runtime
    if cuda_pin and stack.cuda:
        try:
            pinned_mm, matrix_mm = major_minor(cuda_pin), major_minor(stack.cuda)
        except Exception:
            pinned_mm = matrix_mm = (0, 0)
        fw = stack.framework
        if pinned_mm[0] != matrix_mm[0]:
            # Another CUDA major means another variant than the one resolved: its floors,
            # architectures and base image would all be wrong in the lock.
            raise MatrixError(
                f"{fw.name} {fw.version} ({fw.variant}) should be a CUDA {stack.cuda} build, but "
                f"the wheels that were pinned depend on CUDA {cuda_pin} libraries: the index "
                "served another variant under the same version",
                hint="check the matrix row of this build (its index_url and pypi_default), or "
                "constrain [framework] cuda to a variant the reachable index serves",
                fields={"rows": list(stack.rows), "cuda_pin": cuda_pin},
            )
        if pinned_mm != matrix_mm:
            warnings.append(
                f"cuda: the matrix says {stack.cuda} for {fw.name} {fw.version} "
                f"({fw.variant}), but its wheels pin CUDA {cuda_pin} libraries; the floors in "
                "the lock follow the matrix"
            )
    return (dataclasses.replace(stack, **changes) if changes else stack), warnings


def check_framework_source(stack: Stack, packages: Sequence[LockedPackage]) -> None:
    """The framework must be pinned, and from its variant's index when that is not PyPI."""
    fw = stack.framework
    name = canonicalize_name(fw.name)
    pkg = next((p for p in packages if p.name == name), None)
    if pkg is None:
        raise PinError(
            f"the pinned packages do not contain {fw.name} ({fw.requirement})",
            hint="run with ENVBUILD_DEBUG=1 and report it",
        )
    from_wheelhouse = not is_remote(pkg.source)
    if fw.index_url and not from_wheelhouse and pkg.source.rstrip("/") != fw.index_url.rstrip("/"):
        raise PinError(
            f"{fw.name} {pkg.version} was pinned from {pkg.source}, not from the index of the "
            f"{fw.variant} variant ({fw.index_url})",
            hint="make that index reachable, or constrain [framework] cuda / the version "
            "range to a variant PyPI serves by default",
        )


def _held_wheels(find_links: Sequence[str], name: str) -> list[tuple[str, Version]]:
    """(find-links entry, version) of each wheel of `name` in the local folders, in order."""
    want = canonicalize_name(name)
    found = []
    for link in find_links:
        folder = local_path(link)
        if folder is None:
            continue
        for dist, version in sorted(folder_distributions(folder, sdists=False)):
            if dist == want:
                found.append((link, version))
    return found


def wheelhouse_versions(find_links: Sequence[str], name: str) -> list[str]:
    """The public versions of `name` that local find-links folders hold, newest first."""
    versions = {Version(v.public) for _, v in _held_wheels(find_links, name)}
    return [str(v) for v in sorted(versions, reverse=True)]


def wheelhouse_has(find_links: Sequence[str], name: str, version: str) -> str | None:
    """The local find-links folder holding a wheel of name==version (any local label), if any.

    Such a wheelhouse stands in for the framework's own index at lock time (the PyTorch index
    is not reachable everywhere); the lock's hashes still decide what may be installed.
    """
    for link, held in _held_wheels(find_links, name):
        if held.public == version:
            return link
    return None


def reuploaded(old: Sequence[LockedPackage], new: Sequence[LockedPackage]) -> list[str]:
    """Same name and version, different files: the index replaced files in place."""
    before = {(p.name, p.version): set(p.hashes) for p in old}
    out = []
    for p in new:
        prev = before.get((p.name, p.version))
        if prev is not None and prev != set(p.hashes):
            gone = len(prev - set(p.hashes))
            out.append(
                f"{p.name}=={p.version}: the index now serves different files than the previous "
                f"lock recorded ({gone} old hash(es) gone). The package index may have "
                "re-uploaded wheels under the same version (the PyTorch index has done so "
                "repeatedly; PyPI torch 2.10.0 has build-tag re-uploads); the new lock takes the "
                "index's current hashes. If you did not expect this, check the index's release "
                "history before building."
            )
    return out

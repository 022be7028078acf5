"""Locking packages that only an sdist provides, and the builder stage's own pins, without
building anything at lock time.

uv pins wheels only (`--only-binary :all:`). When it answers that a requirement has no wheel
for the image, the requirement may come from its sdist (`--no-binary NAME` for exactly those
names): always when the sdist is pure Python (no compiled code, read from its file list:
`extensions.compiled_code`; the builder stage only turns it into a wheel), and when the request
compiles extensions otherwise. uv would build an sdist whose metadata is not
static to learn its dependencies, so it is told them instead (`dependency-metadata`): first
with none, to learn which version it picks; then, read from that sdist's own PKG-INFO or
pyproject.toml (hash checked), with the version pinned. The builder stage's extra pins (the
sdists' `[build-system] requires` and, without a devel image, NVIDIA's toolkit wheels) are
then pinned against the image's own pins, so torch and the CUDA components stay the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from envbuild.core.errors import EnvbuildError, LockError, PinError, UnsatisfiableError
from envbuild.core.models import FRAMEWORK_FLAVOUR, ExtensionBuild, LockedPackage, Request, Stack
from envbuild.cuda import extensions
from envbuild.lock import pins as pydeps

Pin = Callable[[pydeps.PinRequest], pydeps.PinResult]
Held = Callable[[str], bool]
"""True for a requirement line that needs no pin (a framework base already satisfies it)."""
MAX_ROUNDS = 8
"""uv names one wheel-less requirement per failed resolution; a request with more than this
many is refused rather than looped on."""


@dataclasses.dataclass(frozen=True)
class SourcePins:
    """The pins with source packages allowed, and what the lock output says about them."""

    result: pydeps.PinResult
    notes: tuple[str, ...] = ()


def pin_allowing_sources(
    pin: Pin, req: pydeps.PinRequest, request: Request, *, drop: Held | None = None
) -> SourcePins:
    """`pin(req)`; where uv answers that a requirement only has an sdist, lock it from that
    sdist when it is pure Python or the request compiles extensions (else the error says how
    to allow it).
    `drop`: the sdist's dependencies that need no resolving (a framework base holds them)."""
    meta: dict[str, pydeps.DependencyMetadata] = {}
    read: dict[str, extensions.SdistMetadata] = {}
    pinned_versions: dict[str, str] = {}
    # Sdists allowed only if pure Python (the request compiles nothing): uv's refusal, kept
    # for the error when one turns out to hold compiled code.
    refused: dict[str, UnsatisfiableError] = {}
    for _ in range(MAX_ROUNDS):
        current = dataclasses.replace(
            req,
            requirements=(*req.requirements, *(f"{n}=={v}" for n, v in pinned_versions.items())),
            source_packages=tuple(sorted(meta)),
            dependency_metadata=tuple(meta[n] for n in sorted(meta)),
        )
        try:
            result = pin(current)
        except UnsatisfiableError as err:
            names = [str(n) for n in err.fields.get("source_only") or ()]
            if not names:
                raise
            if not request.compile_extensions:
                refused.update({n: err for n in names})
            meta.update({n: pydeps.DependencyMetadata(n, None) for n in names})
            continue
        unread = [n for n in sorted(meta) if meta[n].version is None]
        if not unread:
            return SourcePins(_with_build_requires(result, read), _notes(result, read))
        urls = dict(result.sdist_urls)
        versions = {p.name: p for p in result.packages}
        for name in unread:
            pkg = versions.get(name)
            if pkg is None or name not in urls:
                raise PinError(
                    f"uv locked {name} without naming the sdist it came from",
                    hint="run with ENVBUILD_DEBUG=1 and report it",
                )
            read[name] = _read_sdist(name, urls[name], pkg.hashes, offline=req.offline)
            if read[name].compiled and name in refused:
                raise _compiled_refused(name, pkg.version, read[name].compiled, refused[name])
            needs = tuple(r for r in read[name].requires_dist if drop is None or not drop(r))
            meta[name] = pydeps.DependencyMetadata(name, pkg.version, needs)
            pinned_versions[name] = pkg.version
    raise LockError(
        f"more than {MAX_ROUNDS} requirements have no wheel for this image: "
        f"{', '.join(sorted(meta))}",
        hint="require versions that publish wheels for this Python and platform",
    )


def _compiled_refused(name: str, version: str, why: str, err: UnsatisfiableError) -> LockError:
    return LockError(
        f"{name} {version} has no wheel for this image and its sdist holds compiled code "
        f"({why}); the image compiles only with [image] compile_extensions = true:\n"
        f"{err.message}",
        hint=err.hint,
        fields={**err.fields, "compiled": why},
    )


def _with_build_requires(
    result: pydeps.PinResult, read: dict[str, extensions.SdistMetadata]
) -> pydeps.PinResult:
    packages = tuple(
        dataclasses.replace(
            p, build_requires=read[p.name].build_requires, pure=not read[p.name].compiled
        )
        if p.name in read
        else p
        for p in result.packages
    )
    return dataclasses.replace(result, packages=packages)


def _notes(result: pydeps.PinResult, read: dict[str, extensions.SdistMetadata]) -> tuple[str, ...]:
    """Warnings about source packages whose dependencies are not declared static (`envbuild
    lock` prints every source package itself, from the lock)."""
    notes = []
    for p in result.packages:
        meta = read.get(p.name)
        if meta is not None and not meta.static:
            deps = ", ".join(meta.requires_dist) or "none"
            where = (
                "egg-info's requires.txt" if meta.source == extensions.REQUIRES_TXT else "PKG-INFO"
            )
            notes.append(
                f"{p.name} {p.version}: its dependencies ({deps}) come from its {where} "
                f"(metadata {meta.metadata_version or 'unknown'}, not declared static); its "
                "setup.py could ask for others at build time, which the build does not "
                "install (--no-deps)"
            )
    return tuple(notes)


def _read_sdist(
    name: str, where: str, hashes: Sequence[str], *, offline: bool
) -> extensions.SdistMetadata:
    """The sdist's own metadata, from bytes whose sha256 the lock records."""
    data = _sdist_bytes(name, where, offline=offline)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if digest not in hashes:
        raise PinError(
            f"the sdist of {name} at {where} has {digest}, not the hash uv locked",
            hint="the file changed while locking (or on the way); run `envbuild lock` again",
            fields={"package": name, "url": where},
        )
    try:
        return extensions.sdist_metadata(data, urlsplit(where).path or where)
    except (ValueError, OSError, EnvbuildError) as exc:
        raise PinError(
            f"cannot read the metadata of {name}'s sdist ({where}): {exc}",
            hint="the sdist is malformed; require a version with a wheel or a proper sdist",
            fields={"package": name, "url": where},
        ) from None


def _sdist_bytes(name: str, where: str, *, offline: bool) -> bytes:
    parts = urlsplit(where)
    if parts.scheme in ("", "file"):
        path = Path(unquote(parts.path) if parts.scheme == "file" else where)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise PinError(
                f"cannot read the sdist of {name} ({path}): {exc.strerror}",
                hint="check the [indexes] find_links folder",
            ) from None
    if offline:
        raise PinError(
            f"--offline: the sdist of {name} ({where}) must be read once to lock it",
            hint="run the same command once without --offline",
        )
    from envbuild.matrix.refresh.pypi import Fetcher

    try:
        return Fetcher().get(where, what=f"the sdist of {name}").body
    except EnvbuildError as err:
        raise PinError(err.message, hint="check the network and the [indexes] URLs") from None


def as_requested(
    result: pydeps.PinResult, requested: Sequence[str], resolved: Sequence[str]
) -> pydeps.PinResult:
    """Sources spelled as the request spells its find_links ("wheels", relative to the image
    folder), not as the absolute path they were resolved to, so a lock made in another
    checkout has the same bytes."""
    spelling = {r: q for q, r in zip(requested, resolved, strict=False) if q != r}
    if not spelling:
        return result
    packages = tuple(
        dataclasses.replace(p, source=spelling.get(p.source, p.source)) for p in result.packages
    )
    return dataclasses.replace(result, packages=packages)


# --- the builder stage's own pins ----------------------------------------------------------


def lock_build(
    pin: Pin,
    base: pydeps.PinRequest,
    stack: Stack,
    packages: Sequence[LockedPackage],
    *,
    drop: Held | None = None,
) -> ExtensionBuild | None:
    """[build] for a lock whose `packages` hold sdists (None when none): the toolchain (none
    when every sdist is pure Python; else a devel builder image, a framework base's own
    toolkit, else NVIDIA's toolkit wheels) and the builder-only pins, pinned against the
    image's own pins; `drop`: build requirements that need no pin (a framework base already
    holds them)."""
    sources = [p for p in packages if p.sdist]
    if not sources:
        return None
    runtime = {p.name: p for p in packages if not p.sdist}
    constraints = tuple(f"{p.name}=={p.version}" for p in sorted(runtime.values(), key=_name))
    wanted = sorted({r for p in sources for r in p.build_requires if drop is None or not drop(r)})
    if all(p.pure for p in sources):
        # Only wheels to build: no compiler, no target GPUs (a plain builder stage).
        build_deps = _pin_part(pin, base, tuple(wanted), constraints) if wanted else ()
        extra = {p.name: p for p in build_deps if p.name not in runtime}
        return ExtensionBuild(
            toolchain="none", cuda_archs=(), packages=tuple(extra[n] for n in sorted(extra))
        )
    archs = extensions.build_archs(stack.target_archs, stack.archs)
    if not archs:
        raise LockError(
            f"{', '.join(p.name for p in sources)} will be compiled for the target GPUs, but "
            "the request names none",
            hint='list them: [targets] gpus = ["H100", "L4"] (the extension gets a cubin for '
            "each, nothing else)",
        )
    toolchain: tuple[LockedPackage, ...] = ()
    # A framework base is its own builder: NGC's framework containers are devel images (nvcc
    # and the CUDA headers in /usr/local/cuda), and their torch is the one to compile against.
    own = stack.base_image.builder or stack.flavour == FRAMEWORK_FLAVOUR
    mode = "devel" if own else "wheels"
    if mode == "wheels":
        toolchain = _pin_toolchain(pin, base, stack, list(runtime.values()), constraints)
    build_deps = _pin_part(pin, base, tuple(wanted), constraints) if wanted else ()
    extra = {p.name: p for p in (*toolchain, *build_deps) if p.name not in runtime}
    return ExtensionBuild(
        toolchain=mode,
        cuda_archs=archs,
        toolchain_packages=tuple(sorted(p.name for p in toolchain)),
        packages=tuple(extra[n] for n in sorted(extra)),
    )


def _name(p: LockedPackage) -> str:
    return p.name


def _pin_toolchain(
    pin: Pin,
    base: pydeps.PinRequest,
    stack: Stack,
    runtime: Sequence[LockedPackage],
    constraints: tuple[str, ...],
) -> tuple[LockedPackage, ...]:
    cuda = stack.cuda or ""
    if not cuda or not extensions.wheels_have_nvcc(cuda):
        raise LockError(
            f"compiling extensions for CUDA {cuda or '(none)'} needs an nvidia/cuda devel "
            f"image for {stack.os}, and the matrix has none; NVIDIA's PyPI wheels hold nvcc "
            "only from CUDA 13.0 on",
            hint='use an OS with nvidia/cuda images (os = "ubuntu24.04") and flavour "auto", '
            "or a CUDA 13 build of the framework ([framework] cuda)",
            fields={"cuda": cuda, "os": stack.os},
        )
    return _pin_part(pin, base, extensions.toolchain_requirements(cuda, runtime), constraints)


def _pin_part(
    pin: Pin, base: pydeps.PinRequest, requirements: tuple[str, ...], constraints: tuple[str, ...]
) -> tuple[LockedPackage, ...]:
    """Pins of `requirements` (wheels only) that keep every runtime pin (`constraints`)."""
    req = dataclasses.replace(
        base,
        requirements=requirements,
        constraints=(*base.constraints, *constraints),
        preferences=(),
        source_packages=(),
        dependency_metadata=(),
    )
    try:
        return pin(req).packages
    except UnsatisfiableError as err:
        raise UnsatisfiableError(
            f"the builder stage's requirements ({', '.join(requirements)}) cannot be pinned "
            f"together with the image's own pins:\n{err.message}",
            hint="a build requirement conflicts with the locked packages (for example an "
            "sdist that wants another torch): require a version of it that fits them",
            fields=err.fields,
        ) from None

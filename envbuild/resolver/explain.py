"""Why nothing fits: merged reason lines and the checked ways out (alternatives)."""

from __future__ import annotations

from dataclasses import replace

from envbuild.core.models import free_threaded_minor
from envbuild.resolver.context import (
    _branch,
    _Ctx,
    _first_cuda_floor,
    _Fit,
    _label_versions,
    _major_minor,
    _Outcome,
    _series,
    _Target,
    _version,
)
from envbuild.resolver.search import _search

WORDS: dict[str, dict[str, str]] = {
    # How a way out names the change it checked: as `envbuild resolve` takes it, or as an
    # envbuild.toml says it (what `envbuild lock` is given). One table for both.
    "flags": {
        "framework": "--framework '{}'",
        "driver": "--driver {}",
        "python": "--python {}",
        "drop python": "--python",
        "drop os": "--os",
        "drop cuda_spec": "--cuda",
        "drop flavour": "--flavour",
        "drop variants": "the extra in --framework",
        "minor compat": "drop --strict-compat",
        "framework index": "or drop --framework-index",
    },
    "keys": {
        "framework": '[framework] requirement = "{}"',
        "driver": '[targets] driver = "{}"',
        "python": '[image] python = "{}"',
        "drop python": "[image] python",
        "drop os": "[image] os",
        "drop cuda_spec": "[framework] cuda",
        "drop flavour": "[image] flavour",
        "drop variants": "the extra in [framework] requirement",
        "minor compat": 'drop [targets] compat = "strict"',
        "framework index": "or drop it",
    },
}


def _say(ctx: _Ctx, change: str, value: str = "") -> str:
    return WORDS[ctx.words][change].format(value)


MAX_REASON_LINES = 14
"""Per-release reasons beyond this are summarised in one line (newest releases come first)."""


def _reason_lines(ctx: _Ctx, outcome: _Outcome) -> list[str]:
    """Global reasons, then per-release lines (newest first); releases with identical lines
    are merged ("torch 2.6.0, 2.6.1: ..." is said once as "torch 2.6.0, 2.6.1")."""
    fw = ctx.framework
    lines = list(outcome.global_reasons)
    groups: list[tuple[list[str], list[str]]] = []  # (versions, template lines)
    for rel in outcome.releases:
        tmpl = outcome.misses.get(rel.version)
        if not tmpl:
            continue
        if groups and groups[-1][1] == tmpl:
            groups[-1][0].append(rel.version)
        else:
            groups.append(([rel.version], tmpl))
    flat: list[str] = []
    for versions, tmpl in groups:
        label = f"{fw} {_label_versions(versions)}"
        flat.extend(t.replace("{R}", label) for t in tmpl)
    if len(flat) > MAX_REASON_LINES:
        rest = len(flat) - MAX_REASON_LINES
        flat = [*flat[:MAX_REASON_LINES], f"... {rest} more reasons for older {fw} releases"]
    return lines + flat


def _fit_label(ctx: _Ctx, fit: _Fit) -> str:
    cuda = f" (CUDA {fit.build.cuda})" if fit.build.cuda else ""
    return f"{ctx.framework} {fit.release.version} {fit.build.variant}{cuda}"


def _alternatives(ctx: _Ctx, outcome: _Outcome) -> list[str]:
    """The nearest ways out, each checked by resolving the changed request."""
    alts: list[str] = []
    retired = [
        t
        for t in ctx.targets
        if ctx.driver
        and t.arch.last_driver_branch is not None
        and _branch(ctx.driver) > t.arch.last_driver_branch
    ]
    if retired:
        return _older_drivers(ctx, retired)
    if ctx.spec:
        alts += _other_versions(ctx, outcome)
    if ctx.driver:
        alts += _newer_drivers(ctx)
    alts += _shipped_pythons(ctx)
    alts += _looser_requests(ctx)
    alts += _other_index(ctx)
    out: list[str] = []
    for a in alts:
        if a not in out:
            out.append(a)
    return out


def _older_drivers(ctx: _Ctx, retired: list[_Target]) -> list[str]:
    """Ways out when the driver is newer than a GPU's last branch: that GPU's hosts run an
    older branch (then the oldest driver is that one), or the image leaves the GPU out."""
    alts: list[str] = []
    for t in retired:
        last = t.arch.last_driver_branch
        fit = _best(replace(ctx, driver=str(last)))
        alts.append(
            f"an older driver on the {t.label} hosts: branch R{last} or older (R{last} is the "
            f"last for {t.arch.family})"
            + (
                f"; with {_say(ctx, 'driver', str(last))} {_fit_label(ctx, fit)} fits"
                if fit
                else ""
            )
        )
        rest = tuple(x for x in ctx.targets if x is not t)
        if rest:
            other = _best(replace(ctx, targets=rest))
            if other:
                alts.append(
                    f"drop {t.label} from this image: {_fit_label(ctx, other)} fits the other GPUs"
                )
        else:
            alts.append(f"another GPU: {t.arch.family} GPUs need a driver branch <= R{last}")
    return alts


def _best(ctx: _Ctx) -> _Fit | None:
    res = _search(ctx, first_only=True)
    return res.fits[0] if res.fits else None


def _other_versions(ctx: _Ctx, outcome: _Outcome) -> list[str]:
    """Another framework version: the nearest above and below the requested range."""
    fw = ctx.framework
    alts: list[str] = []
    allfits = _search(replace(ctx, spec=""), first_only=False).fits
    asked = [_version(r.version) for r in outcome.releases]
    if not allfits:
        return alts
    lo, hi = (min(asked), max(asked)) if asked else (None, None)
    above = [f for f in allfits if hi is not None and _version(f.release.version) > hi]
    below = [f for f in allfits if lo is not None and _version(f.release.version) < lo]
    picks = []
    if above:
        # The nearest series above, at its newest release (fits are newest-first).
        near = min(_major_minor(f.release.version) for f in above)
        picks.append(next(f for f in above if _major_minor(f.release.version) == near))
    if below:
        picks.append(max(below, key=lambda f: _version(f.release.version)))
    if not picks:
        picks.append(allfits[0])
    # The flag keeps the request's variant extra (jax[cuda12]): the fit was found with it.
    asked_fw = f"{fw}[{','.join(ctx.variants)}]" if ctx.variants else fw
    for f in picks:
        s = _series(f.build, f.release)
        pin = f"{s}.*" if s != f.release.version else s
        alts.append(
            f"another {fw} version: {_fit_label(ctx, f)} fits "
            f"({_say(ctx, 'framework', f'{asked_fw}=={pin}')})"
        )
    return alts


def _newer_drivers(ctx: _Ctx) -> list[str]:
    """A newer driver: the minimum that would work, and what the newest release would need."""
    alts: list[str] = []
    fits = _search(replace(ctx, driver=None), first_only=False).fits
    # Every target GPU must also be known to the driver (its arch's first driver branch).
    floors = [
        first.toolkit_driver
        for t in ctx.targets
        if (first := _first_cuda_floor(ctx.matrix, t.arch)) is not None
    ]
    gpu_floor = max(floors, key=_version) if floors else None
    needed = [
        (max((f.needed_driver, gpu_floor or "0"), key=_version), f)
        for f in fits
        if f.needed_driver is not None
    ]
    if needed:
        # The lowest driver; among equals the newest release (fits are newest-first).
        low_d, low = min(needed, key=lambda x: _version(x[0]))
        alts.append(
            f"a newer driver: >= {low_d} on every target host would allow {_fit_label(ctx, low)}"
        )
        top_d, top = needed[0]
        if _version(top_d) > _version(low_d):
            alts.append(
                f"a newer driver: >= {top_d} would allow the newest, {_fit_label(ctx, top)}"
            )
    return alts


def _looser_requests(ctx: _Ctx) -> list[str]:
    """Minor-version compatibility instead of strict; one GPU less in the image; one of
    --python/--os/--cuda/--flavour/the variant extra dropped."""
    alts: list[str] = []
    if ctx.policy == "strict":
        minor = _best(replace(ctx, policy="minor"))
        if minor and minor.floors:
            alts.append(
                f"allow minor-version compatibility ({_say(ctx, 'minor compat')}): "
                f"{_fit_label(ctx, minor)} fits with driver >= {minor.floors.effective}"
            )
    # Drop one GPU from the image (one image per GPU group instead).
    if len(ctx.targets) > 1:
        for t in ctx.targets:
            rest = tuple(x for x in ctx.targets if x is not t)
            fewer = _best(replace(ctx, targets=rest))
            if fewer:
                alts.append(
                    f"drop {t.label} from this image (build it a separate image): "
                    f"{_fit_label(ctx, fewer)} fits the other GPUs"
                )
    for what, changed, flag in (
        ("python", replace(ctx, python=None), _say(ctx, "drop python")),
        ("os", replace(ctx, os=None), _say(ctx, "drop os")),
        ("cuda_spec", replace(ctx, cuda_spec=None), _say(ctx, "drop cuda_spec")),
        ("flavour", replace(ctx, flavour="auto"), _say(ctx, "drop flavour")),
        ("variants", replace(ctx, variants=()), _say(ctx, "drop variants")),
    ):
        if getattr(ctx, what) in (None, "auto", ()):
            continue
        loose = _best(changed)
        if loose:
            alts.append(
                f"drop {flag}: {_fit_label(ctx, loose)} fits with Python {loose.osimg.python} "
                f"on {loose.osimg.os}"
            )
    return alts


def _shipped_pythons(ctx: _Ctx) -> list[str]:
    """When no OS row ships the Python asked for (3.9, a free-threaded 3.14t): for a
    free-threaded one first its GIL build (an OS's or a managed one), then each Python an OS
    row does ship that fits, newest first, as the exact flag (docs/request.md, "Python")."""
    rows = ctx.matrix.os_images
    if not ctx.python or ctx.os or any(o.python == ctx.python for o in rows):
        return []
    out: list[str] = []
    gil = free_threaded_minor(ctx.python)
    same = _best(replace(ctx, python=gil)) if gil else None
    if gil and same:
        how = " (a managed Python)" if same.python_build else ""
        out.append(
            f"{_say(ctx, 'python', gil)}: {_fit_label(ctx, same)} fits on {same.osimg.os}{how}, "
            "with the GIL"
        )
    for python in sorted({o.python for o in rows}, key=_major_minor, reverse=True):
        fit = _best(replace(ctx, python=python)) if python != gil else None
        if fit:
            out.append(
                f"{_say(ctx, 'python', python)}: {_fit_label(ctx, fit)} fits on {fit.osimg.os}"
            )
    return out


def _left_out_indexes(ctx: _Ctx) -> list[str]:
    """The framework's own indexes whose builds the policy or the probe left out."""
    if ctx.framework_index == "index":
        return []
    urls = {
        b.index_url
        for b in ctx.matrix.builds
        if b.framework == ctx.framework
        and b.index_url
        and (ctx.framework_index == "pypi" or b.index_url in ctx.unreachable)
    }
    return sorted(urls)


def _index_reasons(ctx: _Ctx) -> list[str]:
    """Said first when builds were left out for where they install from."""
    left = _left_out_indexes(ctx)
    if not left:
        return []
    if ctx.framework_index == "pypi":
        return [
            f"only {ctx.framework} builds that install from PyPI (or the configured index_url) "
            'are considered ([indexes] framework_index = "pypi")'
        ]
    return [
        f"{ctx.framework} builds from {', '.join(left)} are left out: "
        + ("it does not answer" if len(left) == 1 else "they do not answer")
    ]


def _other_index(ctx: _Ctx) -> list[str]:
    """The framework's own index allowed again, when that is what left the fits out."""
    if not _left_out_indexes(ctx):
        return []
    fit = _best(replace(ctx, framework_index="auto", unreachable=frozenset()))
    if fit is None:
        return []
    where = fit.build.index_url or "PyPI"
    if ctx.framework_index == "pypi":
        return [
            f'allow the framework\'s own index ([indexes] framework_index = "auto", '
            f"{_say(ctx, 'framework index')}): {_fit_label(ctx, fit)} fits, from {where}"
        ]
    return [f"once {where} answers: {_fit_label(ctx, fit)} fits, from it"]

"""The `envbuild matrix` use cases: `check` (strict validation of the built-in matrix and an
overlay) and `refresh` (the only command that reads the network for the matrix: PyPI, the
PyTorch index and the registry -> reviewable rows appended to matrix/<framework>.toml).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from pathlib import Path

from envbuild.core.errors import MatrixError, SourceUnreachableError
from envbuild.core.fsio import write_output
from envbuild.core.resources import matrix_dir as default_matrix_dir
from envbuild.matrix import (
    Matrix,
    MatrixReport,
    check_files,
    collect,
    read_matrix_files,
    refresh,
    sources_from,
)
from envbuild.matrix.refresh import pypi


def check(*, overlay: Path | None = None) -> MatrixReport:
    """Validate the built-in matrix merged with the overlay folder (None = none). Problems
    come back in the report (the command exits 1); MatrixError (exit 2) for an unreadable,
    non-UTF-8 or invalid-TOML file."""
    built_in, extra = sources_from(overlay)
    return check_files(built_in, extra)


@dataclasses.dataclass
class _Gathered:
    """What the sources gave so far: derived rows, the sources read, the ones that failed."""

    derived: list[refresh.Derived]
    ok: list[str]
    failed: list[tuple[str, str]]


def refresh_matrix(
    *,
    sources: tuple[str, ...] = ("pypi", "pytorch-index", "registry"),
    frameworks: tuple[str, ...] = ("torch", "jax", "tensorflow"),
    dry_run: bool = False,
    matrix_dir: Path | None = None,
    today: str | None = None,
    fetcher: pypi.Fetcher | None = None,
) -> refresh.RefreshResult:
    """Fetch the selected sources, derive rows, append new release rows to
    `<matrix_dir>/<framework>.toml` (unless dry_run), and report the rest. Unreachable sources
    are skipped; SourceUnreachableError (exit 3) when none could be read."""
    folder = matrix_dir if matrix_dir is not None else default_matrix_dir()
    files = read_matrix_files(folder, label=folder.name) if folder.is_dir() else {}
    matrix, problems_before, _ = collect(files)
    fetcher = fetcher if fetcher is not None else pypi.Fetcher()
    seen = today or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    gathered = _gather(fetcher, matrix, sources, frameworks, seen)
    if not gathered.ok:
        raise SourceUnreachableError(
            "no source could be read: " + "; ".join(f"{s}: {m}" for s, m in gathered.failed),
            hint="check the network or proxy (HTTPS_PROXY) and rerun `envbuild matrix refresh`",
            fields={"sources_failed": dict(gathered.failed)},
        )
    plan = dataclasses.replace(
        refresh.plan_changes(matrix, gathered.derived),
        warnings=tuple(f"{s}: {m}" for s, m in gathered.failed),
    )
    new_texts = _new_release_texts(plan, files, folder, frameworks, problems_before)
    written: list[str] = []
    if not dry_run:
        for name, text in sorted(new_texts.items()):
            path = folder / name.split("/", 1)[1]
            write_output(path, text, what="the matrix file")
            written.append(str(path))
    return refresh.RefreshResult(
        plan, tuple(written), dry_run, tuple(gathered.ok), tuple(gathered.failed)
    )


def _gather(
    fetcher: pypi.Fetcher,
    matrix: Matrix,
    sources: Sequence[str],
    frameworks: Sequence[str],
    seen: str,
) -> _Gathered:
    """Rows and findings from each selected source; a source that cannot be read is recorded
    in `failed` and skipped."""
    gathered = _Gathered(derived=[], ok=[], failed=[])
    if "pypi" in sources:
        _gather_pypi(fetcher, matrix, frameworks, seen, gathered)
    if "pytorch-index" in sources and "torch" in frameworks:
        try:
            page = pypi.pytorch_index_page(fetcher, None, "torch")
            variants = refresh.index_variants(refresh.parse_simple_html(page.text(), page.url))
            gathered.derived.append(
                refresh.Derived(findings=refresh.variant_findings("torch", variants, matrix))
            )
            gathered.ok.append("pytorch-index")
        except SourceUnreachableError as err:
            gathered.failed.append(("pytorch-index", err.message))
    if "registry" in sources:
        try:
            _url, tags = pypi.docker_hub_tags(fetcher, "nvidia/cuda")
            families = refresh.cuda_tag_families(tags)
            gathered.derived.append(
                refresh.Derived(findings=refresh.image_findings(families, matrix))
            )
            gathered.ok.append("registry")
        except SourceUnreachableError as err:
            gathered.failed.append(("registry", err.message))
    return gathered


def _gather_pypi(
    fetcher: pypi.Fetcher,
    matrix: Matrix,
    frameworks: Sequence[str],
    seen: str,
    gathered: _Gathered,
) -> None:
    # One project that cannot be read (a 404, a timeout) skips that project, not PyPI.
    channels = []
    for framework in frameworks:
        for channel in refresh.CHANNELS[framework]:
            try:
                since = refresh.since_for(framework, matrix)
                channels.append(pypi.gather_channel(fetcher, channel, since=since))
            except SourceUnreachableError as err:
                gathered.failed.append((f"pypi ({channel.project})", err.message))
    if not channels:
        return
    try:
        runtime_pins = pypi.gather_runtime_pins(fetcher, channels)
    except SourceUnreachableError as err:
        gathered.failed.append((f"pypi ({refresh.TOOLKIT_PROJECT})", err.message))
        runtime_pins = {}
    gathered.derived.extend(
        refresh.derive_channel(c, runtime_pins=runtime_pins, seen=seen) for c in channels
    )
    gathered.ok.append("pypi")


def _new_release_texts(
    plan: refresh.Plan,
    files: dict[str, str],
    folder: Path,
    frameworks: Sequence[str],
    problems_before: Sequence[str],
) -> dict[str, str]:
    """New release rows appended to `<folder>/<framework>.toml`; MatrixError when the result
    would not be a valid matrix (nothing is written then)."""
    new_texts: dict[str, str] = {}
    for framework in frameworks:
        rows = [r for r in plan.new_releases if r.framework == framework]
        if not rows:
            continue
        name = f"{folder.name}/{framework}.toml"
        old = files.get(name, refresh.new_framework_file(framework))
        new_texts[name] = refresh.append_rows(old, "release", rows)
    if new_texts:
        _, problems_after, _ = collect({**files, **new_texts})
        introduced = sorted(set(problems_after) - set(problems_before))
        if introduced:
            raise MatrixError(
                f"refresh would make the matrix invalid: {introduced[0]}",
                hint="nothing was written; report this with `envbuild matrix refresh --dry-run "
                "--json` output",
                fields={"problems": introduced},
            )
    return new_texts

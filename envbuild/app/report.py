"""`--report FILE.html` of `envbuild image`, `smoke` and `validate`, and the memory fit they print.

The page is `envbuild.render.report.page`; it is written by the rule of every output
(`fsio.write_output`: atomically, through a symlink, into a FIFO or terminal), and on a failure
too (it shows what failed). `check_path` refuses a path that cannot be written before a long
build rather than after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envbuild import matrix as matrix_data
from envbuild.core.fsio import check_output, write_output
from envbuild.render import report as html
from envbuild.smoke import fit as memfit


def check_path(path: Path | None) -> None:
    """UserError (exit 2) for a --report that is a folder, a socket, a dangling symlink or
    under a file (`fsio.check_output`)."""
    if path is not None:
        check_output(path, what="--report")


def memory_fit(
    report: Mapping[str, Any] | None,
    matrix_overlay: Path | None = None,
    *,
    targets: Sequence[str] = (),
    command: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The run's memory fit (the payload's report and the project's smoke step `command`)
    against the lock's target GPUs (every GPU the matrix knows the memory of when there are
    none), as JSON; None when the run has no peak."""
    if not report and not command:
        return None
    table = memfit.matrix_memory(matrix_data.load_matrix_from(matrix_overlay))
    got = memfit.memory_fit(report, memfit.for_targets(table, targets), command)
    return got.to_json() if got is not None else None


def write(
    path: Path,
    *,
    title: str,
    ok: bool,
    report: Mapping[str, Any] | None,
    checks: Sequence[Mapping[str, Any]] = (),
    fit: Mapping[str, Any] | None = None,
    error: str = "",
    command: Mapping[str, Any] | None = None,
) -> None:
    """Render the page and write it atomically (FileWriteError, exit 3, when it cannot be)."""
    text = html.page(
        title=title,
        verdict="pass" if ok else "fail",
        report=report,
        checks=checks,
        memory_fit=fit,
        error=error,
        command=command,
    )
    write_output(path, text, what="--report")

"""The `envbuild render` use case: the fresh lock's Dockerfile, written or printed, and the
whole build context when asked. Never re-resolves: a stale lock raises StaleLockError with
the command to run.
"""

from __future__ import annotations

from pathlib import Path

from envbuild import matrix as matrix_data
from envbuild import render as rendering
from envbuild.app import inputs
from envbuild.errors import UserError
from envbuild.fsio import replace_folder, write_atomic


def render(
    *,
    image_dir: Path,
    build_inputs: rendering.BuildInputs | None = None,
    output: Path | None = None,
    context: Path | None = None,
    matrix_overlay: Path | None = None,
) -> rendering.RenderResult:
    """The Dockerfile of `image_dir`'s fresh lock; written to `output` atomically when given,
    and the whole build context to `context` (a folder, or a `.tar` file) when given."""
    options = rendering.render_options(build_inputs or rendering.BuildInputs())
    _request, lock, lock_text = inputs.load_fresh_text(image_dir, matrix_overlay=matrix_overlay)
    dockerfile = rendering.render_dockerfile(
        lock, options=options, template_dir=image_dir, lock_text=lock_text
    )
    files = 0
    if context is not None:
        context_files = rendering.build_context(
            lock,
            lock_text,
            image_dir=image_dir,
            options=options,
            matrix=matrix_data.load_matrix_from(matrix_overlay),
        )
        write_context(context, context_files)
        files = len(context_files)
    if output is not None:
        write_atomic(output, dockerfile)
    return rendering.RenderResult(
        dockerfile=dockerfile, output=output, context=context, context_files=files
    )


def write_context(dest: Path, files: dict[str, bytes]) -> None:
    """A build context as a reproducible `.tar` file, or as a folder swapped in whole (a
    reader never sees half of it). An existing folder is only replaced when it is empty or an
    earlier context (Dockerfile + envbuild.lock at its root)."""
    if dest.name.endswith(".tar"):
        write_atomic(dest, rendering.context_tar(files))
        return
    if dest.exists():
        earlier = (dest / "Dockerfile").is_file() and (dest / "envbuild.lock").is_file()
        if not dest.is_dir() or (any(dest.iterdir()) and not earlier):
            raise UserError(
                f"{dest} exists and is not an earlier build context",
                hint="give a new or empty folder, or a path ending in .tar",
            )
    replace_folder(dest, files)

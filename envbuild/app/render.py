"""The `envbuild render` use case: the fresh lock's Dockerfile, written or printed, and the
whole build context when asked. Never re-resolves: a stale lock raises StaleLockError with
the command to run.
"""

from __future__ import annotations

import os
from pathlib import Path

from envbuild import matrix as matrix_data
from envbuild.app import inputs
from envbuild.app.project_version import project_version
from envbuild.core.errors import UserError
from envbuild.core.fsio import is_own_folder, replace_folder, write_output
from envbuild.render import dockerfile as rendering
from envbuild.render import local_wheels
from envbuild.request import sourcetree


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
    notes: list[str] = []
    if context is not None:
        # A context holds the wheelhouse; a Dockerfile alone never needs one (nor this check).
        options, note = local_wheels.lock_wheelhouse(lock, options, image_dir=image_dir)
        notes += [note] if note else []
    version = project_version(lock, image_dir, os.environ)
    if version is not None:
        notes.append(f"the project's version: {version.value} ({version.source})")
    dockerfile = rendering.render_dockerfile(
        lock,
        options=options,
        template_dir=image_dir,
        lock_text=lock_text,
        project_version=version,
    )
    # Walked apart from the context (which reads the files) so that a render to stdout
    # reports it too; it costs a stat per file.
    survey = sourcetree.project_survey(lock.project, image_dir, exclude=context)
    files = 0
    if context is not None:
        context_files = rendering.build_context(
            lock,
            lock_text,
            image_dir=image_dir,
            options=options,
            matrix=matrix_data.load_matrix_from(matrix_overlay),
            dest=context,
            project_version=version,
        )
        notes += _written(write_context(context, context_files, image_dir=image_dir))
        files = len(context_files)
    if output is not None:
        notes += _written(write_output(output, dockerfile, what="-o"))
    return rendering.RenderResult(
        dockerfile=dockerfile,
        output=output,
        context=context,
        context_files=files,
        left_out=None if survey is None else survey.left_out,
        notes=tuple(notes),
    )


def _written(note: str) -> list[str]:
    """The line that says an output was written into a special file, not replaced."""
    return [f"wrote into {note}"] if note else []


def write_context(dest: Path, files: dict[str, bytes], *, image_dir: Path) -> str:
    """A build context as a reproducible `.tar` file, or as a folder swapped in whole (a
    reader never sees half of it). A folder is replaced only when it is new, empty, or holds
    exactly an earlier context envbuild wrote (its marker and the files it lists): never the
    image folder, a folder around it, or a folder with anyone else's files in it."""
    if dest.name.endswith(".tar"):
        return write_output(dest, rendering.context_tar(files), what="--context")
    target, folder = dest.resolve(), image_dir.resolve()
    if target == folder or target in folder.parents:
        raise UserError(
            f"{dest} holds the image folder {image_dir}: a build context there would replace it",
            hint="give a new folder for the context (for example build/context), or a path "
            "ending in .tar",
            fields={"context": str(dest)},
        )
    if dest.exists() or dest.is_symlink():
        if dest.is_symlink() or not dest.is_dir():
            raise UserError(
                f"{dest} exists and is not a folder",
                hint="give a new or empty folder, or a path ending in .tar",
                fields={"context": str(dest)},
            )
        if any(dest.iterdir()) and not is_own_folder(dest):
            raise UserError(
                f"{dest} holds files envbuild did not write there; it is not replaced",
                hint="give a new or empty folder, or a path ending in .tar",
                fields={"context": str(dest)},
            )
    replace_folder(dest, files)
    return ""

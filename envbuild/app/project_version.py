"""The version of a project whose build reads it from git (setuptools-scm, hatch-vcs), worked out
on the host where `envbuild image` and `envbuild render` run. The build context leaves `.git`
out (its history and credentials stay out of the image), so inside the build setuptools-scm has
nothing to read and stops: "setuptools-scm was unable to detect version for /app ... a git
checkout without the .git folder ... will not work" (tests/fixtures/projects/scm-version).

The version is setuptools-scm's own answer, `python -m setuptools_scm` in the project's folder
with the release the lock pins, run by uv (its version scheme and the project's
[tool.setuptools_scm] settings are setuptools-scm's, not re-implemented here);
SETUPTOOLS_SCM_PRETEND_VERSION set where envbuild runs wins, as it does in setuptools-scm.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from envbuild.core.errors import PinError, UserError
from envbuild.core.models import Lock
from envbuild.lock import pins
from envbuild.lock.uvenv import find_uv, isolated_env
from envbuild.request import sourcetree
from envbuild.request.project import (
    VERSION_ARG,
    ProjectVersion,
    checked_version,
    scm_commands,
    vcs_backend,
)

SCM = "setuptools-scm"


def project_version(
    lock: Lock, image_dir: Path, environ: Mapping[str, str], run: pins.Runner = pins.run_subprocess
) -> ProjectVersion | None:
    """The version the project's install step is given, or None when its build does not read
    one from git. UserError (exit 2) with the way out when it cannot be worked out. `run`:
    how uv runs (SIGTERM held while it starts; tests put a recorded answer in its place)."""
    pyproject = sourcetree.project_pyproject(lock.project, image_dir)
    backend = vcs_backend(pyproject)
    if not backend or lock.project is None:
        return None
    given = environ.get(VERSION_ARG, "")
    if given:
        return ProjectVersion(checked_version(given, VERSION_ARG), f"{VERSION_ARG} as set here")
    commands = scm_commands(pyproject)
    if commands:
        raise UserError(
            f"the project's version comes from git ({backend}), and its [tool.setuptools_scm] "
            f"sets {', '.join(commands)}: a command envbuild does not run on this machine",
            hint=f"set {VERSION_ARG} to the project's version (a PEP 440 one, say 1.2.3) "
            "where envbuild runs",
            fields={"keys": commands},
        )
    folder = sourcetree.project_folder(lock.project, image_dir)
    pin = next((p for p in lock.packages if p.name == SCM), None)
    release = f"{SCM} {pin.version}" if pin is not None else SCM
    index = pin.source if pin is not None else "PyPI"
    way_out = (
        f"run envbuild from a git checkout of the project (git on PATH), or set {VERSION_ARG} "
        f"to its version (uv fetches {SCM} from {index} for this the first time: offline, set "
        "the variable)"
    )
    uv = find_uv(environ, sys.executable)
    if uv is None:
        raise UserError(
            f"the project's version comes from git ({backend}) and uv, which runs {SCM} "
            "here, is not installed",
            hint=f"install uv (pip install uv), or set {VERSION_ARG} to the project's version",
        )
    argv = [uv, "run", "--no-project", "--no-config", "--python", sys.executable]
    argv += ["--with", f"{SCM}=={pin.version}" if pin is not None else SCM]
    if pin is not None and pin.source.startswith(("https://", "http://")):
        argv += ["--default-index", pin.source]
    argv += ["--", "python", "-m", "setuptools_scm"]
    try:
        done = run(argv, folder, isolated_env(environ))
        code, out, err = done.returncode, done.stdout, done.stderr
    except PinError as exc:  # uv could not be started, or answered in bytes
        code, out, err = -1, "", exc.message
    lines = out.strip().splitlines()
    if code != 0 or not lines:
        tail = " | ".join(err.strip().splitlines()[-3:]) or f"exit {code}"
        raise UserError(
            f"the project's version comes from git ({backend}) and {release} could not read "
            f"it in {folder}: {tail}",
            hint=way_out,
            fields={"backend": backend, "folder": str(folder)},
        )
    return ProjectVersion(checked_version(lines[-1].strip(), release), release)

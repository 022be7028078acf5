"""A project's files on disk: which folder a request may point at, and which of its files go
into the build context (thin I/O).

Paths in a request are relative to the image folder and must stay inside the repository
that holds it (the nearest folder with a `.git` above the image folder; without one, the
image folder itself), so a request cannot copy `~/.ssh` or `/etc` into an image.

The ignore rules are `.dockerignore` rules (https://docs.docker.com/build/concepts/context/
#dockerignore-files): relative to the project folder, a pattern without `**/` matches at its
top only, `!` re-includes, the last matching rule wins, and a matched folder takes everything
under it. envbuild applies them itself (the context is assembled in memory) through pathspec's
gitignore matcher with every pattern anchored at the top, which is what Docker's rules mean,
and writes them into the context as `.dockerignore` (prefixed with the context folder) so a
`docker build` of a rendered context sees the same files.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envbuild.core.errors import RequestError, UserError
from envbuild.core.fsio import read_input
from envbuild.core.models import ProjectSettings

CONTEXT_DIR = "project"
"""Where the project's files are in the build context (`COPY project/ ...`)."""
DEFAULT_IGNORE: tuple[str, ...] = (
    # version control, virtualenvs, caches and build output
    ".git",
    "**/.git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "**/.venv",
    "**/__pycache__",
    "**/*.py[cod]",
    "**/.mypy_cache",
    "**/.pytest_cache",
    "**/.ruff_cache",
    "**/.ipynb_checkpoints",
    "**/.tox",
    "**/.nox",
    "**/node_modules",
    "**/*.egg-info",
    "build",
    "dist",
    # secrets a repository often holds next to the code
    "**/.env",
    # data, checkpoints and run logs belong in volumes, not in an image
    "data",
    "datasets",
    "checkpoints",
    "outputs",
    "runs",
    "wandb",
    "mlruns",
    "lightning_logs",
    "**/*.ckpt",
    "**/*.pt",
    "**/*.pth",
    "**/*.safetensors",
    # envbuild's own files when the image folder is the project folder
    "envbuild.toml",
    "envbuild.lock",
    ".envbuild.lock.lock",
    "Dockerfile.j2",
    ".dockerignore",
)
MAX_BYTES = 256 * 1024 * 1024
"""The context is assembled in memory: a project larger than this almost always carries data."""


def repo_root(image_dir: Path) -> Path:
    """The nearest folder at or above `image_dir` that holds `.git`; else `image_dir`."""
    start = image_dir.resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def request_file(image_dir: Path) -> str:
    """The request a project path comes from, as messages name it."""
    return str(image_dir / "envbuild.toml")


def inside_repo(image_dir: Path, relative: str, *, what: str, where: str = "") -> Path:
    """`image_dir / relative`, resolved, refused (RequestError) when it leaves the repository
    or cannot be looked at. `where` starts the message (the request file, when the path is a
    request key)."""
    start = f"{where}: " if where else ""
    root = repo_root(image_dir)
    try:
        target = (image_dir / relative).resolve()
        target.stat()
    except FileNotFoundError:
        pass  # the caller says what is missing
    except OSError as exc:
        raise RequestError(
            f"{start}{what} {relative[:200]!r} cannot be read ({exc.strerror})",
            hint="name an existing path relative to the image folder",
            fields={"path": relative[:200]},
        ) from None
    if target != root and root not in target.parents:
        raise _outside(f"{start}{what} {relative!r} is {target}", root, relative)
    return target


def _outside(said: str, root: Path, relative: str) -> RequestError:
    """The refusal of a path outside `root`, saying why `root` is the boundary."""
    if (root / ".git").exists():
        return RequestError(
            f"{said}, outside the repository {root}",
            hint="keep the project inside the repository that holds the image folder (paths "
            "are relative to the image folder)",
            fields={"path": relative, "repository": str(root)},
        )
    return RequestError(
        f"{said}, outside the image folder {root}: no .git was found at or above it, so the "
        "image folder itself is the boundary of what may be copied",
        hint='put envbuild.toml at or above the project\'s root (path = "." or a subfolder), '
        "or make the folder that holds both a git repository (git init)",
        fields={"path": relative, "repository": str(root)},
    )


def file_sha256(path: Path, what: str = "project file") -> str:
    return "sha256:" + hashlib.sha256(read_input(path, what=what)).hexdigest()


def ignore_rules(user_rules: Sequence[str], own_file: str | None = None) -> tuple[str, ...]:
    """envbuild's rules, then the project's own `.dockerignore` lines, then `[project] ignore`
    (later rules win, so a user's `!data/vocab.txt` re-includes a file)."""
    rules = list(DEFAULT_IGNORE)
    if own_file is not None:
        for line in own_file.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                rules.append(line)
    rules += list(user_rules)
    return tuple(rules)


def _anchored(rule: str) -> str:
    """A `.dockerignore` rule as a gitignore rule with the same meaning: anchored at the top."""
    negate = rule.startswith("!")
    body = rule[1:] if negate else rule
    body = body.strip().lstrip("/").rstrip("/")
    while body.startswith("./"):
        body = body[2:]
    return ("!" if negate else "") + "/" + body


def dockerignore_text(rules: Sequence[str], prefix: str = CONTEXT_DIR) -> str:
    """The `.dockerignore` of a build context whose project files are under `prefix/`."""
    lines = [
        "# Generated by envbuild: the project's files are under "
        f"{prefix}/ (envbuild's rules, the project's .dockerignore, [project] ignore)."
    ]
    for rule in rules:
        negate = rule.startswith("!")
        body = _anchored(rule).lstrip("!").lstrip("/")
        lines.append(("!" if negate else "") + f"{prefix}/{body}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class SourceFiles:
    files: dict[str, bytes]
    """Path relative to the project folder (POSIX) -> bytes, sorted."""
    rules: tuple[str, ...]


def collect(folder: Path, user_rules: Sequence[str]) -> SourceFiles:
    """The project's files that the rules keep. Symlinks to files inside the folder are taken
    as files; any other symlink is refused (it could reach outside the repository)."""
    import pathspec

    own = folder / ".dockerignore"
    own_text = (
        read_input(own, what=".dockerignore").decode("utf-8", "replace") if own.is_file() else None
    )
    rules = ignore_rules(user_rules, own_text)
    spec = pathspec.GitIgnoreSpec.from_lines([_anchored(r) for r in rules])
    # A folder that is ignored is skipped whole unless a `!` rule could re-include under it.
    prune = not any(r.startswith("!") for r in rules)
    root = folder.resolve()
    kept: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        keep_dirs = []
        for name in sorted(dirnames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if (here / name).is_symlink():
                if not spec.match_file(rel):
                    _refuse_link(here / name, rel, root)
                continue
            if prune and spec.match_file(rel + "/"):
                continue
            keep_dirs.append(name)
        dirnames[:] = keep_dirs
        for name in sorted(filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if spec.match_file(rel):
                continue
            path = here / name
            if path.is_symlink():
                path = _refuse_link(path, rel, root)
            if path.is_file():  # sockets, FIFOs: nothing to copy
                kept[rel] = path
    sizes = {rel: path.stat().st_size for rel, path in kept.items()}
    if sum(sizes.values()) > MAX_BYTES:  # before reading any of it
        _too_large(sizes)
    out = {
        rel: read_input(path, what="project file", limit=MAX_BYTES) for rel, path in kept.items()
    }
    if not out:
        raise UserError(
            f"the project folder {folder} has no files left after the ignore rules",
            hint="check [project] path and [project] ignore (and the folder's .dockerignore)",
            fields={"path": str(folder)},
        )
    return SourceFiles(files=dict(sorted(out.items())), rules=rules)


def _refuse_link(link: Path, rel: str, root: Path) -> Path:
    """The file a symlink names, when it is a file inside the project folder."""
    target = link.resolve()
    if target.is_file() and root in target.parents:
        return target
    raise UserError(
        f"the project file {rel} is a symlink to {target}, outside the project folder or "
        "not a file",
        hint="copy what it points at into the project, or add it to [project] ignore",
        fields={"path": rel, "target": str(target)},
    )


def _too_large(sizes: dict[str, int]) -> None:
    biggest = sorted(sizes, key=lambda k: -sizes[k])[:3]
    names = ", ".join(f"{k} ({sizes[k] / 1e6:.0f} MB)" for k in biggest)
    total = sum(sizes.values())
    raise UserError(
        f"the project's files come to {total / 1e6:.0f} MB (at most {MAX_BYTES // 2**20} MiB "
        f"go into an image); the largest: {names}",
        hint="add data, checkpoints and other large files to [project] ignore (or the "
        "folder's .dockerignore); mount them at run time instead",
        fields={"bytes": total, "largest": biggest},
    )


def context_files(project: ProjectSettings | None, image_dir: Path) -> dict[str, bytes]:
    """The project's files under `project/` in a build context, and its `.dockerignore`
    (nothing without a project)."""
    if project is None:
        return {}
    where = request_file(image_dir)
    folder = inside_repo(image_dir, project.path, what="[project] path", where=where)
    if not folder.is_dir():
        raise RequestError(
            f"{where}: [project] path {project.path!r} ({folder}) is not a folder",
            hint="name the folder that holds the project's code, relative to the image folder",
            fields={"path": project.path},
        )
    source = collect(folder, project.ignore)
    files = {f"{CONTEXT_DIR}/{rel}": data for rel, data in source.files.items()}
    files[".dockerignore"] = dockerignore_text(source.rules).encode("utf-8")
    return files

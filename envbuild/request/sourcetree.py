"""A project's files on disk: which folder a request may point at, and which of its files go
into the build context (thin I/O).

Paths in a request are relative to the image folder and must stay inside the repository
that holds it (the nearest folder with a `.git` above the image folder; without one, the
image folder itself), so a request cannot copy `~/.ssh` or `/etc` into an image.

What goes into /app is what the project holds. The rules come in layers, the last one that
matches a path deciding, `!` re-including: envbuild's defaults (only what is never code:
version control, virtualenvs, caches, build output, checkpoint and data files by extension),
the project's own `.gitignore` files (git's rules, https://git-scm.com/docs/gitignore:
relative to the folder that holds each one, a pattern without a slash matches at any depth),
its `.dockerignore` (Docker's rules, https://docs.docker.com/build/concepts/context/
#dockerignore-files: relative to the project folder, matched at its top only unless they start
with `**/`), SECRETS (credential files by name, `.git`; a private key block by content; a link
by its target), `[project] ignore` (Docker's rules: the only layer that may name a secret),
and last the image folder's own files (envbuild.toml, its lock, its Dockerfile.j2), which
never go in. A project folder that is a home folder, or holds one, is refused. A file over MAX_FILE_BYTES is data however it
is named, unless a `!` rule of the `.dockerignore` or `[project] ignore` names it. pathspec's
gitignore matcher applies every layer (Docker's rules anchored at the top, which is what they
mean). What was left out is reported (`render`, `lock`) and written into the context as its
`.dockerignore`, prefixed with the context folder.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from envbuild.core.documents import toml_loads
from envbuild.core.errors import RequestError, UserError
from envbuild.core.fsio import CONTEXT_MARKER, read_input
from envbuild.core.models import ProjectSettings
from envbuild.request.project import PROJECT_DIR

CONTEXT_DIR = "project"
"""Where the project's files are in the build context (`COPY project/ ...`)."""
DEFAULT_IGNORE: tuple[str, ...] = (
    # version control (git's folder: SECRETS), virtualenvs, caches and build output
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
    # run logs that tools write (never the project's code): they belong in volumes
    "wandb",
    "mlruns",
    "lightning_logs",
    # checkpoints, weights and data by their format, wherever they are: volumes, not an image
    "**/*.ckpt",
    "**/*.pt",
    "**/*.pth",
    "**/*.safetensors",
    "**/*.bin",
    "**/*.npy",
    "**/*.npz",
    "**/*.parquet",
    "**/*.arrow",
    "**/*.feather",
    "**/*.h5",
    "**/*.hdf5",
    "**/*.tfrecord",
    "**/*.onnx",
    # the project's own ignore file: read, not copied
    ".dockerignore",
)
SECRETS: tuple[str, ...] = (
    # version control: its history holds what was ever committed, and its config remotes
    "**/.git",
    # environment files and the credential files of the tools a repository is used with
    "**/.env",
    "**/.env.*",
    "**/.envrc",
    "**/.netrc",
    "**/.pypirc",
    "**/.git-credentials",
    "**/.npmrc",
    "**/.ssh",
    "**/.aws",
    "**/.docker/config.json",
    "**/.kube/config",
    "**/*.key",
)
"""What never goes into /app by its name (Docker's syntax): decided after the checkout's own
`.gitignore` and `.dockerignore` files, so a `!` of theirs cannot bring one back; only the
request's `[project] ignore` can (the user naming the file). A file holding a private key
block is a secret by its content (`holds_private_key`), whatever its name."""
SECRET_WHY = "a secret"
CONTEXT_WHY = "envbuild's build context, not the project's code"
PROJECT_IGNORE = "[project] ignore"
_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")
"""The armour line of a private key (RFC 7468 section 10, OpenSSH's and PGP's own)."""
OWN_FILES: tuple[str, ...] = (
    "envbuild.toml",
    "envbuild.lock",
    ".envbuild.lock.lock",
    "Dockerfile.j2",
)
"""The image folder's files: when the image folder is in the project, they stay out of /app."""
MAX_FILE_BYTES = 10 * 2**20
"""A file larger than this is data (a dataset shard, a tokenizer blob), not code."""
MAX_BYTES = 256 * 1024 * 1024
"""The context is assembled in memory: a project larger than this almost always carries data."""
OVER_SIZE = f"over {MAX_FILE_BYTES // 2**20} MiB"


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


def _anchored(rule: str) -> str:
    """A `.dockerignore` rule as a gitignore rule with the same meaning: anchored at the top."""
    negate = rule.startswith("!")
    body = rule[1:] if negate else rule
    body = body.strip().lstrip("/").rstrip("/")
    while body.startswith("./"):
        body = body[2:]
    return ("!" if negate else "") + "/" + body


def _rule_lines(text: str) -> list[str]:
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


@dataclass(frozen=True)
class _Layer:
    """One file of rules (or envbuild's defaults), matched against paths under `base`."""

    source: str
    """Where the rules come from, as the report names it (".gitignore", "[project] ignore")."""
    base: str
    """The folder the patterns are relative to ("" = the project folder)."""
    spec: Any
    """A pathspec.GitIgnoreSpec."""
    explicit: bool = False
    """A `!` rule here is the user naming a file: it re-includes one over MAX_FILE_BYTES."""

    def check(self, rel: str, is_dir: bool) -> tuple[bool, str] | None:
        """(ignored, the pattern that decided) or None when no pattern matches."""
        if self.base:
            if not rel.startswith(self.base + "/"):
                return None
            rel = rel[len(self.base) + 1 :]
        found = self.spec.check_file(rel + "/" if is_dir else rel)
        if found.include is None:
            return None
        return bool(found.include), str(self.spec.patterns[found.index].pattern).lstrip("/")

    def negations(self) -> list[str]:
        """The `!` rules' paths, as written after the `!` (and the anchoring `/`)."""
        return [
            str(p.pattern).lstrip("!").lstrip("/") for p in self.spec.patterns if p.include is False
        ]


def _reaches(rule: str, folder: str) -> bool:
    """Whether a Docker `!` rule could re-include something under `folder` (both relative to
    the project folder): its leading components match the folder's, or it starts with `**`."""
    parts, names = rule.split("/"), folder.split("/")
    for i, name in enumerate(names):
        if i >= len(parts):
            return False
        if parts[i] == "**":
            return True
        if not fnmatch.fnmatchcase(name, parts[i]):
            return False
    return len(parts) > len(names)


def _docker_spec(source: str, rules: Sequence[str]) -> Any:
    """The rules as one matcher; a rule Docker cannot match either (`[z-a]`, a trailing `\\`)
    is refused naming its source, as `docker build` would refuse the context."""
    import pathspec

    for rule in rules:
        try:
            pathspec.GitIgnoreSpec.from_lines([_anchored(rule)])
        except Exception:  # pathspec's GitIgnorePatternError, re.error for a bad range
            raise RequestError(
                f"{source}: the rule {rule[:200]!r} is not a valid pattern",
                hint="fix or remove it (Docker's .dockerignore syntax: * ? [a-z] ** and a "
                "leading !)",
                fields={"source": source, "rule": rule[:200]},
            ) from None
    return pathspec.GitIgnoreSpec.from_lines([_anchored(r) for r in rules])


def _docker_layer(source: str, rules: Sequence[str], *, explicit: bool = False) -> _Layer:
    return _Layer(source=source, base="", spec=_docker_spec(source, rules), explicit=explicit)


def _git_lines(lines: Sequence[str]) -> list[str]:
    """The lines of a `.gitignore` that are patterns: git skips a line it cannot match (a lone
    `!`, a trailing `\\`, a range such as `[z-a]`) and so does this, where pathspec would raise."""
    import pathspec

    kept = []
    for line in lines:
        try:
            pathspec.GitIgnoreSpec.from_lines([line])
        except Exception:  # pathspec's GitIgnorePatternError, re.error for a bad range
            continue
        kept.append(line)
    return kept


def _git_layer(path: Path, base: str) -> _Layer:
    import pathspec

    text = read_input(path, what=".gitignore").decode("utf-8", "replace")
    source = f"{base}/.gitignore" if base else ".gitignore"
    spec = pathspec.GitIgnoreSpec.from_lines(_git_lines(text.splitlines()))
    return _Layer(source=source, base=base, spec=spec)


def _own_files(root: Path, image_dir: Path | None) -> list[str]:
    """The image folder's files, relative to the project folder (none when it is elsewhere)."""
    folder = root if image_dir is None else image_dir.resolve()
    if folder != root and root not in folder.parents:
        return []
    rel = folder.relative_to(root).as_posix()
    return [name if rel == "." else f"{rel}/{name}" for name in OWN_FILES]


def ignore_rules(user_rules: Sequence[str], own_file: str | None = None) -> tuple[str, ...]:
    """The Docker-syntax rules, in order: envbuild's, the project's own `.dockerignore` lines,
    SECRETS, then `[project] ignore` (later rules win, so a user's `!data/vocab.txt`
    re-includes a file). The `.gitignore` files are layers of their own (`survey`)."""
    own = _rule_lines(own_file) if own_file is not None else []
    return (*DEFAULT_IGNORE, *own, *SECRETS, *user_rules)


@dataclass(frozen=True)
class LeftOut:
    """A file or folder of the project that is not copied, and why."""

    path: str
    """Relative to the project folder (POSIX); a folder ends with "/"."""
    why: str
    """OVER_SIZE, or where the rule that left it out comes from and the rule."""
    size: int | None = None
    """Its size in bytes; None for a folder (not walked)."""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "why": self.why, "bytes": self.size}


@dataclass(frozen=True)
class Survey:
    """What the rules keep of a project folder (not read yet) and what they leave out."""

    kept: dict[str, Path]
    """Path relative to the project folder (POSIX) -> the file, sorted."""
    left_out: tuple[LeftOut, ...]
    rules: tuple[str, ...]
    """The Docker-syntax rules (envbuild's, the `.dockerignore`'s, `[project] ignore`)."""

    def summary(self) -> str:
        """One line: "left out of /app: 3 files, 212 MiB (data/*.bin; ...)"; "" for none."""
        return left_out_line(self.left_out)


def survey(
    folder: Path,
    user_rules: Sequence[str],
    *,
    image_dir: Path | None = None,
    exclude: Path | None = None,
) -> Survey:
    """Walk the project folder once and decide every path (the ignore files are read, and each
    kept file is scanned for a private key block). A symlink is judged by its target: one to a
    secret inside the folder is a secret; one to a file inside the folder is taken as that
    file; any other symlink is refused (it could reach outside the repository).
    `exclude`: the build context being written (`render --context` inside the project), left
    out like any folder holding an earlier context (CONTEXT_MARKER): a context never nests."""
    root = folder.resolve()
    own = root / ".dockerignore"
    own_text = (
        read_input(own, what=".dockerignore").decode("utf-8", "replace") if own.is_file() else None
    )
    rules = ignore_rules(user_rules, own_text)
    first = _docker_layer("envbuild's defaults", DEFAULT_IGNORE)
    last = [
        _docker_layer(".dockerignore", _rule_lines(own_text or ""), explicit=True),
        _docker_layer(SECRET_WHY, SECRETS),
        _docker_layer(PROJECT_IGNORE, user_rules, explicit=True),
        _docker_layer("the image folder's own files", _own_files(root, image_dir)),
    ]
    # An ignored folder is skipped whole unless a Docker `!` rule could re-include under it
    # (git's rules cannot re-include a file whose folder is ignored).
    negations = [rule for layer in last for rule in layer.negations()]
    walk = _Walk(root=root, layers=[first], last=last, negations=negations)
    walk.exclude = exclude.resolve() if exclude is not None else None
    for dirpath, dirnames, filenames in os.walk(root):
        walk.folder(Path(dirpath), dirnames, filenames)
    return Survey(
        kept=dict(sorted(walk.kept.items())),
        left_out=tuple(sorted(walk.left, key=lambda e: e.path)),
        rules=rules,
    )


@dataclass
class _Walk:
    root: Path
    layers: list[_Layer]
    """envbuild's defaults, then the `.gitignore` files met so far (parents first)."""
    last: list[_Layer]
    negations: list[str]
    kept: dict[str, Path] = field(default_factory=dict)
    left: list[LeftOut] = field(default_factory=list)
    exclude: Path | None = None
    """The build context being written, when it is inside the project."""

    def decide(self, rel: str, is_dir: bool) -> tuple[bool, _Layer | None, str]:
        """(ignored, the layer that decided, its pattern): the last layer that matches wins."""
        out: tuple[bool, _Layer | None, str] = (False, None, "")
        for layer in (*self.layers, *self.last):
            found = layer.check(rel, is_dir)
            if found is not None:
                out = (found[0], layer, found[1])
        return out

    def folder(self, here: Path, dirnames: list[str], filenames: list[str]) -> None:
        rel_dir = here.relative_to(self.root).as_posix()
        base = "" if rel_dir == "." else rel_dir
        gitignore = here / ".gitignore"
        if ".gitignore" in filenames and gitignore.is_file() and not gitignore.is_symlink():
            self.layers.append(_git_layer(gitignore, base))
        keep_dirs = []
        for name in sorted(dirnames):
            rel = f"{base}/{name}" if base else name
            if self.is_context(here / name):
                self.left.append(LeftOut(rel + "/", CONTEXT_WHY))
                continue
            ignored, layer, pattern = self.decide(rel, is_dir=True)
            if (here / name).is_symlink():
                if ignored:
                    self.left.append(LeftOut(rel, _why(layer, pattern), 0))
                    continue
                secret = "" if self.trusted(layer) else self.link_secret(here / name)
                if not secret:
                    _refuse_link(here / name, rel, self.root)  # a link to a folder: refused
                self.left.append(LeftOut(rel, secret, 0))
                continue
            if ignored and not any(_reaches(rule, rel) for rule in self.negations):
                self.left.append(LeftOut(rel + "/", _why(layer, pattern)))
                continue
            keep_dirs.append(name)
        dirnames[:] = keep_dirs
        for name in sorted(filenames):
            self.file(here / name, f"{base}/{name}" if base else name)

    def is_context(self, path: Path) -> bool:
        """A build context envbuild writes or wrote: never the project's code."""
        if self.exclude is not None and path.absolute() == self.exclude:
            return True
        marker = path / CONTEXT_MARKER
        return not path.is_symlink() and marker.is_file() and not marker.is_symlink()

    def file(self, path: Path, rel: str) -> None:
        if self.exclude is not None and path.absolute() == self.exclude:
            self.left.append(LeftOut(rel, CONTEXT_WHY, _size(path)))
            return
        ignored, layer, pattern = self.decide(rel, is_dir=False)
        if ignored:
            self.left.append(LeftOut(rel, _why(layer, pattern), _size(path)))
            return
        trusted = self.trusted(layer)
        if path.is_symlink():
            secret = "" if trusted else self.link_secret(path)
            if secret:
                self.left.append(LeftOut(rel, secret, _size(path)))
                return
            path = _refuse_link(path, rel, self.root)
        if not path.is_file():  # sockets, FIFOs: nothing to copy
            return
        size = path.stat().st_size
        named = layer is not None and layer.explicit  # a `!` rule of the user's names it
        if size > MAX_FILE_BYTES and not named:
            self.left.append(LeftOut(rel, OVER_SIZE, size))
            return
        if not trusted and holds_private_key(path):
            self.left.append(LeftOut(rel, f"{SECRET_WHY}: a private key block", size))
            return
        self.kept[rel] = path

    @staticmethod
    def trusted(layer: _Layer | None) -> bool:
        """Whether the request's own `[project] ignore` decided: only it may name a secret."""
        return layer is not None and layer.source == PROJECT_IGNORE

    def link_secret(self, link: Path) -> str:
        """Why a symlink is a secret, judged by its target inside the project folder ("" when
        it is not one, or points elsewhere: `_refuse_link` decides those)."""
        try:
            target = link.resolve()
        except (RuntimeError, OSError):  # a loop: `_refuse_link` refuses it with its words
            return ""
        if root_holds(self.root, target) and target != self.root:
            rel = target.relative_to(self.root).as_posix()
            secrets = next(layer for layer in self.last if layer.source == SECRET_WHY)
            found = secrets.check(rel, target.is_dir())
            if found is not None and found[0]:
                return f"{SECRET_WHY}: a link to {rel} ({found[1]})"
            if target.is_file() and holds_private_key(target):
                return f"{SECRET_WHY}: a link to {rel}, a private key block"
        return ""


def root_holds(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def holds_private_key(path: Path) -> bool:
    """Whether the file holds a private key block (PEM, OpenSSH, PGP armour), however it is
    named: a key pasted into notes.txt is as secret as id_rsa."""
    try:
        data = read_input(path, what="project file", limit=MAX_BYTES)
    except (OSError, UserError):
        return False  # unreadable: reading it for the context says so
    return _PRIVATE_KEY.search(data) is not None


def _why(layer: _Layer | None, pattern: str) -> str:
    return f"{layer.source}: {pattern}" if layer is not None else ""


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _shape(entry: LeftOut) -> str:
    """How the one-line report groups an entry: a folder by its name, a file by its folder and
    extension (`data/*.bin`), with the size limit when that is why."""
    if entry.size is None:
        return entry.path.rstrip("/").rsplit("/", 1)[-1] + "/"
    folder, _, name = entry.path.rpartition("/")
    suffix = PurePosixPath(name).suffix
    shape = (f"{folder}/" if folder else "") + (f"*{suffix}" if suffix else name)
    return f"{shape} {OVER_SIZE}" if entry.why == OVER_SIZE else shape


_PLAIN_PATH = re.compile(r"[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*")


def keep_hint(entries: Sequence[LeftOut]) -> str:
    """How to bring back a file that the checkout's own ignore files left out (llm-foundry's
    `*.jsonl*` in .gitignore drops a tracked example dataset its config names): the request's
    `[project] ignore` re-includes it, written as the rule that does, for the first such file;
    "" when none was. Docker's rules are anchored at the top, so the path is written whole."""
    for entry in entries:
        source = entry.why.split(": ", 1)[0]
        if (
            entry.size is not None
            and source.endswith((".gitignore", ".dockerignore"))
            # Written into a TOML string and a Docker rule as it is: no quote, escape or glob.
            and _PLAIN_PATH.fullmatch(entry.path)
        ):
            kind = PurePosixPath(entry.path).suffix
            every = f' (every {kind} file: "!**/*{kind}")' if kind else ""
            return f'keep {entry.path} with [project] ignore = ["!{entry.path}"]{every}'
    return ""


def left_out_line(entries: Sequence[LeftOut], shown: int = 5) -> str:
    """ "left out of /app: 3 files, 212 MiB, 1 folder (data/*.bin over 10 MiB; .git/)"; ""
    when nothing was left out. A group of one file is named by its path."""
    if not entries:
        return ""
    groups: dict[str, list[LeftOut]] = {}
    for entry in entries:
        groups.setdefault(_shape(entry), []).append(entry)
    named = {}
    for shape, members in groups.items():
        one = members[0]
        label = shape
        if len(members) == 1 and one.size is not None:
            label = one.path + (f" {OVER_SIZE}" if one.why == OVER_SIZE else "")
        named[label] = (one.size is None, -sum(e.size or 0 for e in members))
    # Files first (largest first), then folders, each by name.
    order = sorted(named, key=lambda k: (*named[k], k))
    more = len(order) - shown
    names = "; ".join(order[:shown]) + (f"; {more} more" if more > 0 else "")
    files = [e for e in entries if e.size is not None]
    folders = len(entries) - len(files)
    counts = f"{_count(len(files), 'file')}, {_mib(sum(e.size or 0 for e in files))}"
    if folders:
        counts += f", {_count(folders, 'folder')}"
    return f"left out of {PROJECT_DIR}: {counts} ({names})"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size >= 2**20 else f"{size / 1024:.0f} KiB"


# The characters a .dockerignore pattern gives a meaning to (Go's filepath.Match, and a
# leading `#` or `!`): escaped, so each line names exactly one path.
_GLOB = re.compile(r"([\\*?\[\]])")


def dockerignore_text(entries: Sequence[LeftOut], prefix: str = CONTEXT_DIR) -> str:
    """The `.dockerignore` of a build context whose project files are under `prefix/`: what
    was left out, one path a line (a name with a line break cannot be written: skipped)."""
    lines = [
        "# Generated by envbuild: what was left out of the project's files under "
        f"{prefix}/ (envbuild's defaults, .gitignore, .dockerignore, [project] ignore, size)."
    ]
    for entry in entries:
        if "\n" in entry.path or "\r" in entry.path:
            continue
        lines.append(f"{prefix}/" + _GLOB.sub(r"\\\1", entry.path.rstrip("/")))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class SourceFiles:
    files: dict[str, bytes]
    """Path relative to the project folder (POSIX) -> bytes, sorted."""
    rules: tuple[str, ...]
    left_out: tuple[LeftOut, ...] = ()


def collect(
    folder: Path,
    user_rules: Sequence[str],
    *,
    image_dir: Path | None = None,
    exclude: Path | None = None,
) -> SourceFiles:
    """The project's files that the rules keep, read (`survey` decides which)."""
    found = survey(folder, user_rules, image_dir=image_dir, exclude=exclude)
    sizes = {rel: path.stat().st_size for rel, path in found.kept.items()}
    if sum(sizes.values()) > MAX_BYTES:  # before reading any of it
        _too_large(sizes)
    out = {
        rel: read_input(path, what="project file", limit=MAX_BYTES)
        for rel, path in found.kept.items()
    }
    if not out:
        raise UserError(
            f"the project folder {folder} has no files left after the ignore rules",
            hint="check [project] path and [project] ignore (and the folder's .gitignore and "
            ".dockerignore)",
            fields={"path": str(folder)},
        )
    return SourceFiles(files=out, rules=found.rules, left_out=found.left_out)


def top_level(folder: Path, user_rules: Sequence[str]) -> tuple[list[str], list[str]]:
    """The folder and file names at the top of the project that the rules keep (what a build
    backend sees in the image), without reading any file but the `.dockerignore`."""
    own = folder / ".dockerignore"
    own_text = (
        read_input(own, what=".dockerignore").decode("utf-8", "replace") if own.is_file() else None
    )
    spec = _docker_spec(".dockerignore or [project] ignore", ignore_rules(user_rules, own_text))
    dirs, files = [], []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and not spec.match_file(entry.name + "/"):
            dirs.append(entry.name)
        elif entry.is_file() and not spec.match_file(entry.name):
            files.append(entry.name)
    return dirs, files


def _refuse_link(link: Path, rel: str, root: Path) -> Path:
    """The file a symlink names, when it is a file inside the project folder."""
    try:
        target = link.resolve()
    except (RuntimeError, OSError):  # a loop (`a -> b -> a`, `self -> self`): pathlib raises
        raise UserError(
            f"the project file {rel} is a symlink loop",
            hint="remove the link, or add it to [project] ignore",
            fields={"path": rel},
        ) from None
    if target.is_file() and root in target.parents:
        return target
    inside = target == root or root in target.parents
    what = (
        "a folder inside the project (only links to files are followed: its files are "
        "copied from where they are)"
        if inside and target.is_dir()
        else "outside the project folder or not a file"
    )
    rule = f' ([project] ignore = ["{rel}"])' if _PLAIN_PATH.fullmatch(rel) else ""
    raise UserError(
        f"the project file {rel} is a symlink to {target}, {what}",
        hint=f"add it to [project] ignore{rule}, or copy what it points at into the project",
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


def project_folder(project: ProjectSettings, image_dir: Path) -> Path:
    """The folder of `[project] path`, inside the repository (RequestError otherwise)."""
    where = request_file(image_dir)
    folder = inside_repo(image_dir, project.path, what="[project] path", where=where)
    home = next((h for h in home_folders() if folder == h or folder in h.parents), None)
    if home is not None:
        raise RequestError(
            f"{where}: [project] path {project.path!r} is {folder}, "
            + ("a home folder" if folder == home else f"a folder holding the home folder {home}")
            + ": its dotfiles (keys, tokens, shell history) would go into the image",
            hint="point [project] path at the project's own folder inside it",
            fields={"path": project.path, "home": str(home)},
        )
    if not folder.is_dir():
        raise RequestError(
            f"{where}: [project] path {project.path!r} ({folder}) is not a folder",
            hint="name the folder that holds the project's code, relative to the image folder",
            fields={"path": project.path},
        )
    return folder


def project_pyproject(project: ProjectSettings | None, image_dir: Path) -> dict[str, Any]:
    """The pyproject.toml of an installed project, parsed ({} for none, or for one that
    cannot be read: that is the build's to report; the lock read the ones it lists)."""
    if project is None or not project.install:
        return {}
    path = project_folder(project, image_dir) / "pyproject.toml"
    try:
        return toml_loads(read_input(path, what="the project's pyproject.toml").decode("utf-8"))
    except (OSError, UserError, ValueError, UnicodeDecodeError):
        return {}


def home_folders() -> list[Path]:
    """The home folders a project must not be (this user's, by $HOME and by the password
    database, and root's); `/` as a home (some containers) is not one."""
    import pwd

    found = {os.path.expanduser("~"), "/root"}
    with contextlib.suppress(KeyError):
        found.add(pwd.getpwuid(os.getuid()).pw_dir)
    homes = set()
    for home in found:
        with contextlib.suppress(OSError):
            resolved = Path(home).resolve()
            if resolved != Path("/"):
                homes.add(resolved)
    return sorted(homes)


def project_survey(
    project: ProjectSettings | None, image_dir: Path, *, exclude: Path | None = None
) -> Survey | None:
    """What goes into /app and what is left out; None without a project. `exclude`: the
    build context being written (`survey`)."""
    if project is None:
        return None
    folder = project_folder(project, image_dir)
    return survey(folder, project.ignore, image_dir=image_dir, exclude=exclude)


def context_files(
    project: ProjectSettings | None, image_dir: Path, *, exclude: Path | None = None
) -> dict[str, bytes]:
    """The project's files under `project/` in a build context, and a `.dockerignore` that
    lists what was left out (nothing without a project). `exclude`: the context's own
    destination, when it is inside the project (`survey`)."""
    if project is None:
        return {}
    folder = project_folder(project, image_dir)
    source = collect(folder, project.ignore, image_dir=image_dir, exclude=exclude)
    files = {f"{CONTEXT_DIR}/{rel}": data for rel, data in source.files.items()}
    files[".dockerignore"] = dockerignore_text(source.left_out).encode("utf-8")
    return files

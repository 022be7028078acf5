"""The request: `images/<name>/envbuild.toml` -> `models.Request`, strictly.

Every problem is a `RequestError` (exit 2) that names the file, the key and what to write
instead; nothing here guesses. Every key is documented in docs/request.md. Parsing is pure
(`parse_request`); `load_request` only reads the bytes. Strings end up in Dockerfile text and
shell commands, so quotes, newlines and control characters are refused outright rather than
escaped (repo2docker had to escape them after the fact: jupyterhub/repo2docker#1195).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from envbuild.core.errors import EnvbuildError, RequestError, UserError
from envbuild.core.models import (
    COMPAT_POLICIES,
    CUDA_FLAVOURS,
    DEVICES,
    FLAVOURS,
    FRAMEWORK_INDEX_POLICIES,
    OS_NAME_RE,
    PLATFORM_ALIASES,
    PLATFORMS,
    PYTHON_SPEC_RE,
    FrameworkIndexPolicy,
    Indexes,
    Request,
    SmokeSettings,
    Targets,
)
from envbuild.core.values import parse_image_ref
from envbuild.core.versions import driver_problem, parse_specifier, parse_version
from envbuild.request.fields import (
    FLAGS,
    RequestOrigin,
    fail,
    read_bool,
    read_choice,
    read_int,
    read_requirement,
    read_str,
    read_str_list,
    read_url,
    type_name,
    without_credentials,
)

if TYPE_CHECKING:
    from pathlib import Path  # annotations only: `resolve` never imports pathlib

REQUEST_FILE = "envbuild.toml"

# table -> key -> expected type name (for messages) ; the order is the documented order.
SCHEMA: dict[str, dict[str, str]] = {
    "image": {
        "name": "string",
        "python": "string",
        "os": "string",
        "flavour": "string",
        "device": "string",
        "platform": "string",
        "compile_extensions": "boolean",
        "base": "string",
    },
    "framework": {"requirement": "string", "cuda": "string"},
    "packages": {
        "requirements": "array of strings",
        "files": "array of strings",
        "extras": "array of strings",
        "groups": "array of strings",
    },
    "project": {
        "path": "string",
        "install": "boolean",
        "command": "string or array of strings",
        "ignore": "array of strings",
    },
    "targets": {"gpus": "array of strings", "driver": "string", "compat": "string"},
    "indexes": {
        "index_url": "string",
        "extra_index_urls": "array of strings",
        "find_links": "array of strings",
        "framework_index": "string",
    },
    "smoke": {
        "tier": "integer",
        "timeout_s": "integer",
        "steps": "integer",
        "min_shm_mib": "integer",
        "command": "string or array of strings",
    },
}

COMPAT = COMPAT_POLICIES
# Docker repository path component rules (distribution/reference grammar), lower case.
_NAME_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
_NAME_MAX = 128  # render's limit for the image name (a Docker repository path component)
# PEP 508 name, optional [extras], optional version specifier; no URL, no marker. Parsed here
# rather than with packaging.requirements, whose import (markers, tags) alone costs ~25 ms.
_FRAMEWORK_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?:\[(?P<extras>[^\]]*)\])?\s*(?P<spec>[^;@]*?)\s*$"
)


def parse_request(
    data: bytes,
    *,
    path: str,
    default_name: str = "",
    installable: Callable[[str], bool] | None = None,
) -> Request:
    """Parse the bytes of an `envbuild.toml` strictly (pure; `installable`: see
    `envbuild.request.project.project_table`)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise RequestError(
            f"{path}: line {line}, byte {exc.start} is not UTF-8 "
            f"({data[exc.start : exc.start + 1]!r})",
            hint="save the file as UTF-8 (TOML files must be UTF-8)",
            fields={"file": path},
        ) from None
    text = text.removeprefix("\ufeff")
    doc = _parse_toml(text, path=path)
    return request_from_mapping(doc, path=path, default_name=default_name, installable=installable)


def toml_loads(text: str) -> dict[str, Any]:
    """Parse TOML for reading only (`envbuild.core.documents.toml_loads`: tomllib, a nesting limit).
    Raises ValueError on bad or too deeply nested TOML."""
    from envbuild.core.documents import toml_loads as loads

    return loads(text)


def _close_matches(word: str, choices: Any, n: int = 1) -> list[str]:
    import difflib  # only for a typo: `resolve` and `lock` start without it

    return difflib.get_close_matches(word, choices, n=n)


def _parse_toml(text: str, *, path: str) -> dict[str, Any]:
    try:
        return toml_loads(text)
    except Exception as exc:  # ValueError (tomllib.TOMLDecodeError) and odd inputs (e.g. NUL)
        raise RequestError(
            f"{path}: not valid TOML: {exc}",
            hint="fix the line it names; see envbuild's docs/request.md for the format",
            fields={"file": path},
        ) from None


def request_from_mapping(
    doc: Mapping[str, Any],
    *,
    path: str,
    default_name: str = "",
    installable: Callable[[str], bool] | None = None,
) -> Request:
    """Validate a parsed request table (pure): the TOML shape and types here, then the rules
    every request obeys (`check_request`, shared with `resolve`'s flags)."""
    from envbuild.request import project  # its key parsers use this module's helpers

    _check_tables(doc, path)
    framework, cuda = _framework_table(doc.get("framework", {}), path)
    request = Request(
        framework=framework,
        cuda=cuda,
        packages=_packages_table(doc.get("packages", {}), path, framework),
        dependency_files=project.dependency_files(doc.get("packages", {}), path),
        project=project.project_table(doc.get("project"), path, installable),
        indexes=_indexes_table(doc.get("indexes", {}), path),
        smoke=_smoke_table(doc.get("smoke", {}), path),
        **_image_table(doc.get("image", {}), path, default_name),
        **_targets_table(doc.get("targets", {}), path),
    )
    return check_request(request, RequestOrigin(path))


def _check_tables(doc: Mapping[str, Any], path: str) -> None:
    """Only the tables and keys of SCHEMA, each table a table."""
    for table, body in doc.items():
        if table not in SCHEMA:
            close = _close_matches(table, SCHEMA, n=1)
            maybe = f"did you mean [{close[0]}]? " if close else ""
            raise RequestError(
                f"{path}: unknown table or key {table!r} at the top level",
                hint=f"{maybe}known tables: {', '.join('[' + t + ']' for t in SCHEMA)}",
                fields={"file": path, "table": table},
            )
        if not isinstance(body, dict):
            raise RequestError(
                f"{path}: {table!r} must be a table, got {type_name(body)}",
                hint=f"write [{table}] on its own line and its keys below it",
                fields={"file": path, "table": table},
            )
        for key in body:
            if key not in SCHEMA[table]:
                close = _close_matches(key, SCHEMA[table], n=1)
                maybe = f"did you mean {close[0]!r}? " if close else ""
                raise fail(
                    path,
                    table,
                    key,
                    "unknown key",
                    f"{maybe}keys of [{table}]: {', '.join(SCHEMA[table])}",
                )


def _image_table(image: Mapping[str, Any], path: str, default_name: str) -> dict[str, Any]:
    """[image] as Request keyword arguments (types and the image name; the rest: check_request)."""
    name = read_str(path, "image", "name", image["name"]) if "name" in image else default_name
    if not _NAME_RE.match(name) or len(name) > _NAME_MAX:
        raise fail(
            path,
            "image",
            "name",
            f"{name!r} is not a valid image name"
            + (f" (longer than {_NAME_MAX} characters)" if len(name) > _NAME_MAX else ""),
            'write lower-case letters, digits and single ".", "_" or "-" between them, '
            'for example name = "torch-train"',
        )

    def text(key: str, default: str | None) -> str | None:
        return read_str(path, "image", key, image[key]) if key in image else default

    return {
        "name": name,
        "python": text("python", None),
        "os": text("os", None),
        "flavour": text("flavour", "auto"),
        "device": text("device", "cuda"),
        "platform": text("platform", "x86_64"),
        "compile_extensions": read_bool(
            path, "image", "compile_extensions", image.get("compile_extensions", False)
        ),
        "base": _base_ref(path, text("base", None)),
    }


def _base_ref(path: str, ref: str | None) -> str | None:
    """[image] base: an image reference the engine can pull or has (the grammar render and
    `image --tag` use too: `envbuild.core.values`)."""
    if ref is not None and parse_image_ref(ref) is None:
        raise fail(
            path,
            "image",
            "base",
            f"{ref!r} is not an image reference",
            'write a reference like "nvcr.io/nvidia/pytorch:25.01-py3" or "team/torch-base:1"',
        )
    return ref


def _framework_table(fw: Mapping[str, Any], path: str) -> tuple[str, str | None]:
    """[framework]: (requirement, cuda range or None)."""
    if "requirement" not in fw:
        raise fail(
            path,
            "framework",
            "requirement",
            "is missing",
            'add [framework] requirement = "torch" (or "jax", "tensorflow", with a range)',
        )
    fw_text = read_str(path, "framework", "requirement", fw["requirement"])
    if read_requirement(path, "framework", "requirement", fw_text).url is not None:
        raise fail(
            path,
            "framework",
            "requirement",
            "a direct URL cannot be resolved against the matrix",
            'write a name and a range, for example "torch>=2.7,<2.11"',
        )
    cuda = read_str(path, "framework", "cuda", fw["cuda"]) if "cuda" in fw else None
    return fw_text, cuda


def _packages_table(pk: Mapping[str, Any], path: str, framework: str) -> tuple[str, ...]:
    """[packages] requirements: valid, not the framework, one line per package."""
    if "requirements" not in pk:
        return ()
    # packaging.utils imports packaging.tags (logging, sysconfig): only files need it.
    from packaging.utils import canonicalize_name

    packages = read_str_list(path, "packages", "requirements", pk["requirements"])
    seen: dict[str, str] = {}
    fw_name = canonicalize_name(read_requirement(path, "framework", "requirement", framework).name)
    for item in packages:
        norm = canonicalize_name(read_requirement(path, "packages", "requirements", item).name)
        if norm == fw_name:
            raise fail(
                path,
                "packages",
                "requirements",
                f"{item!r} names the framework",
                "put the framework's range in [framework] requirement only",
            )
        if norm in seen:
            raise fail(
                path,
                "packages",
                "requirements",
                f"{item!r} and {seen[norm]!r} name the same package",
                "merge them into one requirement",
            )
        seen[norm] = item
    return packages


def _targets_table(tg: Mapping[str, Any], path: str) -> dict[str, Any]:
    """[targets] as Request keyword arguments: targets and compat."""
    gpus = read_str_list(path, "targets", "gpus", tg["gpus"]) if "gpus" in tg else ()
    driver = read_str(path, "targets", "driver", tg["driver"]) if "driver" in tg else None
    compat = read_str(path, "targets", "compat", tg["compat"]) if "compat" in tg else "minor"
    return {"targets": Targets(gpus=gpus, driver=driver), "compat": compat}


def _indexes_table(ix: Mapping[str, Any], path: str) -> Indexes:
    """[indexes]: index URLs must be URLs; find_links may also be folders."""

    def urls(key: str, *, paths_ok: bool) -> tuple[str, ...]:
        values = read_str_list(path, "indexes", key, ix[key]) if key in ix else ()
        return tuple(read_url(path, "indexes", key, u, paths_ok=paths_ok) for u in values)

    index_url = None
    if "index_url" in ix:
        text = read_str(path, "indexes", "index_url", ix["index_url"])
        index_url = read_url(path, "indexes", "index_url", text, paths_ok=False)
    extra = urls("extra_index_urls", paths_ok=False)
    find_links = urls("find_links", paths_ok=True)
    policy = "auto"
    if "framework_index" in ix:
        policy = read_choice(
            path, "indexes", "framework_index", ix["framework_index"], FRAMEWORK_INDEX_POLICIES
        )
    # Credentials in a URL would reach the committed lock, uv's command line and every message:
    # they were dropped above (`read_url`), and `lock` says how uv takes them instead.
    raw = {"index_url": [ix.get("index_url")]}
    raw.update({k: list(ix.get(k, [])) for k in ("extra_index_urls", "find_links")})
    with_credentials = tuple(
        key
        for key, values in raw.items()
        if any(isinstance(v, str) and without_credentials(v) != v for v in values)
    )
    return Indexes(
        index_url=index_url,
        extra_index_urls=extra,
        find_links=find_links,
        framework_index=cast(FrameworkIndexPolicy, policy),
        credentials_removed=with_credentials,
    )


# [smoke] key -> (minimum, maximum)
_SMOKE_RANGES = {
    "tier": (1, 2),
    "timeout_s": (10, 86400),
    "steps": (1, 100000),
    "min_shm_mib": (0, 1048576),
}


def _smoke_table(sm: Mapping[str, Any], path: str) -> SmokeSettings:
    defaults = dataclasses.asdict(SmokeSettings())
    values: dict[str, Any] = {
        key: read_int(path, "smoke", key, sm.get(key, defaults[key]), minimum=low, maximum=high)
        for key, (low, high) in _SMOKE_RANGES.items()
    }
    if "command" in sm:
        from envbuild.request.project import command_value

        values["command"] = command_value(path, "smoke", "command", sm["command"])
    return SmokeSettings(**values)


# --- the one validator: envbuild.toml and `resolve` flags -----------------------------------------


def check_request(request: Request, origin: RequestOrigin = FLAGS) -> Request:
    """The rules every request obeys, from `envbuild.toml` or from flags (pure): the framework
    requirement's syntax, each setting's vocabulary, and the combinations that contradict
    each other. Checks against the matrix (is the framework, OS or GPU known) are the
    resolver's. Returns the request unchanged; UserError (exit 2) naming the key or flag."""
    parse_framework_requirement(request.framework, origin)
    _check_vocabulary(request, origin)
    _check_ranges(request, origin)
    if request.base is not None:
        _check_framework_base(request, origin)
    if request.device == "cpu":
        _check_cpu(request, origin)
    elif request.flavour == "cpu":
        raise origin.fail(
            "image",
            "flavour",
            'flavour = "cpu" builds a CPU-only image, but device = "cuda"',
            toml='write device = "cpu" too, or pick a CUDA flavour ("auto", "plain", "base", ...)',
            flags="use --cpu for a CPU image, or another --flavour",
        )
    # compile_extensions with flavour "plain" is allowed: with no nvidia/cuda image, nvcc
    # comes from NVIDIA's CUDA toolkit wheels (CUDA >= 13; envbuild/cuda/extensions.py).
    return request


def _check_framework_base(request: Request, origin: RequestOrigin) -> None:
    """A framework base brings its own Python, OS and build: the keys that would choose them
    contradict it (the lock records what the base holds)."""
    given = (
        ("python", request.python is not None),
        ("os", request.os is not None),
        ("flavour", request.flavour != "auto"),
    )
    for key, present in given:
        if present:
            raise origin.fail(
                "image",
                key,
                f"{key} is set, but base = {request.base!r} brings its own",
                toml=f"remove [image] {key}: `envbuild lock` reads it from the base",
                flags=f"drop --{key.replace('_', '-')}",
            )


def request_from_flags(
    *,
    framework: str = "torch",
    python: str | None = None,
    gpus: tuple[str, ...] = (),
    driver: str | None = None,
    cuda: str | None = None,
    os_name: str | None = None,
    flavour: str = "auto",
    cpu: bool = False,
    strict_compat: bool = False,
    compile_extensions: bool = False,
    platform: str = "x86_64",
    framework_index: str = "auto",
) -> Request:
    """`envbuild resolve`'s flags -> a checked Request. `--flavour cpu` implies `--cpu`;
    surrounding spaces are dropped (a shell quirk, not a different value)."""

    def clean(text: str | None) -> str | None:
        return text.strip() if text and text.strip() else None

    request = Request(
        framework=framework.strip() or "torch",
        python=clean(python),
        os=clean(os_name),
        flavour=flavour,
        device="cpu" if cpu or flavour == "cpu" else "cuda",
        cuda=clean(cuda),
        # An empty --driver is an error (driver_problem), not "no driver given".
        targets=Targets(gpus=tuple(gpus), driver=driver.strip() if driver is not None else None),
        compat="strict" if strict_compat else "minor",
        platform=platform,
        compile_extensions=compile_extensions,
    )
    if framework_index != "auto":
        policy = read_choice(
            "--framework-index",
            "indexes",
            "framework_index",
            framework_index,
            FRAMEWORK_INDEX_POLICIES,
        )
        indexes = Indexes(framework_index=cast(FrameworkIndexPolicy, policy))
        request = dataclasses.replace(request, indexes=indexes)
    return check_request(request, FLAGS)


def parse_framework_requirement(
    text: str, origin: RequestOrigin = FLAGS
) -> tuple[str, tuple[str, ...], str]:
    """ "jax[cuda13]>=0.7" -> ("jax", ("cuda13",), ">=0.7"): the normalised name (PEP 503),
    the extras (variant names) and the specifier text; UserError when malformed."""
    match = _FRAMEWORK_RE.match(text)
    spec = match.group("spec") if match else ""
    try:
        spec = str(SpecifierSet(spec))
    except (InvalidSpecifier, ValueError):
        match = None
    if match is None:
        raise origin.fail(
            "framework",
            "requirement",
            f"framework requirement {text!r} is not valid",
            toml='write a name and a range, for example "torch>=2.7,<2.11"',
            flags="write it like torch, torch==2.6.*, torch>=2.7, tensorflow==2.15.*, jax[cuda13] "
            "(no URL, no environment marker)",
        )
    name = re.sub(r"[-_.]+", "-", match.group("name")).lower()
    extras = tuple(sorted(e.strip().lower() for e in (match.group("extras") or "").split(",") if e))
    return name, extras, spec


def _check_choice(
    origin: RequestOrigin, table: str, key: str, value: str, choices: tuple[str, ...]
) -> None:
    if value in choices:
        return
    close = _close_matches(value.lower(), choices, n=1)
    maybe = f"did you mean {close[0]!r}? " if close else ""
    raise origin.fail(
        table,
        key,
        f"{value!r} is not one of {', '.join(choices)}",
        toml=f"{maybe}write one of: {', '.join(repr(c) for c in choices)}",
        flags=f"{maybe}choose one of: {', '.join(choices)}",
        flag_problem=f"unknown {key} {value!r}",
    )


def _check_vocabulary(request: Request, origin: RequestOrigin) -> None:
    """Each setting's own syntax: flavour, device, platform, policy, Python and OS names."""
    _check_choice(origin, "image", "flavour", request.flavour, FLAVOURS)
    _check_choice(origin, "image", "device", request.device, DEVICES)
    if request.platform in PLATFORM_ALIASES:
        raise origin.fail(
            "image",
            "platform",
            f"{request.platform!r} is Docker's name, not the CPU architecture",
            toml=f'write platform = "{PLATFORM_ALIASES[request.platform]}"',
            flags=f"use --platform {PLATFORM_ALIASES[request.platform]}",
        )
    _check_choice(origin, "image", "platform", request.platform, PLATFORMS)
    _check_choice(origin, "targets", "compat", request.compat, COMPAT_POLICIES)
    if request.python is not None and not PYTHON_SPEC_RE.match(request.python):
        raise origin.fail(
            "image",
            "python",
            f"Python {request.python!r} is not a version like 3.12 (major.minor, or 3.14t "
            "for a free-threaded build)",
            toml='write major.minor, for example python = "3.12"',
            flags="give major.minor, for example --python 3.12",
        )
    if request.os is not None and not OS_NAME_RE.match(request.os):
        raise origin.fail(
            "image",
            "os",
            f"{request.os!r} is not an OS name",
            toml='write it as in the matrix: "ubuntu24.04", "ubuntu22.04" or "debian12"',
            flags="give it as in the matrix, for example --os ubuntu24.04 or --os debian12",
        )


def _check_ranges(request: Request, origin: RequestOrigin) -> None:
    """The CUDA range parses as a version range; the driver as a version."""
    if request.cuda is not None:
        try:
            parse_specifier(request.cuda, what="CUDA version range")
        except UserError as exc:
            raise origin.fail(
                "framework", "cuda", exc.message, toml=exc.hint, flags=exc.hint
            ) from None
    driver = request.targets.driver
    if driver is None:
        return
    problem = driver_problem(driver)
    if problem is not None:
        message, hint = problem
        raise origin.fail("targets", "driver", message, toml=hint, flags=hint)
    try:
        parse_version(driver, what="driver version")
    except UserError as exc:
        # "r550": a driver branch as NVIDIA writes it; its oldest driver is 550.
        branch = driver.strip().lower().removeprefix("r")
        raise origin.fail(
            "targets",
            "driver",
            exc.message,
            toml=(f'write the branch without the r ("{branch}") or ' if branch.isdigit() else "")
            + 'write the oldest driver on your hosts as nvidia-smi prints it: "570.124.06"',
            flags=exc.hint,
        ) from None


def _check_cpu(request: Request, origin: RequestOrigin) -> None:
    """A CPU image has no CUDA: no nvidia/cuda flavour, target GPUs, driver, CUDA range or
    CUDA extensions. Target GPUs or a driver with a CPU image are an error from flags too:
    the request contradicts itself and nothing here guesses which half was meant (the GPUs
    of --host/--hosts are facts about the machines, not the request: the resolver notes them)."""
    if request.flavour in CUDA_FLAVOURS:
        raise origin.fail(
            "image",
            "flavour",
            f'flavour = "{request.flavour}" is an nvidia/cuda image, but device = "cpu"',
            flag_problem=f"flavour {request.flavour!r} is an nvidia/cuda image; a CPU stack "
            "uses a plain OS image",
            toml='write flavour = "cpu" (or "auto"), or device = "cuda"',
            flags="drop --flavour (or use --flavour cpu) for a CPU image",
        )
    conflicts = (
        ("targets", "gpus", bool(request.targets.gpus), 'GPUs are listed, but device = "cpu"'),
        (
            "targets",
            "driver",
            request.targets.driver is not None,
            'a driver is given, but device = "cpu" images use no driver',
        ),
        (
            "framework",
            "cuda",
            request.cuda is not None,
            'a CUDA range is given, but device = "cpu"',
        ),
    )
    for table, key, present, problem in conflicts:
        flag = "gpu" if key == "gpus" else key
        if present:
            raise origin.fail(
                table,
                key,
                problem,
                toml=f'remove [{table}] {key}, or write device = "cuda"',
                flags=f"drop --{flag}, or drop --cpu for a GPU stack",
                flag_problem=f"{problem.split(',')[0]} (--{flag}), but this is a CPU stack",
            )
    if request.compile_extensions:
        raise origin.fail(
            "image",
            "compile_extensions",
            'compiling CUDA extensions needs device = "cuda"',
            toml='write compile_extensions = false, or device = "cuda"',
            flags="drop --compile-extensions, or drop --cpu",
        )


def request_path(image_dir: Path) -> Path:
    return image_dir / REQUEST_FILE


def load_request(image_dir: Path) -> Request:
    """Read and parse `<image_dir>/envbuild.toml` (raises RequestError, exit 2)."""
    path = request_path(image_dir)
    if not image_dir.is_dir():
        raise RequestError(
            f"{image_dir}: no such image folder",
            hint=f"create {path} (see envbuild's docs/request.md), or pass the folder that "
            "holds it",
            fields={"file": str(path)},
        )
    from envbuild.core.fsio import read_input
    from envbuild.request import starter

    try:
        data = read_input(path, what="the request")
    except FileNotFoundError:
        raise RequestError(
            f"{path}: no request file",
            hint=f"create {path} with {starter.starter_request(image_dir)} (see envbuild's "
            "docs/request.md)",
            fields={"file": str(path)},
        ) from None
    return parse_request(
        data,
        path=str(path),
        default_name=_default_name(image_dir),
        installable=lambda rel: _installable(image_dir / rel),
    )


def _installable(folder: Path) -> bool:
    """Whether a [project] folder is installed when `install` is not written: it has a
    setup.py, or a pyproject.toml with a [build-system] table. A pyproject.toml without one
    is a project of scripts and dependencies, not a package: uv does not build or install it
    either (https://docs.astral.sh/uv/concepts/projects/config/#build-systems), and pip's
    setuptools fallback would refuse most such folders (flat layouts). A missing or
    unreadable folder or file is reported where it is read, so it counts as installable."""
    try:
        if not folder.is_dir() or (folder / "setup.py").is_file():
            return True
        pyproject = folder / "pyproject.toml"
        if not pyproject.is_file():
            return False
        from envbuild.core.fsio import read_input

        data = toml_loads(read_input(pyproject, what="pyproject.toml").decode("utf-8"))
    except (OSError, ValueError, EnvbuildError):
        # ValueError: bad TOML (DocumentError) or bad UTF-8; projectdeps says what is wrong
        return True
    return "build-system" in data


def _default_name(image_dir: Path) -> str:
    # The folder name, if it is already a valid image name; else the user must write one.
    name = image_dir.resolve().name.lower()
    return name if _NAME_RE.match(name) else ""


def _non_default(obj: Any) -> Any:
    """A dataclass as a dict of only the fields that differ from their defaults (recursively).

    Adding a defaulted field to `Request` later must not change the hash of existing requests,
    or every committed lock would go stale at once.
    """
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        if isinstance(obj, tuple):
            return [_non_default(v) for v in obj]
        return obj
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.metadata.get("hashed") is False:
            continue
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        if f.default_factory is not dataclasses.MISSING and value == f.default_factory():
            continue
        out[f.name] = _non_default(value)
    return out


def canonical_request_json(request: Request) -> str:
    """The request as canonical JSON (sorted keys, no spaces, defaults left out)."""
    return json.dumps(_non_default(request), sort_keys=True, separators=(",", ":"))


def request_hash(request: Request) -> str:
    import hashlib  # here: its OpenSSL start-up is a visible part of a short command's time

    return "sha256:" + hashlib.sha256(canonical_request_json(request).encode()).hexdigest()

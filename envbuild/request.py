"""The request: `images/<name>/envbuild.toml` -> `models.Request`, strictly.

Every problem is a `RequestError` (exit 2) that names the file, the key and what to write
instead; nothing here guesses. Every key is documented in docs/request.md. Parsing is pure
(`parse_request`); `load_request` only reads the bytes. Strings end up in Dockerfile text and
shell commands, so quotes, newlines and control characters are refused outright rather than
escaped (repo2docker had to escape them after the fact: jupyterhub/repo2docker#1195).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.errors import RequestError, UserError
from envbuild.models import FLAVOURS, Indexes, Request, SmokeSettings, Targets
from envbuild.versions import parse_specifier, parse_version

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
    },
    "framework": {"requirement": "string", "cuda": "string"},
    "packages": {"requirements": "array of strings"},
    "targets": {"gpus": "array of strings", "driver": "string", "compat": "string"},
    "indexes": {
        "index_url": "string",
        "extra_index_urls": "array of strings",
        "find_links": "array of strings",
    },
    "smoke": {
        "tier": "integer",
        "timeout_s": "integer",
        "steps": "integer",
        "min_shm_mib": "integer",
    },
}

PLATFORMS = ("x86_64", "aarch64")
_PLATFORM_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
DEVICES = ("cuda", "cpu")
COMPAT = ("minor", "strict")
# Docker repository path component rules (distribution/reference grammar), lower case.
_NAME_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
_PYTHON_RE = re.compile(r"^3\.[0-9]{1,2}$")
_OS_RE = re.compile(r"^[a-z]+[0-9][0-9.]*$")
# Quotes, backslashes, backticks, '$' and control characters break Dockerfile/shell quoting.
# C0/C1 controls and Unicode line/paragraph separators too: each breaks a line somewhere.
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\"'`\\$]")
_LONG_QUOTED = re.compile(r"'[^']{120,}'")
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_URL_SCHEMES = ("https://", "http://", "file://")
_CUDA_FLAVOURS = ("base", "runtime", "cudnn", "devel")


def _where(path: str, table: str, key: str | None = None) -> str:
    # An unknown key can be any string: quote it unless it is a plain TOML bare key.
    shown = key if key is None or _PLAIN_KEY.match(key) else repr(key)
    return f"{path}: [{table}]" + (f" {shown}" if key else "")


def _shorten(problem: str) -> str:
    """A 100 kB value is named by its start and length, not echoed whole (tests/reliability)."""
    return _LONG_QUOTED.sub(
        lambda m: f"{m.group()[:60]}...' ({len(m.group()) - 2} characters)", problem
    )


def _fail(path: str, table: str, key: str | None, problem: str, instead: str) -> RequestError:
    loc = _where(path, table, key)
    return RequestError(
        f"{loc}: {_shorten(problem)}",
        hint=instead,
        fields={"file": path, "table": table, "key": key or ""},
    )


def _check_text(path: str, table: str, key: str, value: str) -> str:
    bad = _BAD_CHARS.search(value)
    if bad:
        raise _fail(
            path,
            table,
            key,
            f"{value!r} contains {bad.group()!r}",
            "write it without quotes, backslashes, '$', backticks, newlines or control "
            "characters (they would end up inside Dockerfile and shell text)",
        )
    if value != value.strip():
        raise _fail(
            path,
            table,
            key,
            f"{value!r} has leading or trailing spaces",
            f"write {value.strip()!r}",
        )
    return value


def _str(path: str, table: str, key: str, value: Any, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise _fail(
            path,
            table,
            key,
            f"expected a string, got {_type_name(value)} {value!r}",
            f'write {key} = "..." (quoted)',
        )
    if not value and not empty_ok:
        raise _fail(path, table, key, "is empty", f"remove {key} or give it a value")
    return _check_text(path, table, key, value)


def _str_list(path: str, table: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _fail(
            path,
            table,
            key,
            f"expected an array of strings, got {_type_name(value)} {value!r}",
            f'write {key} = ["...", "..."]',
        )
    out = []
    for item in value:
        out.append(_str(path, table, key, item))
    return tuple(out)


def _int(path: str, table: str, key: str, value: Any, *, minimum: int, maximum: int) -> int:
    # bool is an int in Python; `tier = true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(
            path,
            table,
            key,
            f"expected an integer, got {_type_name(value)} {value!r}",
            f"write {key} = <a whole number from {minimum} to {maximum}> (no quotes)",
        )
    if not minimum <= value <= maximum:
        raise _fail(
            path,
            table,
            key,
            f"{value} is out of range",
            f"write a whole number from {minimum} to {maximum}",
        )
    return value


def _bool(path: str, table: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(
            path,
            table,
            key,
            f"expected true or false, got {_type_name(value)} {value!r}",
            f"write {key} = true or {key} = false (no quotes)",
        )
    return value


def _choice(path: str, table: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    text = _str(path, table, key, value)
    if text not in choices:
        close = difflib.get_close_matches(text.lower(), choices, n=1)
        maybe = f"did you mean {close[0]!r}? " if close else ""
        raise _fail(
            path,
            table,
            key,
            f"{text!r} is not one of {', '.join(choices)}",
            f"{maybe}write one of: {', '.join(repr(c) for c in choices)}",
        )
    return text


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def _url(path: str, table: str, key: str, value: str, *, paths_ok: bool) -> str:
    if value.startswith(_URL_SCHEMES):
        return value
    if "://" in value or (not paths_ok and ":" in value):
        raise _fail(
            path,
            table,
            key,
            f"{value!r} is not an http(s):// or file:// URL",
            "write an https:// index URL (or file:// for a local folder)",
        )
    if not paths_ok:
        raise _fail(
            path,
            table,
            key,
            f"{value!r} is not a URL",
            "write an https:// index URL such as https://pypi.org/simple",
        )
    return value  # a path, relative to the image folder


def _requirement(path: str, table: str, key: str, text: str) -> Requirement:
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise _fail(
            path,
            table,
            key,
            # packaging adds a caret diagram on more lines: the first line is the reason
            f"{text!r} is not a valid requirement ({str(exc).splitlines()[0]})",
            'write a PEP 508 requirement such as "numpy<3" or "transformers>=4.40,<5"',
        ) from None
    if req.url is not None and not req.url.startswith(_URL_SCHEMES):
        raise _fail(
            path,
            table,
            key,
            f"{text!r} points at {req.url!r}, which is not an http(s):// or file:// URL",
            "use an https:// or file:// URL to a wheel, or a plain name with a version range",
        )
    if req.marker is not None:
        raise _fail(
            path,
            table,
            key,
            f"{text!r} has an environment marker",
            "drop the marker: the lock is for one platform already ([image] platform, python)",
        )
    return req


def parse_request(data: bytes, *, path: str, default_name: str = "") -> Request:
    """Parse the bytes of an `envbuild.toml` strictly (pure)."""
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
    return request_from_mapping(doc, path=path, default_name=default_name)


def toml_loads(text: str) -> dict[str, Any]:
    """Parse TOML for reading only: the standard library's tomllib where it exists (Python
    >= 3.11; about 20x faster than tomlkit on a lock with hundreds of hashes, which keeps
    `lock --check` in milliseconds), tomlkit on 3.10. Raises ValueError on bad TOML."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads(text)
    import tomlkit  # lazy: the CLI must start without it
    from tomlkit.exceptions import ParseError

    try:
        data: dict[str, Any] = tomlkit.parse(text).unwrap()
    except ParseError as exc:
        raise ValueError(str(exc)) from None
    return data


def _parse_toml(text: str, *, path: str) -> dict[str, Any]:
    try:
        return toml_loads(text)
    except Exception as exc:  # ValueError (tomllib.TOMLDecodeError) and odd inputs (e.g. NUL)
        raise RequestError(
            f"{path}: not valid TOML: {exc}",
            hint="fix the line it names; see docs/request.md for the format",
            fields={"file": path},
        ) from None


def request_from_mapping(doc: Mapping[str, Any], *, path: str, default_name: str = "") -> Request:
    """Validate a parsed request table (pure)."""
    for table, body in doc.items():
        if table not in SCHEMA:
            close = difflib.get_close_matches(table, SCHEMA, n=1)
            maybe = f"did you mean [{close[0]}]? " if close else ""
            raise RequestError(
                f"{path}: unknown table or key {table!r} at the top level",
                hint=f"{maybe}known tables: {', '.join('[' + t + ']' for t in SCHEMA)}",
                fields={"file": path, "table": table},
            )
        if not isinstance(body, dict):
            raise RequestError(
                f"{path}: {table!r} must be a table, got {_type_name(body)}",
                hint=f"write [{table}] on its own line and its keys below it",
                fields={"file": path, "table": table},
            )
        for key in body:
            if key not in SCHEMA[table]:
                close = difflib.get_close_matches(key, SCHEMA[table], n=1)
                maybe = f"did you mean {close[0]!r}? " if close else ""
                raise _fail(
                    path,
                    table,
                    key,
                    "unknown key",
                    f"{maybe}keys of [{table}]: {', '.join(SCHEMA[table])}",
                )

    image = doc.get("image", {})
    fw = doc.get("framework", {})
    pk = doc.get("packages", {})
    tg = doc.get("targets", {})
    ix = doc.get("indexes", {})
    sm = doc.get("smoke", {})

    # [image]
    name = _str(path, "image", "name", image["name"]) if "name" in image else default_name
    if not _NAME_RE.match(name):
        raise _fail(
            path,
            "image",
            "name",
            f"{name!r} is not a valid image name",
            'write lower-case letters, digits and single ".", "_" or "-" between them, '
            'for example name = "torch-train"',
        )
    python = None
    if "python" in image:
        python = _str(path, "image", "python", image["python"])
        if not _PYTHON_RE.match(python):
            raise _fail(
                path,
                "image",
                "python",
                f"{python!r} is not a Python minor version",
                'write major.minor, for example python = "3.12"',
            )
    os_name = None
    if "os" in image:
        os_name = _str(path, "image", "os", image["os"])
        if not _OS_RE.match(os_name):
            raise _fail(
                path,
                "image",
                "os",
                f"{os_name!r} is not an OS name",
                'write it as in the matrix: "ubuntu24.04", "ubuntu22.04" or "debian12"',
            )
    flavour = _choice(path, "image", "flavour", image.get("flavour", "auto"), FLAVOURS)
    device = _choice(path, "image", "device", image.get("device", "cuda"), DEVICES)
    platform = "x86_64"
    if "platform" in image:
        raw = _str(path, "image", "platform", image["platform"])
        if raw in _PLATFORM_ALIASES:
            raise _fail(
                path,
                "image",
                "platform",
                f"{raw!r} is Docker's name, not the CPU architecture",
                f'write platform = "{_PLATFORM_ALIASES[raw]}"',
            )
        platform = _choice(path, "image", "platform", raw, PLATFORMS)
    compile_ext = _bool(path, "image", "compile_extensions", image.get("compile_extensions", False))

    # [framework]
    if "requirement" not in fw:
        raise _fail(
            path,
            "framework",
            "requirement",
            "is missing",
            'add [framework] requirement = "torch" (or "jax", "tensorflow", with a range)',
        )
    fw_text = _str(path, "framework", "requirement", fw["requirement"])
    fw_req = _requirement(path, "framework", "requirement", fw_text)
    if fw_req.url is not None:
        raise _fail(
            path,
            "framework",
            "requirement",
            "a direct URL cannot be resolved against the matrix",
            'write a name and a range, for example "torch>=2.7,<2.11"',
        )
    cuda = None
    if "cuda" in fw:
        cuda = _str(path, "framework", "cuda", fw["cuda"])
        try:
            parse_specifier(cuda, what="[framework] cuda")
        except UserError as exc:
            raise _fail(path, "framework", "cuda", exc.message, exc.hint) from None

    # [packages]
    packages: tuple[str, ...] = ()
    if "requirements" in pk:
        packages = _str_list(path, "packages", "requirements", pk["requirements"])
        seen: dict[str, str] = {}
        fw_name = canonicalize_name(fw_req.name)
        for item in packages:
            req = _requirement(path, "packages", "requirements", item)
            norm = canonicalize_name(req.name)
            if norm == fw_name:
                raise _fail(
                    path,
                    "packages",
                    "requirements",
                    f"{item!r} names the framework",
                    "put the framework's range in [framework] requirement only",
                )
            if norm in seen:
                raise _fail(
                    path,
                    "packages",
                    "requirements",
                    f"{item!r} and {seen[norm]!r} name the same package",
                    "merge them into one requirement",
                )
            seen[norm] = item

    # [targets]
    gpus = _str_list(path, "targets", "gpus", tg["gpus"]) if "gpus" in tg else ()
    driver = None
    if "driver" in tg:
        driver = _str(path, "targets", "driver", tg["driver"])
        try:
            parse_version(driver, what="driver")
        except UserError:
            # "r550": a driver branch as NVIDIA writes it; its oldest driver is 550.
            branch = driver.strip().lower().removeprefix("r")
            raise _fail(
                path,
                "targets",
                "driver",
                f"{driver!r} is not a driver version",
                (f'write the branch without the r ("{branch}") or ' if branch.isdigit() else "")
                + 'write the oldest driver on your hosts as nvidia-smi prints it: "570.124.06"',
            ) from None
    compat = _choice(path, "targets", "compat", tg.get("compat", "minor"), COMPAT)

    # [indexes]
    index_url = None
    if "index_url" in ix:
        index_url = _url(
            path,
            "indexes",
            "index_url",
            _str(path, "indexes", "index_url", ix["index_url"]),
            paths_ok=False,
        )
    extra = tuple(
        _url(path, "indexes", "extra_index_urls", u, paths_ok=False)
        for u in (
            _str_list(path, "indexes", "extra_index_urls", ix["extra_index_urls"])
            if "extra_index_urls" in ix
            else ()
        )
    )
    find_links = tuple(
        _url(path, "indexes", "find_links", u, paths_ok=True)
        for u in (
            _str_list(path, "indexes", "find_links", ix["find_links"]) if "find_links" in ix else ()
        )
    )

    # [smoke]
    defaults = SmokeSettings()
    smoke = SmokeSettings(
        tier=_int(path, "smoke", "tier", sm.get("tier", defaults.tier), minimum=1, maximum=2),
        timeout_s=_int(
            path,
            "smoke",
            "timeout_s",
            sm.get("timeout_s", defaults.timeout_s),
            minimum=10,
            maximum=86400,
        ),
        steps=_int(
            path, "smoke", "steps", sm.get("steps", defaults.steps), minimum=1, maximum=100000
        ),
        min_shm_mib=_int(
            path,
            "smoke",
            "min_shm_mib",
            sm.get("min_shm_mib", defaults.min_shm_mib),
            minimum=0,
            maximum=1048576,
        ),
    )

    # Impossible combinations: say which key to change.
    if device == "cpu":
        if flavour in _CUDA_FLAVOURS:
            raise _fail(
                path,
                "image",
                "flavour",
                f'flavour = "{flavour}" is an nvidia/cuda image, but device = "cpu"',
                'write flavour = "cpu" (or "auto"), or device = "cuda"',
            )
        if gpus:
            raise _fail(
                path,
                "targets",
                "gpus",
                'GPUs are listed, but device = "cpu"',
                'remove [targets] gpus, or write device = "cuda"',
            )
        if driver is not None:
            raise _fail(
                path,
                "targets",
                "driver",
                'a driver is given, but device = "cpu" images use no driver',
                'remove [targets] driver, or write device = "cuda"',
            )
        if cuda is not None:
            raise _fail(
                path,
                "framework",
                "cuda",
                'a CUDA range is given, but device = "cpu"',
                'remove [framework] cuda, or write device = "cuda"',
            )
        if compile_ext:
            raise _fail(
                path,
                "image",
                "compile_extensions",
                'compiling CUDA extensions needs device = "cuda"',
                'write compile_extensions = false, or device = "cuda"',
            )
    elif flavour == "cpu":
        raise _fail(
            path,
            "image",
            "flavour",
            'flavour = "cpu" builds a CPU-only image, but device = "cuda"',
            'write device = "cpu" too, or pick a CUDA flavour ("auto", "plain", "base", ...)',
        )
    if compile_ext and flavour == "plain":
        raise _fail(
            path,
            "image",
            "compile_extensions",
            'flavour = "plain" has no CUDA compiler to build extensions with',
            'write flavour = "auto" (a devel builder stage is added) or drop compile_extensions',
        )

    return Request(
        framework=fw_text,
        name=name,
        python=python,
        os=os_name,
        flavour=flavour,
        device=device,  # type: ignore[arg-type]  # checked against DEVICES above
        cuda=cuda,
        packages=packages,
        targets=Targets(gpus=gpus, driver=driver),
        indexes=Indexes(index_url=index_url, extra_index_urls=extra, find_links=find_links),
        smoke=smoke,
        compat=compat,  # type: ignore[arg-type]  # checked against COMPAT above
        platform=platform,
        compile_extensions=compile_ext,
    )


def request_path(image_dir: Path) -> Path:
    return image_dir / REQUEST_FILE


def load_request(image_dir: Path) -> Request:
    """Read and parse `<image_dir>/envbuild.toml` (raises RequestError, exit 2)."""
    path = request_path(image_dir)
    if not image_dir.is_dir():
        raise RequestError(
            f"{image_dir}: no such image folder",
            hint=f"create {path} (see docs/request.md), or pass the folder that holds it",
            fields={"file": str(path)},
        )
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RequestError(
            f"{path}: no request file",
            hint=f'create {path} with at least [framework] requirement = "torch" '
            "(see docs/request.md)",
            fields={"file": str(path)},
        ) from None
    except OSError as exc:
        raise RequestError(
            f"{path}: cannot read it ({exc.strerror})",
            hint="check the file's permissions",
            fields={"file": str(path)},
        ) from None
    return parse_request(data, path=str(path), default_name=_default_name(image_dir))


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
    return "sha256:" + hashlib.sha256(canonical_request_json(request).encode()).hexdigest()

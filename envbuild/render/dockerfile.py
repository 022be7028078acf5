"""Lock -> Dockerfile text (Jinja2 templates in `templates/`) and the build context around it.

`render_dockerfile` is pure apart from reading templates: every value that reaches a template is
validated here first (PEP 508 names, PEP 440 versions, sha256 hashes, image references, URLs
without shell or Dockerfile metacharacters), so a lock or option that carries a newline, quote,
backslash or a smuggled instruction stops with a `UserError` (exit 2) before anything renders.
Dockerfile text lives only in the templates. `build_context` adds the files the Dockerfile
COPYs; `context_tar` packs them reproducibly (sorted, mtime 0, root-owned).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.core import resources
from envbuild.core.errors import UserError
from envbuild.core.locations import is_direct_url, is_remote
from envbuild.core.models import (
    FRAMEWORK_FLAVOUR,
    OS_NAME_RE,
    PYTHON_SPEC_RE,
    PYTHON_VERSION_RE,
)
from envbuild.core.tarball import context_tar as context_tar
from envbuild.core.values import FIX_LOCK as _FIX_LOCK
from envbuild.core.values import check_digest as check_digest
from envbuild.core.values import check_hash as check_hash
from envbuild.core.values import check_image_ref as check_ref
from envbuild.core.values import check_match as _check
from envbuild.core.values import check_package_name as check_package_name
from envbuild.core.values import check_url as check_url
from envbuild.core.values import check_version as check_version
from envbuild.core.values import parse_image_ref
from envbuild.core.values import refuse as _refuse
from envbuild.lock.format import dumps, lock_sha256
from envbuild.render import builder_stage, sandbox
from envbuild.request import project, sourcetree
from envbuild.smoke import plan as smoke

if TYPE_CHECKING:
    from envbuild.core.models import Lock
    from envbuild.matrix import Matrix

USER_TEMPLATE = "Dockerfile.j2"
"""A user template in the image folder; it may `{% extends envbuild_template %}`."""
BUILTIN_PREFIX = "envbuild"
BASE_TEMPLATE = "envbuild/base.Dockerfile.j2"
DEVEL_TEMPLATE = "envbuild/devel.Dockerfile.j2"
FRAMEWORK_TEMPLATE = "envbuild/framework.Dockerfile.j2"
_BASE_PYTHON = re.compile(r"/[A-Za-z0-9._+/-]+")

CA_SECRET_ID = "envbuild-ca"
"""BuildKit secret id of the CA certificate (`--secret id=envbuild-ca,src=<context>/certs/ca.crt`)."""
CA_CONTEXT_PATH = "certs/ca.crt"
WHEELS_CONTEXT_DIR = "wheels"
USER_UID = 1000
USER_NAME = "envbuild"


@dataclass(frozen=True)
class BuildInputs:
    """What a user types to build behind proxies and air gaps (`render` and `image` flags:
    --base-image, --ca-cert, --index-url, --find-links, --buildkit), as one value. None of
    them loosens hash checking. `render_options` reads and checks them."""

    base_image: str | None = None
    ca_cert: Path | None = None
    index_url: str | None = None
    find_links: Path | None = None
    buildkit: bool = False


@dataclass(frozen=True)
class RenderOptions:
    """How to render beyond what the lock says (CLI flags of `render` and `image`)."""

    base_image: str | None = None
    """Replaces the locked base image (for `devel` stacks: the final stage's base)."""
    ca_cert: bytes | None = None
    """A PEM CA certificate (corporate proxy): used by apt and pip during the build only."""
    index_url: str | None = None
    """Replaces the lock's index URL (a mirror); hashes are still checked."""
    find_links: Path | None = None
    """A wheelhouse folder, copied into the context as `wheels/`."""
    buildkit: bool = False
    """Render BuildKit-only features: a pip cache mount, a wheel bind mount, a secret for the CA."""
    source: str | None = None
    """`org.opencontainers.image.source` (the repository URL), when known."""


@dataclass(frozen=True)
class RenderResult:
    """What `envbuild.app.render.render` did: the Dockerfile, and where it wrote files (None = nowhere)."""

    dockerfile: str
    output: Path | None = None
    context: Path | None = None
    context_files: int = 0
    left_out: tuple[sourcetree.LeftOut, ...] | None = None
    """What of the project stays out of /app; None without a project."""
    notes: tuple[str, ...] = ()
    """Lines for the user about choices made for them (the lock's wheel folder taken as the
    wheelhouse: `local_wheels.lock_wheelhouse`)."""


# --- validation (allow-lists; anything else is refused) -------------------------------------
# Names, versions, hashes, URLs and image references: envbuild.core.values, the one grammar the
# request and `image --tag` use too (imported above `as` themselves for callers of render).

_IMAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_VARIANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CUDA = re.compile(r"[0-9]+(\.[0-9]+){0,3}")
# Stricter than models.OS_NAME_RE on purpose: the template installs with apt, so only Debian
# and Ubuntu bases render.
_OS = re.compile(r"(ubuntu|debian)[0-9][0-9.]*")
_OS_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")  # Debian policy 5.6.1 package names
# NVIDIA_REQUIRE_CUDA: constraints `cuda`, `driver`, `arch`, `brand`; space = OR, comma = AND
# (nvidia-container-toolkit cmd/nvidia-container-runtime/README.md).
_REQUIRE_CUDA = re.compile(
    r"[a-z]+(>=|<=|=|<|>)[A-Za-z0-9.]+([, ][a-z]+(>=|<=|=|<|>)[A-Za-z0-9.]+)*"
)


def check_image_ref(value: object, what: str = "base image", hint: str = _FIX_LOCK) -> str:
    """An image reference (`envbuild.core.values`) with a tag or digest: FROM without one
    pulls whatever `latest` is today (hadolint DL3006)."""
    check_ref(value, what, hint)
    ref = parse_image_ref(value)
    if ref is None or (ref.tag is None and ref.digest is None):
        raise _refuse(what, value, "no tag or digest (hadolint DL3006)", hint)
    return str(value)


def check_options(options: RenderOptions) -> RenderOptions:
    """Validate the options a user typed, before any lock is read (exit 2 on bad input)."""
    flag_hint = "correct the option value and run the command again"
    if options.base_image is not None:
        check_image_ref(options.base_image, "--base-image", flag_hint)
    if options.index_url is not None:
        check_url(options.index_url, "--index-url", flag_hint)
    if options.source is not None:
        check_url(options.source, "image source URL", flag_hint)
    if options.ca_cert is not None:
        _check_pem(options.ca_cert)
    if options.find_links is not None and not options.find_links.is_dir():
        raise UserError(
            f"--find-links {str(options.find_links)!r} is not a folder",
            hint="give the folder that holds the wheels (a wheelhouse)",
        )
    return options


def render_options(inputs: BuildInputs) -> RenderOptions:
    """The checked render options of what a user typed (reads the CA file), before any lock
    is read: exit 2 on bad input."""
    return check_options(
        RenderOptions(
            base_image=inputs.base_image,
            ca_cert=read_ca_cert(inputs.ca_cert) if inputs.ca_cert is not None else None,
            index_url=inputs.index_url,
            find_links=inputs.find_links,
            buildkit=inputs.buildkit,
        )
    )


MAX_CA_CERT = 4 << 20
"""A CA bundle is a few hundred kB (Debian's whole ca-certificates.crt is about 220 kB)."""


def read_ca_cert(path: Path) -> bytes:
    """The bytes of a --ca-cert file (thin I/O; `check_options` checks they are PEM): a regular
    file of at most MAX_CA_CERT bytes (a FIFO or /dev/zero is refused before reading)."""
    from envbuild.core.fsio import read_input

    try:
        return read_input(path, what="the CA certificate", limit=MAX_CA_CERT)
    except FileNotFoundError:
        raise UserError(
            f"cannot read the CA certificate {path}: no such file",
            hint="pass the proxy CA's PEM file, e.g. --ca-cert /usr/local/share/ca-certificates/proxy.crt",
            fields={"file": str(path)},
        ) from None


def _check_pem(data: bytes) -> None:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        text = ""
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise UserError(
            "the CA certificate is not a PEM certificate",
            hint="give the PEM file (-----BEGIN CERTIFICATE-----) of the proxy's CA",
        )


# --- template values ------------------------------------------------------------------------


def _is_devel(lock: Lock) -> bool:
    base = lock.stack.base_image
    if lock.stack.flavour == FRAMEWORK_FLAVOUR:
        return False  # a framework base compiles in a stage of itself (framework.Dockerfile.j2)
    return bool(base.builder) or "devel" in (lock.stack.flavour, base.flavour) or bool(lock.build)


def _strip_digest(ref: str) -> str:
    return ref.split("@", 1)[0]


def _devel_pair(ref: str) -> tuple[str, str]:
    """(builder, final) refs for a devel stack: the final stage is the `base` flavour of the
    same CUDA and OS (cudnn-devel -> cudnn-runtime); tag scheme from hub.docker.com/r/nvidia/cuda.
    A ref outside that scheme builds and runs on the same image."""
    name, _, tag = _strip_digest(ref).partition(":")
    if "-cudnn-devel-" in tag:
        return ref, f"{name}:{tag.replace('-cudnn-devel-', '-cudnn-runtime-', 1)}"
    if "-devel-" in tag:
        return ref, f"{name}:{tag.replace('-devel-', '-base-', 1)}"
    if "-base-" in tag:
        return f"{name}:{tag.replace('-base-', '-devel-', 1)}", ref
    return ref, ref


def _pin(ref: str, digest: str | None) -> str:
    return f"{ref}@{digest}" if digest and "@" not in ref else ref


def _index_args(lock: Lock, options: RenderOptions) -> list[str]:
    """pip options for where to look. They only add places; --require-hashes still decides."""
    args: list[str] = []
    index = options.index_url or lock.indexes.index_url
    if index is not None:
        index = check_url(index, "index URL")
        args.append(f"--index-url {index}")
    # PyPI is pip's default; with a mirror it is replaced, never added back as an extra.
    seen = {index or _PYPI, _PYPI}
    # Only indexes a locked package came from: the framework's index when no package did (torch
    # from a local wheelhouse) cost ~75 s of pip retries on a host that cannot reach it
    # (benchmarks/RESULTS.md section 4).
    extras = list(lock.indexes.extra_index_urls)
    extras += sorted(
        {p.source for p in lock.packages if is_remote(p.source) and not is_direct_url(p.source)}
    )
    for url in extras:
        url = check_url(url, "extra index URL")
        if url not in seen:
            seen.add(url)
            args.append(f"--extra-index-url {url}")
    for link in lock.indexes.find_links:
        link = check_url(
            link,
            "find-links",
            hint="a local wheelhouse goes in with `envbuild render --find-links DIR`",
        )
        args.append(f"--find-links {link}")
    if options.find_links is not None:
        args.append(f"--find-links {_WHEELS_PATH}")
    return args


_PYPI = "https://pypi.org/simple"
# Where the wheelhouse is inside the build: a BuildKit bind mount, or (classic builder) a COPY
# into a builder stage that never ships.
_WHEELS_PATH = "/tmp/envbuild-wheels"
_CA_PATH_CLASSIC = "/opt/envbuild/certs/ca.crt"
# Where pip puts the locked installer for the one step that uses it (removed in that step).
_INSTALLER_DIR = "/tmp/envbuild-installer"
_CA_PATH_SECRET = f"/run/secrets/{CA_SECRET_ID}.crt"


def template_values(
    lock: Lock,
    *,
    options: RenderOptions,
    lock_text: str | None = None,
    default_name: str = "",
    project_version: project.ProjectVersion | None = None,
) -> dict[str, Any]:
    """Every value the templates see, validated. Public so tests can check the allow-lists.
    `default_name` names the image when the lock has no name (the image folder's name);
    `project_version`: the project's version from git, for its install step."""
    check_options(options)
    _packages(lock)  # the whole lock is checked, not only what this template happens to use
    stack = _stack_values(lock, default_name)
    base = _base_values(lock, options)
    python = stack["python"]
    managed = managed_python_values(lock)
    # A managed Python's image still gets the OS's own: it runs pip once, to install uv.
    os_python = managed["bootstrap_python"] if managed else python
    os_packages = [
        _check(_OS_PACKAGE, p, "OS package", "not a Debian package name")
        for p in (f"python{os_python}", f"python{os_python}-venv")
    ]
    text = lock_text if lock_text is not None else dumps(lock)
    return {
        # A framework base's own Python (it holds the framework; the probe found it).
        "base_python": _base_python(lock),
        "has_packages": bool(lock.packages),
        "name": stack["name"],
        "gpu": stack["gpu"],
        "require_cuda": stack["require_cuda"],
        "base_ref": base["base_ref"],
        "builder_ref": base["builder_ref"],
        # The image's CPU architecture: explicit for aarch64 (Grace, Jetson), so that a build
        # on an x86_64 machine (with emulation) does not silently produce an x86_64 image;
        # nothing for x86_64, whose Dockerfiles stay as they were.
        "from_platform": "--platform=linux/arm64 " if lock.platform == "aarch64" else "",
        "base_name": base["base_name"],
        "base_digest": base["base_digest"],
        "python": python,
        "os_python": os_python,
        "managed_python": managed,
        "os_packages": os_packages,
        "pip_index_args": _index_args(lock, options),
        "wheels": options.find_links is not None,
        # Classic builder + wheelhouse of a GPU stack: its CUDA wheels (GBs) would stay in a
        # COPY layer beside the installed venv, CUDA twice; a builder stage installs them and
        # only /opt/venv is copied over. A CPU stack keeps the one stage (base.Dockerfile.j2).
        "wheel_stage": options.find_links is not None and not options.buildkit and lock.is_gpu,
        "wheels_path": _WHEELS_PATH,
        "ca_cert": options.ca_cert is not None,
        "ca_path": _CA_PATH_SECRET if options.buildkit else _CA_PATH_CLASSIC,
        "ca_secret_id": CA_SECRET_ID,
        "buildkit": options.buildkit,
        "installer": installer_requirement(lock),
        "installer_dir": _INSTALLER_DIR,
        # Where pip finds the installer: the index (or mirror) and wheelhouses, not the
        # framework's extra index (an unreachable one costs pip's retries for nothing).
        "installer_index_args": [
            a for a in _index_args(lock, options) if not a.startswith("--extra-index-url ")
        ],
        "user_uid": USER_UID,
        "user_name": USER_NAME,
        "description": stack["description"],
        "version": stack["version"],
        "source": options.source,
        "lock_sha256": lock_sha256(text),
        "envbuild_template": base["template"],
        # The code, its install (with its version from git), the CMD.
        **project.template_values(lock.project, project_version),
        **builder_stage.template_values(lock, python),  # source packages: compile step
    }


def _stack_values(lock: Lock, default_name: str) -> dict[str, Any]:
    """The checked stack values: name, Python, OS, framework, CUDA and its requirement."""
    stack = lock.stack
    framework = stack.framework
    name = _check(
        _IMAGE_NAME,
        lock.name or default_name,
        "image name",
        "use letters, digits, '.', '_' or '-'",
    )
    python = _check(
        PYTHON_VERSION_RE if stack.managed_python is None else PYTHON_SPEC_RE,
        stack.python,
        "Python version",
        'write it as "3.12" (a managed Python also "3.14t")',
    )
    framework_base = stack.flavour == FRAMEWORK_FLAVOUR
    if framework_base and not stack.os:
        os_name = "an OS it does not name"  # the base has no /etc/os-release
    else:
        os_name = _check(
            OS_NAME_RE if framework_base else _OS,
            stack.os,
            "OS",
            "render supports Debian and Ubuntu bases (ubuntu24.04, debian12, ...)",
        )
    framework_name = check_package_name(framework.name, "framework")
    framework_version = check_version(framework.version, "framework version")
    variant = _check(
        _VARIANT, framework.variant, "framework variant", "use letters, digits, '.', '_', '-'"
    )
    if framework.index_url:  # rendered only when a package came from it; still checked
        check_url(framework.index_url, "framework index URL")
    gpu = lock.is_gpu
    require_cuda = ""
    cuda = ""
    if gpu:
        cuda = _check(_CUDA, stack.cuda, "CUDA version", "not a dotted version")
        require_cuda = _check(
            _REQUIRE_CUDA,
            stack.base_image.require_cuda,
            "NVIDIA_REQUIRE_CUDA",
            'not a constraint list like "cuda>=12.8" (the lock must carry one for a GPU image)',
        )
    what = f"{framework_name} {framework_version} ({variant})"
    if gpu:
        description = f"{what}, CUDA {cuda}, Python {python}, {os_name}"
    else:
        description = f"{what}, Python {python}, {os_name}"
    return {
        "name": name,
        "python": python,
        "gpu": gpu,
        "require_cuda": require_cuda,
        "description": description,
        "version": framework_version,
    }


MANAGED_PYTHON_DIR = "/opt/python"
"""Where the lock's uv installs a managed Python (`UV_PYTHON_INSTALL_DIR`), one folder per uv
key; the venv's interpreter links point into it."""
_UV_KEY = re.compile(
    r"cpython-3\.[0-9]{1,2}\.[0-9]{1,3}(\+freethreaded)?-linux-(x86_64|aarch64)-gnu"
)
_PBS_RELEASE = re.compile(r"[0-9]{8}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_PBS_PREFIX = "https://github.com/astral-sh/python-build-standalone/releases/download/"


def managed_python_values(lock: Lock) -> dict[str, str] | None:
    """The checked values of the lock's managed Python for the templates (None: the OS's):
    uv's key, the one-entry download list uv installs from (`--python-downloads-json-url`: uv
    then installs exactly this archive and checks this sha256, whatever its own list holds),
    and the interpreter the venv is made from. UserError (exit 2) for a value that is not one
    uv's metadata could hold, or a lock without the uv that installs it."""
    managed = lock.stack.managed_python
    if managed is None:
        return None
    key = _check(_UV_KEY, managed.uv_key, "managed Python's uv key", "not a uv CPython key")
    version = check_version(managed.version, "managed Python version")
    release = _check(_PBS_RELEASE, managed.release, "python-build-standalone release", "not a tag")
    sha256 = _check(_SHA256_HEX, managed.sha256, "managed Python's sha256", "not 64 hex digits")
    url = check_url(managed.url, "managed Python's URL")
    bootstrap = _check(PYTHON_VERSION_RE, managed.bootstrap_python, "bootstrap Python", "3.12")
    if not url.startswith(f"{_PBS_PREFIX}{release}/") or not key.startswith(f"cpython-{version}"):
        raise _refuse("managed Python", key, "its URL, release and version disagree", _FIX_LOCK)
    if not installer_requirement(lock):
        raise UserError(
            f"the lock's managed Python {lock.stack.python} needs the lock's uv to install it, "
            "and this lock has none"
            + (" (its source packages are built with pip)" if lock.build is not None else ""),
            hint="a managed Python works with wheel-only locks: drop compile_extensions, or "
            "choose a Python an OS image ships (envbuild resolve lists them); then re-lock",
        )
    minor = version.rsplit(".", 1)[0]
    threaded = "+freethreaded" in key
    arch, variant = key.split("-linux-")[1].split("-")[0], "freethreaded" if threaded else None
    entry = {
        "name": "cpython",
        "arch": {"family": arch, "variant": None},
        "os": "linux",
        "libc": "gnu",
        "major": 3,
        "minor": int(minor.split(".")[1]),
        "patch": int(version.rsplit(".", 1)[1]),
        "prerelease": "",
        "url": url,
        "sha256": sha256,
        "variant": variant,
        "build": release,
    }
    return {
        "key": key,
        "version": version,
        "release": release,
        "bootstrap_python": bootstrap,
        "downloads_json": json.dumps({key: entry}, sort_keys=True, separators=(",", ":")),
        "dir": MANAGED_PYTHON_DIR,
        "interpreter": f"{MANAGED_PYTHON_DIR}/{key}/bin/python{minor}{'t' if threaded else ''}",
    }


def _base_python(lock: Lock) -> str:
    """The interpreter of a framework base, checked (it lands in a RUN line); "" otherwise."""
    if lock.base_facts is None:
        return ""
    if not lock.base_facts.python_path:
        # Facts from a matrix row (matrix/ngc.toml), not a probe: the base's python3 on its PATH.
        return "python3"
    return _check(
        _BASE_PYTHON,
        lock.base_facts.python_path,
        "the base's Python",
        "an absolute path of letters, digits, '.', '_', '+', '-' and '/'",
    )


def _base_values(lock: Lock, options: RenderOptions) -> dict[str, Any]:
    """The base (and, for devel stacks, builder) image references, pinned by digest where
    the lock pins them, and the template that fits the stack."""
    stack = lock.stack
    locked_ref = check_image_ref(stack.base_image.ref)
    digest = check_digest(lock.base_digest) if lock.base_digest else None
    builder_ref = ""
    if _is_devel(lock):
        if stack.base_image.builder:
            # The resolver named the builder; the locked ref is the final stage's base.
            builder, final = check_image_ref(stack.base_image.builder, "builder image"), locked_ref
        else:
            builder, final = _devel_pair(locked_ref)
        builder_ref = _pin(builder, digest if builder == locked_ref else None)
        final_digest = digest if final == locked_ref else None
        base_ref = options.base_image or _pin(final, final_digest)
        if lock.build is not None and lock.build.toolchain in ("wheels", "none"):
            # nvcc comes from wheels, or nothing is compiled: the builder is the final base.
            builder_ref = base_ref
        template = DEVEL_TEMPLATE
    else:
        final_digest = digest
        base_ref = options.base_image or _pin(locked_ref, digest)
        template = FRAMEWORK_TEMPLATE if stack.flavour == FRAMEWORK_FLAVOUR else BASE_TEMPLATE
    if options.base_image is not None:
        final_digest = None
    return {
        "base_ref": base_ref,
        "builder_ref": builder_ref,
        "base_name": _strip_digest(base_ref),
        "base_digest": final_digest or (base_ref.split("@", 1)[1] if "@" in base_ref else None),
        "template": template,
    }


# --- rendering ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _environment(user_template: str | None) -> Any:
    """The render environment: the built-in templates, and the folder's Dockerfile.j2 source
    (already read) when there is one; sandboxed either way. Cached per template source, so the
    compiled templates are reused (`sandbox.generate` resets each render's loop budget)."""
    import jinja2

    builtin = jinja2.PrefixLoader(
        {BUILTIN_PREFIX: jinja2.FileSystemLoader(str(resources.templates_dir()))}
    )
    # Built-ins first: an image folder cannot shadow "envbuild/..." templates.
    loaders: list[jinja2.BaseLoader] = [builtin]
    if user_template is not None:
        loaders.append(jinja2.DictLoader({USER_TEMPLATE: user_template}))
    return sandbox.environment_class()(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Dockerfile text, not HTML; values are validated instead
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _user_template(template_dir: Path | None) -> str | None:
    """The folder's Dockerfile.j2 as text (read as an input file: no FIFO, no device, no
    folder, at most MAX_OUTPUT bytes), or None."""
    if template_dir is None:
        return None
    from envbuild.core.fsio import read_input

    path = template_dir / USER_TEMPLATE
    try:
        data = read_input(path, what="the template", limit=sandbox.MAX_OUTPUT)
    except FileNotFoundError:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"the template {path} is not UTF-8 (byte {exc.start})",
            hint=f"save {path} as UTF-8",
            fields={"template": str(path)},
        ) from None


def _tidy(text: str) -> str:
    """One blank line at most between instructions; exactly one newline at the end."""
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line and (not out or not out[-1]):
            continue
        out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


def render_dockerfile(
    lock: Lock,
    *,
    options: RenderOptions,
    template_dir: Path | None = None,
    lock_text: str | None = None,
    project_version: project.ProjectVersion | None = None,
) -> str:
    """The Dockerfile of a lock. `template_dir` is the image folder: a `Dockerfile.j2` there
    extends a built-in template. `lock_text` is the lock as written (its sha256 becomes a
    label); None = `lockfile.dumps(lock)`. `project_version`: the project's version from git
    (`envbuild.app.project_version`), when its build reads one."""
    import jinja2

    values = template_values(
        lock,
        options=options,
        lock_text=lock_text,
        default_name=template_dir.name if template_dir is not None else "",
        project_version=project_version,
    )
    user_template = _user_template(template_dir)
    env = _environment(user_template)
    entry = where = values["envbuild_template"]
    if user_template is not None and template_dir is not None:
        entry, where = USER_TEMPLATE, str(template_dir / USER_TEMPLATE)
    try:
        text = sandbox.generate(env.get_template(entry), values)
    except jinja2.exceptions.SecurityError as exc:
        raise UserError(
            f"template {where} does something the sandbox does not allow: {exc}",
            hint="a Dockerfile.j2 may use the values, blocks, loops and filters, but not "
            "Python internals, and renders at most 1 MiB with 100000 loop steps",
            fields={"template": where},
        ) from None
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise UserError(
            f"template {where} failed: {exc.message or type(exc).__name__}"
            + (f" (line {line})" if line else ""),
            hint="fix the template; it may `{% extends envbuild_template %}` and override blocks",
            fields={"template": where},
        ) from None
    except (MemoryError, RecursionError, OverflowError) as exc:
        raise UserError(
            f"template {where} does not render within the limits ({type(exc).__name__})",
            hint="a Dockerfile.j2 renders at most 1 MiB; check its loops and recursion",
            fields={"template": where},
        ) from None
    return _tidy(text)


# --- requirements, constraints, build context -----------------------------------------------


def _packages(lock: Lock) -> list[tuple[str, str, list[str]]]:
    rows = []
    for p in sorted(lock.packages, key=lambda p: p.name):
        name = check_package_name(p.name)
        version = check_version(p.version, f"version of {name}")
        hashes = sorted({check_hash(h, f"hash of {name}") for h in p.hashes})
        if not hashes:
            raise UserError(
                f"{name}=={version} has no hash in the lock; --require-hashes would refuse it",
                hint="run `envbuild lock <image dir>` again",
            )
        rows.append((name, version, hashes))
    return rows


def installer_requirement(lock: Lock) -> str:
    """`uv==X --hash=sha256:... --hash=...` for the lock's installer, checked like every pin;
    "" when the lock has none (pip installs the requirements itself) or the image compiles
    source packages (their builder runs pip: templates/devel.Dockerfile.j2)."""
    if len(lock.installer) != 1 or lock.build is not None:
        return ""
    (p,) = lock.installer
    name = check_package_name(p.name)
    version = check_version(p.version, f"version of {name}")
    hashes = sorted({check_hash(h, f"hash of {name}") for h in p.hashes})
    if not hashes:
        return ""
    return " ".join([f"{name}=={version}", *(f"--hash={h}" for h in hashes)])


def requirements_text(lock: Lock) -> str:
    """`name==version --hash=sha256:...` for every locked package (pip hash-checking mode); a
    direct-URL package as `name @ URL --hash=...` (its file, not an index, holds it)."""
    # The same flags for uv and pip, whichever the image installs with (macros.j2 `install`).
    lines = [f"# {lock.name}: installed with --require-hashes --no-deps (from envbuild.lock)"]
    direct = {
        p.name: check_url(p.source, f"URL of {p.name}")
        for p in lock.packages
        if is_remote(p.source) and is_direct_url(p.source)
    }
    built = builder_stage.source_names(lock)  # compiled by the builder stage instead
    for name, version, hashes in _packages(lock):
        if name in built:
            continue
        lines.append(f"{name} @ {direct[name]} \\" if name in direct else f"{name}=={version} \\")
        lines += [f"    --hash={h} \\" for h in hashes[:-1]]
        lines.append(f"    --hash={hashes[-1]}")
    return "\n".join(lines) + "\n"


def constraints_text(lock: Lock) -> str:
    """The lock's pins for PIP_CONSTRAINT: later installs keep these versions."""
    lines = [f"# {lock.name}: the pins of envbuild.lock; later pip installs must keep them"]
    lines += [f"{name}=={version}" for name, version, _ in _packages(lock)]
    if lock.base_facts is not None:
        # And what the framework base holds: nothing installed later replaces it.
        held = {name for name, _, _ in _packages(lock)}
        lines += [f"{n}=={v}" for n, v in _held(lock) if n not in held]
    return "\n".join(lines) + "\n"


def _held(lock: Lock) -> list[tuple[str, str]]:
    """The base's installed distributions whose names and versions are safe to write."""
    assert lock.base_facts is not None
    out = []
    for name, version in lock.base_facts.packages:
        try:
            out.append((check_package_name(name), check_version(version, f"version of {name}")))
        except UserError:
            continue  # not a PEP 440 release: pip could not hold it to a version anyway
    return out


def _payload_files() -> dict[str, bytes]:
    root = resources.payload_dir()
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or path.suffix == ".pyc" or not path.is_file():
            continue
        out[f"payload/{rel.as_posix()}"] = path.read_bytes()
    return out


def wheel_paths(folder: Path) -> dict[str, Path]:
    """The wheelhouse's files as the build context names them (`wheels/...`) -> their path."""
    return {
        f"{WHEELS_CONTEXT_DIR}/{path.relative_to(folder).as_posix()}": path
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _wheel_files(folder: Path) -> dict[str, bytes]:
    return {name: path.read_bytes() for name, path in wheel_paths(folder).items()}


def build_context(
    lock: Lock,
    lock_text: str,
    *,
    image_dir: Path,
    options: RenderOptions,
    matrix: Matrix,
    wheels: bool = True,
    dest: Path | None = None,
    project_version: project.ProjectVersion | None = None,
) -> dict[str, bytes]:
    """Every file the build sends (relative path -> bytes, "Dockerfile" at the root), sorted.
    `wheels=False`: all but the wheelhouse's files (`wheel_paths` names them; `envbuild
    image` reads them only when the engine builds).
    `matrix` feeds the smoke plan (its GPU baselines). `dest`: where the context is written,
    never part of the project's files. `project_version`: as `render_dockerfile` takes it."""
    _require_local_wheels(lock, options)
    files: dict[str, bytes] = {
        "Dockerfile": render_dockerfile(
            lock,
            options=options,
            template_dir=image_dir,
            lock_text=lock_text,
            project_version=project_version,
        ).encode("utf-8"),
        "requirements.lock": requirements_text(lock).encode("utf-8"),
        "constraints.txt": constraints_text(lock).encode("utf-8"),
        "envbuild.lock": lock_text.encode("utf-8"),
    }
    # A CPU image's smoke plan must allow the CPU; a GPU image's must not fall back to it.
    plan = smoke.plan(lock, allow_cpu=not lock.is_gpu, matrix=matrix)
    files["plan.json"] = (json.dumps(plan, sort_keys=True, indent=2) + "\n").encode("utf-8")
    files.update(_payload_files())
    if options.ca_cert is not None:
        files[CA_CONTEXT_PATH] = options.ca_cert
    if options.find_links is not None and wheels:
        files.update(_wheel_files(options.find_links))
    files.update(sourcetree.context_files(lock.project, image_dir, exclude=dest))
    files.update(builder_stage.context_files(lock))
    return dict(sorted(files.items()))


def _require_local_wheels(lock: Lock, options: RenderOptions) -> None:
    """Packages locked from a local wheel folder can only be installed from that folder: say so
    before the build instead of letting pip fail halfway through it."""
    local = sorted({p.source for p in lock.packages if not is_remote(p.source)})
    if local and options.find_links is None:
        names = ", ".join(sorted(p.name for p in lock.packages if p.source in local)[:5])
        raise UserError(
            f"{names} {'was' if ',' not in names else 'were'} locked from the local wheel "
            f"folder {local[0]!r}, which the build cannot reach on its own",
            hint=f"pass --find-links {local[0]} (hashes are still checked); `render "
            "--context` and `image` take that folder themselves when it is here",
            fields={"local_sources": local},
        )

"""Frozen value types shared by every layer, and the vocabularies of a request's settings
(glossary: docs/design.md).

Pure: no I/O, no imports beyond the standard library. Versions are kept as the strings the
sources print ("12.8.1", "570.124.06"); comparisons go through `envbuild.core.versions`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

CompatPolicy = Literal["minor", "strict"]
"""`minor`: allow CUDA minor-version compatibility (driver >= the major's MVC floor);
`strict`: require the toolkit's own driver minimum."""

Device = Literal["cuda", "cpu"]

DEVICES: tuple[Device, ...] = ("cuda", "cpu")
COMPAT_POLICIES: tuple[CompatPolicy, ...] = ("minor", "strict")

FrameworkIndexPolicy = Literal["auto", "pypi", "index"]
FRAMEWORK_INDEX_POLICIES: tuple[FrameworkIndexPolicy, ...] = ("auto", "pypi", "index")
"""`[indexes] framework_index`: where the framework build may come from. auto: the best build;
`lock` falls back to the newest that installs from an index that answers. pypi: only builds
that install from PyPI (or the configured index_url). index: the best build, from the
framework's own index when it has one (no fallback)."""

CUDA_FLAVOURS = ("base", "runtime", "cudnn", "devel")
"""The `nvidia/cuda` image flavours, smallest first (matrix/cuda_images.toml lists them)."""

FLAVOURS = ("auto", "plain", *CUDA_FLAVOURS, "cpu")
"""`plain`: a plain OS image, no CUDA base (CUDA comes from pip wheels);
`base`/`runtime`/`cudnn`/`devel`: the `nvidia/cuda` flavours; `cpu`: a CPU-only image;
`auto`: the smallest that works (the resolver decides and records why)."""

PLATFORMS = ("x86_64", "aarch64")
"""CPU architectures of an image, spelled as `uname -m` prints them."""
PLATFORM_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
"""Docker's and others' names for them: refused with the right name as the next step."""
ENGINE_PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
"""Each platform as a container engine names it (`docker build --platform`, `docker run
--platform`; the OCI image spec's `os`/`architecture`, GOARCH names: config.md)."""

PYTHON_VERSION_RE = re.compile(r"^3\.[0-9]{1,2}$")
"""A Python minor version as the matrix and a stack name it: "3.12"."""
PYTHON_SPEC_RE = re.compile(r"^3\.[0-9]{1,2}t?$")
"""A Python as a request names it: "3.12", or a free-threaded build "3.14t" (PEP 703; its
wheels carry the ABI tag cp314t, https://peps.python.org/pep-0703/#build-configuration-changes)."""


def free_threaded_minor(python: str | None) -> str | None:
    """ "3.14" for "3.14t"; None for a GIL Python or none."""
    if python is not None and python.endswith("t") and PYTHON_SPEC_RE.match(python):
        return python[:-1]
    return None


OS_NAME_RE = re.compile(r"^[a-z]+[0-9][0-9.]*$")
"""An OS name as the matrix spells it: "ubuntu24.04", "debian12"."""


@dataclass(frozen=True)
class Targets:
    """The hosts an image must run on: their GPUs and the oldest driver among them."""

    gpus: tuple[str, ...] = ()
    """As the user wrote them: names ("H100", "RTX 5090"), "sm_90", or "9.0"."""
    driver: str | None = None
    """The oldest driver on the target hosts ("535.104.05"); None = unknown."""


@dataclass(frozen=True)
class Indexes:
    """Where Python packages come from. None of these loosens hash checking."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    framework_index: FrameworkIndexPolicy = "auto"
    """Where the framework build may come from (FRAMEWORK_INDEX_POLICIES)."""
    credentials_removed: tuple[str, ...] = field(
        default=(), compare=False, metadata={"hashed": False}
    )
    """The keys whose URLs carried credentials (`user:token@`), removed when the request was
    read: envbuild never uses, records or prints them (not part of the request's hash)."""


@dataclass(frozen=True)
class SmokeSettings:
    """What the smoke payload runs and how long it may take."""

    tier: int = 2
    """1: seconds (visibility, versions, archs, floors); 2: + a short training run."""
    timeout_s: int = 600
    steps: int = 30
    min_shm_mib: int = 1024
    """Below this /dev/shm size DataLoader workers and NCCL fail ("Bus error")."""
    command: tuple[str, ...] = ()
    """The project's own smoke step (argv, no shell), run in the candidate after the payload
    passed; () = none."""


@dataclass(frozen=True)
class DependencyFiles:
    """`[packages] files`: a project's own dependency declarations, locked with the framework."""

    files: tuple[str, ...] = ()
    """Relative to the image folder: a `pyproject.toml`, `requirements*.txt`/`.in` files, a
    `uv.lock` (its pins kept)."""
    extras: tuple[str, ...] = ()
    """Optional-dependency extras of the pyproject.toml / uv.lock project."""
    groups: tuple[str, ...] = ()
    """Dependency groups (PEP 735) of the pyproject.toml / uv.lock project."""


@dataclass(frozen=True)
class ProjectSettings:
    """`[project]`: the user's code, copied into the image after the locked dependencies."""

    path: str = "."
    """The source folder, relative to the image folder (inside the repository)."""
    install: bool = True
    """Install it into the image's Python without dependencies (they are in the lock)."""
    command: tuple[str, ...] = ()
    """The image's CMD (argv); () = `python`."""
    ignore: tuple[str, ...] = ()
    """More `.dockerignore` patterns, after envbuild's own (.git, virtualenvs, caches, data)."""


@dataclass(frozen=True)
class Request:
    """What a user asks for: `images/<name>/envbuild.toml` (or `resolve` flags)."""

    framework: str
    """A requirement string: "torch", "torch==2.6.*", "jax", "tensorflow>=2.16"."""
    name: str = ""
    python: str | None = None
    """"3.12"; None = the newest the framework and OS allow."""
    os: str | None = None
    """"ubuntu24.04", "ubuntu22.04", "debian12"; None = the matrix default."""
    flavour: str = "auto"
    device: Device = "cuda"
    cuda: str | None = None
    """A specifier on the CUDA version: "12.8.*", ">=12.6"."""
    packages: tuple[str, ...] = ()
    """Extra Python requirements, locked with the framework."""
    targets: Targets = field(default_factory=Targets)
    indexes: Indexes = field(default_factory=Indexes)
    smoke: SmokeSettings = field(default_factory=SmokeSettings)
    compat: CompatPolicy = "minor"
    platform: str = "x86_64"
    """The CPU architecture of the image: "x86_64" or "aarch64"."""
    compile_extensions: bool = False
    """True when the image compiles CUDA extensions: a `devel` builder stage is rendered."""
    base: str | None = None
    """A framework base: an image that already holds the framework (an NGC framework
    container, a company base). Its Python, OS, CUDA and framework come from the base."""
    dependency_files: DependencyFiles = field(default_factory=DependencyFiles)
    """A project's own dependency files, locked with the framework and `packages`."""
    project: ProjectSettings | None = None
    """The user's code in the image; None = no code is copied."""


@dataclass(frozen=True)
class HostGpu:
    """One GPU of a host, as NVML (or the user) reports it."""

    name: str
    cc: str
    """Compute capability "9.0"."""
    memory_mib: int = 0
    index: int = 0
    uuid: str = ""
    brand: str = ""
    """NVML brand as the `brand=` token of NVIDIA_REQUIRE_* ("tesla", "nvidia"); "" unknown."""


@dataclass(frozen=True)
class Host:
    """One GPU machine: driver, the CUDA version its driver supports, its GPUs."""

    driver: str | None
    cuda_driver: str | None = None
    """The CUDA version the driver supports ("13.0"), from NVML."""
    gpus: tuple[HostGpu, ...] = ()
    name: str = ""


@dataclass(frozen=True)
class Floors:
    """The two driver minimums of a stack, and the one the image relies on."""

    toolkit: str
    """The toolkit's own minimum (full feature set, PTX JIT of its PTX)."""
    minor_compat: str | None
    """Minor-version compatibility minimum for the CUDA major; None where MVC does not exist."""
    relied_on: Literal["toolkit", "minor_compat"]

    @property
    def effective(self) -> str:
        """The floor the image actually needs on its hosts."""
        if self.relied_on == "minor_compat" and self.minor_compat is not None:
            return self.minor_compat
        return self.toolkit


@dataclass(frozen=True)
class FrameworkPick:
    """The framework release and build a stack installs."""

    name: str
    """"torch", "jax", "tensorflow"."""
    version: str
    """Exact release "2.7.1"."""
    variant: str
    """"cu128", "cpu", "cuda12", "and-cuda"."""
    requirement: str
    """What pip installs: "torch==2.7.1", "jax[cuda12]==0.6.2"."""
    index_url: str | None = None
    """The index the variant lives on; None = PyPI."""
    pypi_default: bool = True


@dataclass(frozen=True)
class BaseImage:
    """The image a stack builds on (and its builder stage, if any)."""

    ref: str
    """"nvidia/cuda:12.8.1-base-ubuntu24.04" or "debian:bookworm-slim"."""
    flavour: str
    os: str
    cudnn: str | None = None
    """cuDNN inside the image (cudnn/devel flavours), None otherwise."""
    require_cuda: str = ""
    """The `NVIDIA_REQUIRE_CUDA` value the rendered image carries ("" for CPU images)."""
    builder: str | None = None
    """The `nvidia/cuda:<v>-devel-<os>` builder stage when the request compiles CUDA
    extensions (`Request.compile_extensions`); None = no builder stage."""


@dataclass(frozen=True)
class ManagedPython:
    """A python-build-standalone CPython the image installs because no modelled OS image ships
    the requested Python (a matrix `python_builds.toml` row, copied into the lock): the lock's
    uv installs exactly this archive and checks its sha256 (docs/request.md, "Python")."""

    version: str
    """The CPython release: "3.14.7"."""
    uv_key: str
    """uv's download key: "cpython-3.14.7+freethreaded-linux-x86_64-gnu"."""
    release: str
    """The python-build-standalone release: "20260814"."""
    url: str
    sha256: str
    """The archive's sha256, hex."""
    bootstrap_python: str
    """The OS's own Python ("3.12") that runs pip once to install the lock's uv."""

    @property
    def free_threaded(self) -> bool:
        return "+freethreaded" in self.uv_key


@dataclass(frozen=True)
class Stack:
    """The chosen candidate: everything the image is made of, before Python pins."""

    framework: FrameworkPick
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    python: str
    os: str
    flavour: str
    base_image: BaseImage
    archs: tuple[str, ...]
    """What the framework build carries: cubins "sm_80" and PTX "compute_90", sorted."""
    target_archs: tuple[str, ...]
    """The targets' architectures "sm_70", "sm_120", sorted; empty = no GPU given."""
    floors: Floors | None
    """None for CPU stacks."""
    notes: tuple[str, ...] = ()
    rows: tuple[str, ...] = ()
    """Keys of the matrix rows the stack rests on; their fingerprints go into the input hash."""
    confidence: str = field(default="high", compare=False)
    """The lowest `confidence` of the matrix rows the pick rests on ("high", "medium", "low");
    "low" also when the release's variants are not all known."""
    confidence_notes: tuple[str, ...] = field(default=(), compare=False)
    """Why the confidence is not high: the rows (and gaps) it rests on."""
    cudnn_requirement: str | None = field(default=None, compare=False)
    """ "nvidia-cudnn-cu12==9.10.2.21" when the build pins cuDNN by a range whose newest
    release does not support every target: the lock must pin this one."""
    managed_python: ManagedPython | None = None
    """Where the image's Python comes from when its OS ships none that fits; None: the OS."""


@dataclass(frozen=True)
class Unsatisfiable:
    """Nothing fits: the chain of constraints that excluded the candidates, and ways out."""

    reasons: tuple[str, ...]
    alternatives: tuple[str, ...] = ()


@dataclass(frozen=True)
class LockedPackage:
    """One pinned distribution of a lock, with the hashes of every file pip may pick."""

    name: str
    """Normalised (PEP 503) project name."""
    version: str
    hashes: tuple[str, ...]
    """"sha256:<hex>" of every file pip may pick for the target, sorted."""
    source: str
    """The index URL it was resolved from."""
    sdist: bool = False
    """Locked from its source distribution (no wheel fits the image): `hashes` are the sdist's
    and the image's builder stage compiles it (`Lock.build`)."""
    build_requires: tuple[str, ...] = ()
    """An sdist's `[build-system] requires` as its pyproject.toml states them (PEP 518)."""
    pure: bool = False
    """An sdist with no compiled code (no C/C++/CUDA/Cython sources, no extension modules, a
    pure-Python build backend: `envbuild.cuda.extensions.sdist_metadata`): the builder stage
    only turns it into a wheel, with no compiler and no target GPUs."""


@dataclass(frozen=True)
class ExtensionBuild:
    """How the builder stage compiles the lock's source packages (`LockedPackage.sdist`)."""

    toolchain: str
    """ "devel": nvcc of the builder image (`BaseImage.builder`); "wheels": NVIDIA's CUDA
    toolkit wheels from PyPI (`toolchain_packages`), installed in the builder only; "none":
    no compiler, every source package is pure Python (a plain builder stage FROM the image's
    own base builds their wheels; `cuda_archs` is empty)."""
    cuda_archs: tuple[str, ...]
    """What nvcc compiles: a cubin per target ("sm_89", "sm_90") and, where the framework
    build carries PTX, PTX of the newest target ("compute_90"), sorted."""
    toolchain_packages: tuple[str, ...] = ()
    """Names (in `Lock.packages` or `packages` here) installed as the toolchain, sorted."""
    packages: tuple[LockedPackage, ...] = ()
    """Builder-only pins: the toolchain and the sdists' build requirements that the image
    itself does not hold, with hashes like every other package."""


LOCK_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Lock:
    """`envbuild.lock`: the stack pinned with everything needed to rebuild it."""

    name: str
    input_hash: str
    """sha256 over the request and the fingerprints of the matrix rows the stack used."""
    stack: Stack
    targets: Targets
    platform: str
    indexes: Indexes
    smoke: SmokeSettings
    base_digest: str | None
    """"sha256:..." of the base image; None = unpinned (no registry was reachable)."""
    packages: tuple[LockedPackage, ...]
    compat: CompatPolicy = "minor"
    schema_version: int = LOCK_SCHEMA_VERSION
    request_hash: str = ""
    """sha256 of the canonical request alone (lets `lock --check` say *what* changed)."""
    row_fingerprints: tuple[tuple[str, str], ...] = ()
    """(row key, fingerprint) of every row in `stack.rows`, sorted by key, as locked."""
    base_facts: BaseFacts | None = None
    """What a framework base holds (`Request.base`); None for stacks envbuild installs."""
    project: ProjectSettings | None = None
    """The user's code in the image (`Request.project`), as locked."""
    input_files: tuple[tuple[str, str], ...] = ()
    """(path relative to the image folder, sha256) of each project file the lock read
    (`[packages] files` and what they include); `lock --check` re-hashes them."""
    build: ExtensionBuild | None = None
    """How source packages are compiled; None when every package is a wheel."""
    installer: tuple[LockedPackage, ...] = ()
    """The installer the image build runs and does not keep (uv, pinned with its hashes like
    every package: pip installs it hash-checked, then it installs `packages`); empty: pip
    installs `packages` itself (a lock made before envbuild pinned one)."""

    @property
    def is_gpu(self) -> bool:
        """The one rule for "a GPU image": its stack has CUDA and is not a CPU flavour. A GPU
        image carries the toolkit variables and its smoke test needs a GPU (or --allow-cpu);
        a CPU image's runs the CPU path without the flag."""
        return self.stack.flavour != "cpu" and self.stack.cuda is not None


FRAMEWORK_FLAVOUR = "framework"
"""`Stack.flavour` of a framework base: the base holds the framework, envbuild adds the rest."""


@dataclass(frozen=True)
class BaseFacts:
    """What a framework base image holds, read by a probe container or from a matrix row."""

    source: str
    """"probe" (read from the image through the engine) or the matrix row key."""
    framework: str
    framework_version: str
    """Exactly as the framework prints it: "2.11.0+cu130", "2.10.0a0+b4e4ee81d3"."""
    cuda: str | None
    """The CUDA the framework was built with ("13.0"); None for a CPU build."""
    cudnn: str | None
    nccl: str | None
    archs: tuple[str, ...]
    """What the framework build carries ("sm_90", "compute_90"), sorted."""
    python: str
    """ "3.12"."""
    python_path: str
    """The interpreter that holds the framework, inside the image ("/usr/bin/python3")."""
    os: str
    """ "ubuntu24.04", "debian12"; "" when the image does not say."""
    image_id: str = ""
    """The engine's id of the probed image ("sha256:..."); "" for a matrix row."""
    has_pip: bool = True
    packages: tuple[tuple[str, str], ...] = ()
    """(normalised name, version) of every distribution the base's Python has installed."""

"""Import a base image that holds this machine's own Python and torch: a stand-in for an NGC
framework container where no registry is reachable (tests/gpu/h200_image_e2e.sh).

The image is this machine's /usr (its shell, libc and tools, minus what a GPU container gets
from the host: the driver's libraries, CUDA toolkits, docs), the interpreter the running
Python is based on, and, when it runs in a venv, that venv with only the distributions torch
needs (and pip, numpy). `PATH` starts with the venv's bin/, as a company base would set it.

    python3 tests/gpu/make_torch_base.py TAG            # run with the Python that holds torch
    python3 tests/gpu/make_torch_base.py --devel TAG    # + the CUDA toolkit and the compiler

`--devel` makes a devel framework base, as NGC's PyTorch containers are: the machine's CUDA
toolkit (/usr/local/cuda: nvcc, the headers, libcudart; not its other libraries, profilers or
docs), the host compiler (gcc/g++ and their headers) and DEVEL_ROOTS in the venv, so a torch
extension compiles in it (tests/gpu/h200_image_e2e.py).
Needs the docker CLI and an engine (DOCKER_HOST). Prints the image id and what went in.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import time
from importlib import metadata
from pathlib import Path
from typing import IO

ROOTS = ("torch", "pip", "numpy")
# What NGC's PyTorch containers hold beside torch and an extension build or the example
# project (images/torch-project) needs: setuptools, ninja and wheel to compile, tqdm to train.
DEVEL_ROOTS = ("setuptools", "ninja", "wheel", "tqdm")
# In a devel base: the toolkit and the compiler stay; these parts of the toolkit do not (an
# extension build needs nvcc, its headers and the CUDA runtime, not the math libraries,
# profilers or samples).
DEVEL_KEEP = (
    "/usr/local/cuda",
    "/usr/include",
    "/usr/local/include",
    "/usr/lib/gcc",
    "/usr/libexec/gcc",
)
CUDA_SKIP_DIR = re.compile(
    r"^(nsight|libnvvp|compute-sanitizer|gds|extras|doc|share|tools|samples|src)"
)
CUDA_KEEP_LIB = re.compile(r"^lib(cudart|cudadevrt|culibos|nvrtc|nvptxcompiler|nvJitLink)[._]")
SKIP_USR = (
    # What a GPU container gets from the host, or a framework base does not need: toolkits,
    # compilers, headers, other languages' runtimes, documentation.
    "/usr/local/cuda",
    "/usr/local/nvidia",
    "/usr/share/doc",
    "/usr/share/man",
    "/usr/share/info",
    "/usr/share/locale",
    "/usr/share/icons",
    "/usr/src",
    "/usr/include",
    "/usr/local/include",
    "/usr/lib/gcc",
    "/usr/libexec/gcc",
    "/usr/lib/llvm-",
    "/usr/lib/jvm",
    "/usr/lib/debug",
    "/usr/lib/node_modules",
    "/usr/local/lib/node_modules",
    "/usr/lib/google-cloud-sdk",
    "/usr/lib/postgresql",
    "/usr/share/package-lists",
    "/opt/nvidia",
)
# The driver's user-space libraries come from the host at run time (CDI spec, toolkit); the
# CUDA libraries a system package manager put in /usr are not what torch loads (its nvidia-*
# wheels carry its own), so they stay out too.
DRIVER_LIB = re.compile(
    r"lib(cuda|nvidia-|nvcuvid|cudadebugger|cudnn|nccl|cublas|cufft|cusparse|cusolver|curand"
    r"|nvinfer|nvonnxparser|npp|nvjpeg|cupti|nvrtc|cudart|nvToolsExt|cufile|nvjitlink)[^/]*\.so"
)
ETC = (
    "passwd",
    "group",
    "shadow",
    "gshadow",
    "nsswitch.conf",
    "hosts",
    "login.defs",
    "ld.so.conf",
    "ld.so.conf.d",
    "ld.so.cache",
    "ssl",
    "os-release",
    "skel",
    "default",
    "alternatives",
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def closure(roots: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions `roots` need, by their metadata: markers evaluated here,
    extras followed (torch's CUDA 13 wheels name `cuda-toolkit[cublas,...]`, whose extras
    bring the nvidia-* libraries)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    # Only this interpreter's own site-packages: PYTHONPATH may put other copies first.
    paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    seen: dict[str, metadata.Distribution] = {}
    extras_done: dict[str, set[str]] = {}
    todo: list[tuple[str, frozenset[str]]] = [(r, frozenset()) for r in roots]
    while todo:
        raw, extras = todo.pop()
        name = str(canonicalize_name(raw))
        wanted = {"", *extras}
        if name in seen and wanted <= extras_done[name]:
            continue
        found = list(metadata.Distribution.discover(name=name, path=paths))
        if not found:
            continue
        dist = seen.setdefault(name, found[0])
        new = wanted - extras_done.get(name, set())
        extras_done.setdefault(name, set()).update(wanted)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in new):
                todo.append((req.name, frozenset(req.extras)))
    return list(seen.values())


DEVEL = False


TOOLKITS: list[str] = ["/usr/local/cuda"]
"""Where the toolkit is: /usr/local/cuda*, and the folder it links to when that is elsewhere."""


def skip(path: str) -> bool:
    if DEVEL:
        root = next((t for t in TOOLKITS if path.startswith(t)), None)
        if root is not None:
            return _skip_toolkit(path, root)
        if path.startswith(DEVEL_KEEP):
            return False
    return path.startswith(SKIP_USR) or bool(DRIVER_LIB.search(os.path.basename(path)))


def _skip_toolkit(path: str, root: str) -> bool:
    """Inside the toolkit: profilers, samples and docs out; of its libraries only the
    runtime and compiler ones (an extension links libcudart; the math libraries come from
    torch's own wheels), never the driver's libcuda (the host's, at run time)."""
    parts = path.split("/")
    inner = path[len(root) :].split("/")[1:]
    if any(CUDA_SKIP_DIR.match(p) for p in inner):
        return "/include/" not in path and not path.endswith("/include")
    name = parts[-1]
    if name.startswith("libcuda.so"):
        return True
    if name.startswith("lib") and (".so" in name or name.endswith(".a")):
        return not CUDA_KEEP_LIB.match(name)
    return False


class Rootfs:
    """A tar stream of a root file system; each path goes in once, parents before children."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.added: set[str] = set()

    def add(self, path: str, *, traversable: bool = False) -> None:
        """`traversable`: a folder on the way to the Python, opened (0755) for the image's
        non-root user, whatever its mode here (pyenv lives in /root, 0700)."""
        if path in self.added:
            return
        parent = os.path.dirname(path)
        if parent not in ("/", "") and parent not in self.added:
            self.add(parent, traversable=traversable)
        self.added.add(path)
        info = self.tar.gettarinfo(path, arcname=path.lstrip("/"))
        if info is None:  # a socket or door: nothing an image needs
            return
        if traversable and info.isdir():
            info.mode |= 0o755
        if info.isreg():
            with open(path, "rb") as f:
                self.tar.addfile(info, f)
        else:
            self.tar.addfile(info)

    def tree(self, top: str, *, filtered: bool = True) -> None:
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not (filtered and skip(os.path.join(root, d)))]
            self.add(root)
            for d in dirs:  # symlinks to folders are not walked: add them as links
                if os.path.islink(os.path.join(root, d)):
                    self.add(os.path.join(root, d))
            for f in files:
                path = os.path.join(root, f)
                if not (filtered and skip(path)) and (os.path.islink(path) or os.path.isfile(path)):
                    self.add(path)

    def empty_dir(self, name: str, mode: int = 0o755) -> None:
        if "/" + name in self.added:
            return
        info = tarfile.TarInfo(name)
        info.type = tarfile.DIRTYPE
        info.mode = mode
        self.tar.addfile(info)
        self.added.add("/" + name)


def write_rootfs(stream: IO[bytes], venv: Path | None) -> dict[str, object]:
    counted: dict[str, object] = {}
    with tarfile.open(fileobj=stream, mode="w|") as tar:
        fs = Rootfs(tar)
        for top in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink("/" + top):
                fs.add("/" + top)
            elif os.path.isdir("/" + top):
                fs.tree("/" + top)
        fs.tree("/usr")
        if DEVEL:
            for extra in TOOLKITS[1:]:  # a toolkit outside /usr that /usr/local/cuda links to
                fs.add(extra, traversable=True)
                fs.tree(extra)
        fs.empty_dir("etc")
        for name in ETC:
            if os.path.lexists("/etc/" + name):
                if os.path.isdir("/etc/" + name) and not os.path.islink("/etc/" + name):
                    fs.tree("/etc/" + name, filtered=False)
                else:
                    fs.add("/etc/" + name)
        # The Python first: the folders on its way are opened for the non-root user.
        if not sys.base_prefix.startswith("/usr"):
            fs.add(sys.base_prefix, traversable=True)
            fs.tree(sys.base_prefix, filtered=False)
        if venv is not None:
            fs.add(str(venv), traversable=True)
            add_venv(fs, venv, counted)
        for name, mode in (("tmp", 0o1777), ("var/tmp", 0o1777), ("root", 0o700)):
            if name == "var/tmp":
                fs.empty_dir("var")
            fs.empty_dir(name, mode)
        for name in ("home", "run", "proc", "sys", "dev", "opt"):
            fs.empty_dir(name)
        counted["entries"] = len(fs.added)
    return counted


def add_venv(fs: Rootfs, venv: Path, counted: dict[str, object]) -> None:
    """The venv's own files and the files of the distributions torch needs, nothing else, each
    module with its byte-code (`byte_compile`)."""
    fs.add(str(venv / "pyvenv.cfg"))
    fs.tree(str(venv / "bin"), filtered=False)
    if os.path.islink(venv / "lib64"):
        fs.add(str(venv / "lib64"))
    dists = closure(ROOTS + (DEVEL_ROOTS if DEVEL else ()))
    compiled = byte_compile(venv)
    pycs = 0
    for dist in dists:
        for rel in dist.files or []:
            path = os.path.normpath(str(dist.locate_file(rel)))
            if os.path.isfile(path) and path.startswith(str(venv)):
                fs.add(path)
                cached = importlib.util.cache_from_source(path) if path.endswith(".py") else ""
                if cached and os.path.isfile(cached):
                    fs.add(cached)
                    pycs += 1
    counted["distributions"] = sorted(f"{d.metadata['Name']}=={d.version}" for d in dists)
    counted["byte_compile"] = {**compiled, "pyc_files": pycs}


def byte_compile(venv: Path) -> dict[str, object]:
    """Compile the venv's modules where they have no byte-code yet, as pip does when it installs
    a wheel (https://pip.pypa.io/en/stable/cli/pip_install/#cmdoption-no-compile: "Compile
    Python source files to bytecode" is the default). The device's torch venv has none and runs
    with PYTHONDONTWRITEBYTECODE=1: a base made from it as it is compiled `import torch` and,
    at the first torch.optim use, torch._dynamo and sympy from source in every container, about
    10 s a run on the H100 (benchmarks/results/h100-train-probe.md), which an image built by pip
    never pays and which drowned envbuild's own steps in the H200 bench."""
    import compileall

    started = time.monotonic()
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    site = sorted(p for p in paths if p.startswith(str(venv)))
    ok = all(compileall.compile_dir(top, quiet=2, workers=os.cpu_count() or 1) for top in site)
    return {"seconds": round(time.monotonic() - started, 1), "all_compiled": bool(ok)}


def main() -> int:
    global DEVEL
    args = sys.argv[1:]
    DEVEL = "--devel" in args
    for link in ("/usr/local/cuda", "/usr/local/cuda/bin/nvcc"):
        real = os.path.realpath(link)
        top = real if link == "/usr/local/cuda" else os.path.dirname(os.path.dirname(real))
        if os.path.exists(real) and not top.startswith("/usr/") and top not in TOOLKITS:
            TOOLKITS.append(top)
    tag = next(a for a in args if a != "--devel")
    venv = Path(sys.prefix) if sys.prefix != sys.base_prefix else None
    bin_dir = str(venv / "bin") if venv else os.path.dirname(sys.executable)
    started = time.monotonic()
    changes = ["--change", f"ENV PATH={bin_dir}:{DEFAULT_PATH}"]
    if DEVEL:
        changes = ["--change", f"ENV PATH={bin_dir}:{DEFAULT_PATH}:/usr/local/cuda/bin"]
        changes += ["--change", "ENV CUDA_HOME=/usr/local/cuda"]
    proc = subprocess.Popen(
        ["docker", "import", *changes, "-", tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None
    counted = write_rootfs(proc.stdin, venv)
    proc.stdin.close()
    image_id = proc.stdout.read().decode().strip() if proc.stdout else ""
    if proc.wait() != 0:
        print(f"docker import failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    size = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        json.dumps(
            {
                "tag": tag,
                "image_id": image_id,
                "python": sys.executable,
                "venv": str(venv) if venv else None,
                "site": sysconfig.get_paths()["purelib"],
                "devel": DEVEL,
                "toolkits": TOOLKITS if DEVEL else [],
                "bytes": int(size) if size.isdigit() else None,
                "seconds": round(time.monotonic() - started, 1),
                **counted,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

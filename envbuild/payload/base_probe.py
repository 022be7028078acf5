"""What a framework base image holds, printed as one JSON line after ENVBUILD-BASE-FACTS.

Run by `envbuild lock` inside the base (`python3 -c <this file's text> <framework>`, no GPU,
no network): the standard library and the framework only, any Python >= 3.7 (`from __future__ import annotations`). It reports the
Python that holds the framework (the one on the image's PATH), the OS, every installed
distribution, and the framework's version, CUDA, cuDNN, NCCL and compiled architectures.
envbuild/resolver/base.py reads the line.
"""

from __future__ import annotations

import contextlib
import json
import platform
import sys
from typing import Any

MARKER = "ENVBUILD-BASE-FACTS "


def os_name() -> str:
    """ "ubuntu24.04", "debian12" from /etc/os-release; "" when it does not say."""
    fields: dict[str, str] = {}
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                fields[key] = value.strip().strip('"')
    except OSError:
        return ""
    ident, version = fields.get("ID", ""), fields.get("VERSION_ID", "")
    return ident + version if ident and version else ""


def distributions() -> dict[str, str]:
    from importlib import metadata

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name.lower().replace("_", "-").replace(".", "-")] = dist.version
    return found


def cudnn_text(n: int | None) -> str | None:
    # cuDNN 9: major*10000 + minor*100 + patch; 8 and older: major*1000 + minor*100 + patch.
    if not n:
        return None
    if n >= 90000:
        return f"{n // 10000}.{(n % 10000) // 100}.{n % 100}"
    return f"{n // 1000}.{(n % 1000) // 100}.{n % 100}"


def torch_facts() -> dict[str, Any]:
    import torch

    cuda = torch.version.cuda
    out: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": cuda,
        "cudnn": None,
        "nccl": None,
        "archs": [],
    }
    if cuda:
        # A library that does not load is a fact (None), not a crash.
        with contextlib.suppress(Exception):
            out["cudnn"] = cudnn_text(torch.backends.cudnn.version())
        with contextlib.suppress(Exception):
            out["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        # The compiled arch list; torch.cuda.get_arch_list() needs a GPU, this does not.
        flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
        out["archs"] = sorted(set((flags or "").split()))
    return out


def tensorflow_facts() -> dict[str, Any]:
    import tensorflow as tf

    info = dict(tf.sysconfig.get_build_info())
    archs = []
    for cc in str(info.get("cuda_compute_capabilities") or "").replace(",", " ").split():
        digits = cc.replace("sm_", "").replace("compute_", "").replace(".", "")
        archs.append(("compute_" if cc.startswith("compute_") else "sm_") + digits)
    return {
        "version": tf.__version__,
        "cuda": info.get("cuda_version") or None,
        "cudnn": info.get("cudnn_version") or None,
        "nccl": None,
        "archs": sorted(set(archs)),
    }


def jax_facts() -> dict[str, Any]:
    import jax

    plugins = [n for n in distributions() if n.startswith("jax-cuda") and n.endswith("-plugin")]
    cuda = plugins[0][len("jax-cuda") : -len("-plugin")] if plugins else None
    return {"version": jax.__version__, "cuda": cuda, "cudnn": None, "nccl": None, "archs": []}


def main() -> None:
    framework = sys.argv[1] if len(sys.argv) > 1 else "torch"
    readers: dict[str, Any] = {
        "torch": torch_facts,
        "tensorflow": tensorflow_facts,
        "jax": jax_facts,
    }
    facts: dict[str, Any] = {
        "schema": 1,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "python_path": sys.executable,
        "machine": platform.machine(),
        "os": os_name(),
        "packages": distributions(),
        "framework": framework,
        "error": None,
    }
    import importlib.util

    facts["has_pip"] = importlib.util.find_spec("pip") is not None
    try:
        facts.update(readers[framework]())
    except Exception as exc:  # reported to the lock, which says what to do
        facts["error"] = f"{type(exc).__name__}: {exc}"
    sys.stdout.write(MARKER + json.dumps(facts, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

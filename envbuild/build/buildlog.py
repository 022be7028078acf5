"""Reading build logs (pure): pip's `--require-hashes` refusal, explained in the lock's terms.

The engines put each failed step's output into the BuildError's fields; `build.py` asks this
module whether that output is a hash mismatch and, if so, says what usually causes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def hash_mismatch_message(name: str, version: str, expected: Sequence[str], got: str) -> str:
    """What to say when a downloaded file's hash is not in the lock.

    Not only tampering: indexes re-upload files under the same version. The PyTorch index has
    replaced wheels in place repeatedly, and torch 2.10.0 on PyPI itself has re-uploaded build-tag
    wheels (-2, -3) (https://pypi.org/project/torch/2.10.0/#files). Re-locking takes the index's current hashes.
    """
    return (
        f"{name}=={version}: downloaded file has {got}, which is not one of the "
        f"{len(expected)} hash(es) in the lock. The package index may have re-uploaded the "
        "file under the same version (the PyTorch index has done so repeatedly), or the file "
        "was altered on the way; re-lock with `envbuild lock --upgrade-package "
        f"{name} DIR` after checking the index's release history"
    )


# pip's --require-hashes report (pip/_internal/operations/prepare.py, HashMismatch): a header,
# then per file "    NAME==VERSION from URL ...:", "Expected sha256 HEX" (more allowed hashes
# follow as "Expected     or HEX"), "Got        HEX".
_PIP_MISMATCH_HEADER = "THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE"
_PIP_MISMATCH_REQ = re.compile(r"^\s+([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s]+) from ")
_PIP_MISMATCH_EXPECTED = re.compile(r"^\s+Expected\s+(?:sha256|or)\s+([0-9a-f]{64})\s*$")
_PIP_MISMATCH_GOT = re.compile(r"^\s+Got\s+([0-9a-f]{64})\s*$")


def pip_hash_mismatch_message(log: str) -> str | None:
    """The lock's explanation (hash_mismatch_message) for each file pip refused in a build's
    output, or None when the output has no pip hash mismatch (pure; for the engine's
    build-error mapping)."""
    if _PIP_MISMATCH_HEADER not in log:
        return None
    found: list[str] = []
    name = version = ""
    expected: list[str] = []
    for line in log.splitlines():
        if m := _PIP_MISMATCH_REQ.match(line):
            name, version, expected = m.group(1), m.group(2), []
        elif (m := _PIP_MISMATCH_EXPECTED.match(line)) and name:
            expected.append(f"sha256:{m.group(1)}")
        elif (m := _PIP_MISMATCH_GOT.match(line)) and name:
            found.append(hash_mismatch_message(name, version, expected, f"sha256:{m.group(1)}"))
            name = ""
    if not found:
        return (
            "pip refused a downloaded file whose hash is not in the lock (THESE PACKAGES DO "
            "NOT MATCH THE HASHES); the package index may have re-uploaded it under the same "
            "version, or it was altered on the way; re-lock after checking the index"
        )
    return "; ".join(found)


# The last line templates/build-extensions.sh prints when a source package fails to compile.
_COMPILE_FAILED = re.compile(
    r"envbuild-compile-failed package=(?P<name>\S+) arch_list='(?P<archs>[^']*)' "
    r"max_jobs=(?P<jobs>\d+) mem_available_mib=(?P<mem>\d+) gpu_probe=(?P<gpu>yes|no) "
    r"out_of_memory=(?P<oom>yes|no)"
)


def compile_failure(log: str) -> tuple[str, str] | None:
    """(message, hint) for a source package that failed to compile in the builder stage
    (the compiler's last lines, the arch list and the memory it had), or None (pure)."""
    lines = log.splitlines()
    index = next(
        (i for i in range(len(lines) - 1, -1, -1) if _COMPILE_FAILED.search(lines[i])), None
    )
    if index is None:
        return None
    m = _COMPILE_FAILED.search(lines[index])
    assert m is not None
    name, jobs, mem = m.group("name"), m.group("jobs"), int(m.group("mem"))
    start = next(
        (i + 1 for i in range(index - 1, -1, -1) if lines[i].startswith("---- last lines")), 0
    )
    tail = "\n".join(line for line in lines[start:index] if line.strip())
    message = (
        f"compiling {name} failed in the builder stage (TORCH_CUDA_ARCH_LIST="
        f"'{m.group('archs')}', MAX_JOBS={jobs}, {mem / 1024:.1f} GiB available); its last "
        f"lines:\n{tail}"
    )
    if m.group("gpu") == "yes":
        hint = (
            f"{name} needs a GPU at build time (it queries the GPU or the driver while it "
            "builds), and image builds have none: build its wheel on a GPU machine and put it "
            "in a find_links folder, or patch its setup.py to honour TORCH_CUDA_ARCH_LIST"
        )
    elif m.group("oom") == "yes":
        hint = (
            f"the compiler ran out of memory with MAX_JOBS={jobs}: give the build more memory "
            "(Docker Desktop's VM, the runner), or raise ENVBUILD_GIB_PER_JOB in the builder "
            "(a Dockerfile.j2 block) so fewer jobs run at once"
        )
    else:
        hint = (
            "read the compiler's lines above: a missing header or library usually means the "
            "package needs another build requirement or a CUDA component the toolchain lacks"
        )
    return message, hint

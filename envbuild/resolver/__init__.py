"""The pure resolver: request + matrix + hosts -> the stack that runs, or why nothing does.

No I/O: everything comes in through the arguments (the shape of sarugaku/resolvelib, whose
failures carry their causes). Deterministic: the same inputs give the same answer and the same
explanation, byte for byte.

Candidates and preference (first fit wins)
------------------------------------------
A candidate is (framework release, framework build = CUDA/CPU variant, OS). They are tried in
this order:

1. newest framework release first (within the requirement's specifier; yanked releases only
   when pinned with ``==``);
2. within a release, the build with the newest CUDA that fits; when two builds have the same
   CUDA, the PyPI-default variant first (it installs from PyPI without an extra index, which is
   also what most users test against), then the variant name;
   Builds that install only from the framework's own index are left out under ``[indexes]
   framework_index = "pypi"`` and, under ``"auto"``, when that index does not answer
   (`resolve(unreachable=...)`, what `envbuild lock` probed).
3. then the OS: the one asked for (or the ones that ship the Python asked for); for GPU stacks
   whose flavour is auto or an nvidia/cuda flavour, OSes that have that ``nvidia/cuda`` image
   for the build's CUDA first; then the matrix default, then the newest OS Python, the name.

Rules (each with its public source; the design decisions: docs/design.md "Decisions")
------------------------------------------------------------------------------------
- Kernel coverage (CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility";
  ptxas 13.x help text): a cubin ``sm_XY`` runs on a GPU of the same
  major and minor >= Y (sm_80 runs on 8.6 and 8.9; sm_90 does not run on 10.0 or 12.0); an
  arch-specific cubin/PTX ``sm_XYa`` runs only on exactly X.Y; a family cubin ``sm_XYf`` on the
  same major with minor >= Y; PTX ``compute_XY`` is JIT-compiled by the driver for any GPU with
  compute capability >= X.Y. Tegra (Jetson) GPUs have no cubin compatibility across minors,
  nor with desktop cubins (same guide); a renamed arch (Thor sm_101 -> sm_110 in CUDA 13.0) is
  reached by builds for either name. The rule itself is envbuild/cuda/archs.py, shared with
  `envbuild validate`.
- Driver floors (CUDA release notes, Table 3 "Toolkit Driver Version"; CUDA Compatibility guide,
  "Minor Version Compatibility"): every CUDA release has the toolkit's own floor and, from CUDA 11
  on, the minor-version-compatibility (MVC) floor of its major (11.x >= 450.80.02, 12.x >=
  525.60.13, 13.x >= 580). Policy ``minor`` (default) accepts the MVC floor and records it
  (``Floors.relied_on``); policy ``strict`` needs the toolkit floor.
- MVC does not cover JIT of PTX newer than the driver (same guide): a target GPU that a build
  reaches only through PTX needs the toolkit floor of the build's CUDA.
- A GPU needs a driver that knows it: support for a new architecture arrives with the driver
  branch of the first CUDA release that can target it (e.g. Blackwell sm_120 with CUDA 12.8 and
  R570; H100 with R520, NVIDIA AI Enterprise 2.3 release notes: "Support for the NVIDIA H100
  GPU", driver 520.61.05). Inferred from Table 3 plus the arch rows' ``first_cuda``; compared
  by branch number only. When every target GPU needs a newer branch than the oldest driver it
  is a hard limit; otherwise (a mixed fleet whose oldest driver may sit on hosts with older
  GPUs) it is a note.
- cuDNN releases with a minimum compute capability exclude builds for older GPUs (cuDNN support
  matrices; e.g. cuDNN 9.17 is 7.5..12.0 only).
- Python: the framework release's and the build's Python ranges (wheel tags on PyPI); the image's
  Python is the one its OS ships (os_images rows), so a Python no OS ships is not available.
- Base image (docs/design.md, "The smallest base that works"): ``auto`` = ``nvidia/cuda:<cuda>-base-<os>`` for pip-wheel stacks,
  else the plain OS image (CUDA then comes from the wheels); runtime/cudnn/devel only when asked
  (they duplicate the wheels' libraries, about 2.3 GB, docs/design.md); a ``devel`` builder image when
  the request compiles CUDA extensions. ``NVIDIA_REQUIRE_CUDA`` asks for the CUDA version the
  relied-on floor driver supports (an MVC image must not demand more than it needs), plus the
  published ``brand=`` forward-compatibility clauses of the nvidia/cuda image it starts from.

Explanations
------------
``Unsatisfiable.reasons``: request-wide causes first (a driver that cannot run the GPUs, a
Python no OS ships), then per release, newest first, what excluded each build (kernels, driver
floors, CUDA range, Python, images); a GPU that no build of a release reaches is said once, with
where the framework first/last has it. Releases with the same reasons are merged.
``alternatives``: each way out is checked by resolving the changed request: the nearest other
framework version, the lowest driver that would work (and what the newest release needs),
dropping ``--strict-compat``, dropping one GPU from the image, dropping --python/--os/--cuda/
--flavour/the variant extra, allowing the framework's own index (``[indexes]
framework_index``). For a CPU request no CUDA range is ever suggested. ``Stack.notes``: what the stack relies on and why nothing newer.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from envbuild.core.models import Host, Request, Stack, Unsatisfiable
from envbuild.cuda.archs import sort_archs
from envbuild.matrix import Matrix
from envbuild.resolver.explain import (
    MAX_REASON_LINES,
    _alternatives,
    _index_reasons,
    _reason_lines,
)
from envbuild.resolver.gpus import parse_gpu
from envbuild.resolver.output import result_to_json, result_to_text
from envbuild.resolver.prepare import _prepare
from envbuild.resolver.search import _search
from envbuild.resolver.stack import _stack

__all__ = [
    "MAX_REASON_LINES",
    "parse_gpu",
    "resolve",
    "result_to_json",
    "result_to_text",
    "sort_archs",
]


def resolve(
    request: Request,
    matrix: Matrix,
    hosts: Sequence[Host] = (),
    *,
    unreachable: AbstractSet[str] = frozenset(),
    words: str = "flags",
) -> Stack | Unsatisfiable:
    """The stack the request runs on, on every target, or why nothing fits (module docstring).

    `unreachable`: index URLs that do not answer (what `envbuild lock` found); builds that
    install only from them are left out unless `[indexes] framework_index = "index"`.
    `words`: how the ways out name a change, "flags" (`envbuild resolve`'s) or "keys" (an
    envbuild.toml's, for `envbuild lock`).
    Raises UserError (exit 2) for bad input: an unknown GPU, framework, OS or flavour, a
    malformed version or range.
    """
    ctx = _prepare(request, matrix, hosts, frozenset(unreachable), words)
    outcome = _search(ctx, first_only=True)
    if outcome.fits:
        return _stack(ctx, outcome.fits[0], outcome)
    # Explanations need every release's reasons, not just the first fit's search.
    full = _search(ctx, first_only=False)
    reasons = [*_index_reasons(ctx), *_reason_lines(ctx, full)]
    if not reasons:
        reasons = [f"no {ctx.framework} candidate in the matrix fits the request"]
    return Unsatisfiable(reasons=tuple(reasons), alternatives=tuple(_alternatives(ctx, full)))

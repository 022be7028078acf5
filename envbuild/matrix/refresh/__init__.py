"""`envbuild matrix refresh`, the pure part: index data in, matrix rows and findings out.

No I/O here: `envbuild.matrix.refresh.pypi` fetches (PyPI Simple API, core metadata, the PyTorch index, registry
tag lists) and hands the texts to these functions; `envbuild/app/matrix.py` writes the result.

What PyPI alone tells (PEP 691 file lists + each wheel's core metadata):
- a framework's releases, their Requires-Python and Linux wheel Python tags -> the python
  specifier of a `FrameworkRelease`;
- the variant `pip install torch` gets on Linux x86_64, from the wheel's Requires-Dist:
  `nvidia-cudnn-cu1x==X` (cuDNN), `nvidia-nccl-cu1x==Y` (NCCL), and `nvidia-cuda-runtime-cu1x==Z`
  or `cuda-toolkit[...]==W` (CUDA) -> variant `cuXY`. A runtime component version (12.6.77) is
  mapped to the toolkit release (12.6.2) through the `cuda-toolkit` meta-package's own pins.
What PyPI does not tell: the GPU architectures a build carries and the non-default variants
(`+cu118`, `+cu128`): those need the PyTorch index. Build rows derived from PyPI alone therefore
have `archs = []` and `confidence = "medium"`; a CUDA build without archs is incomplete and the
resolver leaves it out (it cannot prove the targets' GPUs are covered). For jax and TensorFlow
the CUDA pins are ranges (`>=9.10.2.21,<10`): the rows record the lower bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from envbuild.matrix import Matrix
from envbuild.matrix.refresh.channels import (
    CHANNELS,
    PYPI_ONLY_NOTE,
    RANGE_NOTE,
    TOOLKIT_PROJECT,
    Channel,
    ChannelData,
    Derived,
    ReleaseData,
    derive_channel,
)
from envbuild.matrix.refresh.cuda import (
    CudaPins,
    cuda_of,
    cuda_pins,
    toolkit_for_runtime,
    toolkit_runtime_pins,
    variant_of,
)
from envbuild.matrix.refresh.findings import (
    cuda_tag_families,
    image_findings,
    index_variants,
    variant_findings,
)
from envbuild.matrix.refresh.index import (
    CoreMetadata,
    IndexFile,
    Wheel,
    applies,
    exact_pin,
    free_threaded_specifier,
    lower_bound,
    parse_metadata,
    parse_simple_html,
    parse_simple_json,
    pick_metadata_wheel,
    python_specifier,
    wheels_for,
)
from envbuild.matrix.refresh.plan import (
    BUILD_FACTS,
    FILE_INJECTED,
    RELEASE_FACTS,
    Change,
    Plan,
    append_rows,
    new_framework_file,
    plan_changes,
    plan_json,
    render_rows,
    row_table,
    summary_lines,
)

__all__ = [
    "BUILD_FACTS",
    "CHANNELS",
    "DEFAULT_SINCE",
    "FILE_INJECTED",
    "FRAMEWORKS",
    "PYPI_ONLY_NOTE",
    "RANGE_NOTE",
    "RELEASE_FACTS",
    "SOURCES",
    "TOOLKIT_PROJECT",
    "Change",
    "Channel",
    "ChannelData",
    "CoreMetadata",
    "CudaPins",
    "Derived",
    "IndexFile",
    "Plan",
    "RefreshResult",
    "ReleaseData",
    "Version",
    "Wheel",
    "append_rows",
    "applies",
    "cuda_of",
    "cuda_pins",
    "cuda_tag_families",
    "derive_channel",
    "exact_pin",
    "free_threaded_specifier",
    "image_findings",
    "index_variants",
    "lower_bound",
    "new_framework_file",
    "parse_metadata",
    "parse_simple_html",
    "parse_simple_json",
    "pick_metadata_wheel",
    "plan_changes",
    "plan_json",
    "python_specifier",
    "render_rows",
    "row_table",
    "since_for",
    "summary_lines",
    "toolkit_for_runtime",
    "toolkit_runtime_pins",
    "variant_findings",
    "variant_of",
    "wheels_for",
]

SOURCES = ("pypi", "pytorch-index", "registry")
FRAMEWORKS = ("torch", "jax", "tensorflow")


# -- the whole run ----------------------------------------------------------------------------

DEFAULT_SINCE = {"torch": "2.0", "jax": "0.4.31", "tensorflow": "2.15"}
"""How far back a refresh reads when the matrix has no release of the framework yet: torch
2.0 (CUDA pins in Requires-Dist on x86_64 since 1.13), jax 0.4.31 (first jax-cuda12-plugin
with the `with-cuda` extra), tensorflow 2.15 (first `and-cuda` extra). Source: each release's
core metadata on PyPI (https://pypi.org/project/torch/, https://pypi.org/project/jax/,
https://pypi.org/project/tensorflow/)."""


def since_for(framework: str, matrix: Matrix) -> str:
    """Read from the oldest release the matrix has (so its rows are re-checked), else the
    default floor."""
    versions = [Version(r.version) for r in matrix.releases if r.framework == framework]
    return str(min(versions)) if versions else DEFAULT_SINCE[framework]


@dataclass(frozen=True)
class RefreshResult:
    plan: Plan
    written: tuple[str, ...]
    """Files changed (none for --dry-run)."""
    dry_run: bool
    sources_ok: tuple[str, ...]
    sources_failed: tuple[tuple[str, str], ...]
    """(source, why) for every source that could not be read."""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "dry_run": self.dry_run,
            "written": list(self.written),
            "sources_ok": list(self.sources_ok),
            "sources_failed": [{"source": s, "message": m} for s, m in self.sources_failed],
            **plan_json(self.plan),
        }

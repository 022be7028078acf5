"""The compatibility matrix (`matrix/*.toml`), as a package:

- `rows`: the row types and the `Matrix` value with its lookups (pure);
- `parse`: TOML text -> rows, merged with an overlay, into a `Matrix` plus problems (pure);
- `checks`: per-row value checks and cross-file checks (pure);
- `load`: reading the built-in folder and an overlay folder (thin I/O, cached per process).

The public names are re-exported here: `from envbuild.matrix import Matrix, load_matrix`.
"""

from typing import TYPE_CHECKING, Any

from envbuild.matrix.load import (
    OVERLAY_ENV,
    clear_cache,
    load_matrix,
    load_matrix_from,
    load_sources,
    overlay_dir,
    overlay_from_env,
    read_matrix_files,
    sources_from,
)
from envbuild.matrix.rows import (
    CONFIDENCES,
    GPU_SEGMENTS,
    IMAGE_FLAVOURS,
    MATRIX_SCHEMA_VERSION,
    PLATFORMS,
    AnyRow,
    Arch,
    CudaImage,
    CudaRelease,
    FrameworkBuild,
    FrameworkRelease,
    GpuBaseline,
    HostPlatform,
    KnownIssue,
    LibRelease,
    ListedGpu,
    Matrix,
    NgcImage,
    OsImage,
    OtherVendorGpu,
    PythonBuild,
    Row,
    fingerprint_of,
)

if TYPE_CHECKING:
    from envbuild.matrix.checks import check_matrix, matrix_warnings
    from envbuild.matrix.parse import (
        MatrixReport,
        check_files,
        collect,
        parse_matrix,
        parse_toml,
    )

# Parsing and checking are imported on first use: a command that loads the compiled matrix
# (`load.load_matrix_from`) needs only the row types.
_LAZY = {
    "check_matrix": "checks",
    "matrix_warnings": "checks",
    "MatrixReport": "parse",
    "check_files": "parse",
    "collect": "parse",
    "parse_matrix": "parse",
    "parse_toml": "parse",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "CONFIDENCES",
    "GPU_SEGMENTS",
    "IMAGE_FLAVOURS",
    "MATRIX_SCHEMA_VERSION",
    "OVERLAY_ENV",
    "PLATFORMS",
    "AnyRow",
    "Arch",
    "CudaImage",
    "CudaRelease",
    "FrameworkBuild",
    "FrameworkRelease",
    "GpuBaseline",
    "HostPlatform",
    "KnownIssue",
    "LibRelease",
    "ListedGpu",
    "Matrix",
    "MatrixReport",
    "NgcImage",
    "OsImage",
    "OtherVendorGpu",
    "PythonBuild",
    "Row",
    "check_files",
    "check_matrix",
    "clear_cache",
    "collect",
    "fingerprint_of",
    "load_matrix",
    "load_matrix_from",
    "load_sources",
    "matrix_warnings",
    "overlay_dir",
    "overlay_from_env",
    "parse_matrix",
    "parse_toml",
    "read_matrix_files",
    "sources_from",
]

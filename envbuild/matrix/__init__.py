"""The compatibility matrix (`matrix/*.toml`), as a package:

- `rows`: the row types and the `Matrix` value with its lookups (pure);
- `parse`: TOML text -> rows, merged with an overlay, into a `Matrix` plus problems (pure);
- `checks`: per-row value checks and cross-file checks (pure);
- `load`: reading the built-in folder and an overlay folder (thin I/O, cached per process).

The public names are re-exported here: `from envbuild.matrix import Matrix, load_matrix`.
"""

from envbuild.matrix.checks import check_matrix, matrix_warnings
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
from envbuild.matrix.parse import MatrixReport, check_files, collect, parse_matrix, parse_toml
from envbuild.matrix.rows import (
    CONFIDENCES,
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
    Matrix,
    OsImage,
    OtherVendorGpu,
    Row,
    fingerprint_of,
)

__all__ = [
    "CONFIDENCES",
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
    "Matrix",
    "MatrixReport",
    "OsImage",
    "OtherVendorGpu",
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

"""The shipped matrix passes its own strict check; each kind of defect is caught and named by
file and row; overlays replace and add rows; lookups the resolver uses behave."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuild import matrix as mx
from envbuild.core.errors import MatrixError
from envbuild.core.resources import matrix_dir

REAL = matrix_dir()


def real_files() -> dict[str, str]:
    return mx.read_matrix_files(REAL, label="matrix")


def test_real_matrix_has_no_problems() -> None:
    _, problems, _ = mx.collect(real_files())
    assert problems == []


def test_real_matrix_parses_strictly_and_counts_every_file() -> None:
    files = real_files()
    m = mx.parse_matrix(files)
    assert set(m.origins) == set(m.fingerprints())
    assert {o.split(":")[0] for o in m.origins.values()} == set(files)


def test_load_is_cached_and_fast() -> None:
    mx.clear_cache()
    t0 = time.perf_counter()
    first = mx.load_matrix()
    cold = time.perf_counter() - t0
    t1 = time.perf_counter()
    again = mx.load_matrix()
    warm = time.perf_counter() - t1
    assert again is first
    # Measured ~40-120 ms cold on a 2-core dev VM (tomllib); the resolver runs on the cached
    # value. Generous bound: a regression to tomlkit-speed parsing (~1 s) fails it.
    assert cold < 0.8, f"cold load took {cold * 1000:.0f} ms"
    assert warm < 0.005


# --- coverage the matrix must have ------------------------------------------------------------


def _minor_series(versions: list[str]) -> set[str]:
    return {".".join(v.split(".")[:2]) for v in versions}


@pytest.mark.parametrize(
    ("framework", "first", "last"),
    [("torch", "2.0", "2.15"), ("tensorflow", "2.12", "2.21")],
)
def test_every_minor_series_is_covered(framework: str, first: str, last: str) -> None:
    m = mx.load_matrix()
    series = _minor_series([r.version for r in m.releases_of(framework)])
    lo, hi = Version(first), Version(last)
    wanted = {f"{lo.major}.{n}" for n in range(lo.minor, hi.minor + 1)}
    assert wanted <= series


def test_every_torch_release_has_one_pypi_default_cuda_build_and_a_cpu_build() -> None:
    m = mx.load_matrix()
    for r in m.releases_of("torch"):
        builds = [b for b in m.builds_for("torch", r.version) if "x86_64" in b.platforms]
        defaults = [b for b in builds if b.pypi_default]
        assert len(defaults) == 1, r.version
        assert defaults[0].cuda is not None and defaults[0].archs, r.version
        assert any(b.variant == "cpu" for b in builds), r.version
        for b in builds:
            assert b.pypi_default == (b.index_url is None)
            if not b.pypi_default:
                assert b.index_url == f"https://download.pytorch.org/whl/{b.variant}"


def test_tensorflow_gpu_builds_start_at_214_and_jax_has_both_plugins() -> None:
    m = mx.load_matrix()
    and_cuda = [b for b in m.builds if b.framework == "tensorflow" and b.variant == "and-cuda"]
    covered = {
        r.version
        for r in m.releases_of("tensorflow")
        for b in and_cuda
        if SpecifierSet(b.versions).contains(r.version)
    }
    assert covered and min(covered, key=Version).startswith("2.14")
    variants = {b.variant for b in m.builds if b.framework == "jax"}
    assert {"cuda12", "cuda13", "cpu"} <= variants
    for b in m.builds:
        if b.framework == "jax" and b.variant == "cuda13":
            # CUDA 13 cannot target anything below sm_75 (ptxas 13.x, gpus.toml).
            assert all(int(a.split("_")[1]) >= 75 for a in b.archs)


def test_cuda_from_118_to_13_with_both_floors() -> None:
    m = mx.load_matrix()
    minors = {".".join(c.version.split(".")[:2]) for c in m.cuda}
    assert {"11.8", "12.0", "12.4", "12.8", "12.9", "13.0"} <= minors
    for c in m.cuda:
        assert c.toolkit_driver and c.minor_compat_driver


@pytest.mark.parametrize(
    "cc",
    [
        "5.0",
        "5.2",
        "6.0",
        "6.1",
        "7.0",
        "7.5",
        "8.0",
        "8.6",
        "8.9",
        "9.0",
        "10.0",
        "10.3",
        "11.0",
        "12.0",
        "12.1",
    ],
)
def test_every_compute_capability_is_known(cc: str) -> None:
    assert mx.load_matrix().arch(cc) is not None


def test_sm101_is_renamed_to_sm110_in_cuda_13() -> None:
    m = mx.load_matrix()
    old, new = m.arch("sm_101"), m.arch("sm_110")
    assert old is not None and new is not None
    assert old.renamed_to == "sm_110"
    assert old.last_cuda is not None and new.first_cuda is not None
    assert Version(old.last_cuda) < Version(new.first_cuda)


# GPU names users type -> compute capability (NVIDIA's CUDA GPUs pages; A10G: AWS, GA102).
GPU_NAMES = {
    "H100": "9.0",
    "H200": "9.0",
    "A100": "8.0",
    "RTX 4090": "8.9",
    "RTX 5090": "12.0",
    "L4": "8.9",
    "L40S": "8.9",
    "T4": "7.5",
    "V100": "7.0",
    "P100": "6.0",
    "A10": "8.6",
    "A10G": "8.6",
    "GB200": "10.0",
    "B200": "10.0",
    "RTX 3090": "8.6",
}


@pytest.mark.parametrize(("name", "cc"), sorted(GPU_NAMES.items()))
def test_common_gpu_names(name: str, cc: str) -> None:
    hits = [a.cc for a in mx.load_matrix().archs if name in a.gpus]
    assert hits == [cc]


# --- one defect per case: caught, with file and row ------------------------------------------

# (file, text to replace (must occur once), replacement, table of the row, row label, fragment)
DEFECTS = [
    (
        "cuda.toml",
        'version = "12.8.1"\n',
        'version = "12.8.1"\nbogus = 1\n',
        "cuda",
        "cuda 12.8.1",
        "unknown key 'bogus'",
    ),
    (
        "cuda.toml",
        'version = "12.8.1"\ntoolkit_driver = "570.124.06"',
        'version = "12.8.1"\ntoolkit_driver = 570',
        "cuda",
        "cuda 12.8.1",
        "toolkit_driver must be a string",
    ),
    (
        "cuda.toml",
        'version = "12.8.1"\n',
        'version = "12.8"\n',
        "cuda",
        "cuda 12.8",
        "must be a full release",
    ),
    (
        "gpus.toml",
        'cc = "9.0"\nsm = "sm_90"',
        'cc = "9.0"\nsm = "sm_91"',
        "arch",
        "sm_91",
        "does not match cc 9.0",
    ),
    (
        "torch.toml",
        'version = "2.7.1"\npython',
        'version = "2.7.x"\npython',
        "release",
        "torch 2.7.x",
        "not an exact release",
    ),
    (
        "torch.toml",
        'versions = "==2.7.*"\nvariant = "cu126"',
        'versions = "=2.7"\nvariant = "cu126"',
        "build",
        "torch =2.7 cu126",
        "not a version range",
    ),
    (
        "torch.toml",
        'versions = "==2.0.*"\nvariant = "cu118"\npypi_default = false\ncuda = "11.8.0"',
        'versions = "==2.0.*"\nvariant = "cu118"\npypi_default = false\ncuda = "11.7.9"',
        "build",
        "torch ==2.0.* cu118",
        "cuda 11.7.9 is not in cuda.toml",
    ),
    (
        "torch.toml",
        'versions = "==2.0.*"\nvariant = "cu118"\npypi_default = false\ncuda = "11.8.0"',
        'versions = "==2.0.*"\nvariant = "cu118"\npypi_default = true\ncuda = "11.8.0"',
        "build",
        "torch ==2.0.* cu118",
        "a pypi_default build has no index_url",
    ),
    (
        "cuda_images.toml",
        'cuda = "12.8.1"\n',
        'cuda = "12.8.9"\n',
        "image",
        "nvidia/cuda 12.8.9",
        "cuda 12.8.9 is not in cuda.toml",
    ),
    (
        "cuda_images.toml",
        'cuda = "12.8.1"\noses = ["ubuntu22.04", "ubuntu24.04"]',
        'cuda = "12.8.1"\noses = ["ubuntu22.04", "ubuntu26.04"]',
        "image",
        "nvidia/cuda 12.8.1",
        "os ubuntu26.04 is not in os_images.toml",
    ),
    (
        "os_images.toml",
        'os = "debian12"\nimage = "debian:bookworm-slim"\n',
        'os = "debian12"\nimage = "debian:bookworm-slim"\ndefault = true\n',
        None,
        None,
        "exactly one [[os]] row must have default = true",
    ),
    (
        "cudnn.toml",
        'version = "8.7.0.84"\ncuda = ">=11.0,<12"',
        'version = "8.7.0.84"\ncuda = ">=12.0,<13"',
        "build",
        "torch ==2.0.* cu118",
        "cudnn 8.7.0.84 has builds for CUDA >=12.0,<13 only",
    ),
    (
        "gpus.toml",
        'gpus = ["H100", "H200", "GH200", "H20", "H800"]',
        'gpus = ["H100", "H200", "GH200", "H20", "H800", "A100"]',
        "arch",
        "sm_90",
        "GPU name 'A100' is also listed under sm_80",
    ),
    (
        "tensorflow.toml",
        "schema_version = 1\n",
        "schema_version = 2\n",
        None,
        None,
        "schema_version 2 is newer than this envbuild reads",
    ),
]


def _copy_matrix(tmp_path: Path) -> Path:
    dest = tmp_path / "matrix"
    shutil.copytree(REAL, dest)
    return dest


def _row_index(text: str, at: int, table: str) -> int:
    return text[:at].count(f"\n[[{table}]]\n")


@pytest.mark.parametrize(
    ("file", "old", "new", "table", "label", "fragment"), DEFECTS, ids=[d[-1][:40] for d in DEFECTS]
)
def test_defect_is_caught_with_file_and_row(
    tmp_path: Path,
    file: str,
    old: str,
    new: str,
    table: str | None,
    label: str | None,
    fragment: str,
) -> None:
    folder = _copy_matrix(tmp_path)
    path = folder / file
    text = path.read_text()
    assert text.count(old) == 1, "the case's anchor must occur exactly once"
    edited = text.replace(old, new)
    path.write_text(edited)
    _, problems, _ = mx.collect(mx.read_matrix_files(folder, label="matrix"))
    hits = [p for p in problems if fragment in p]
    assert hits, problems
    if table is not None and label is not None:
        # The row named is the one edited (or, for a cross-file defect, the row that uses it).
        where = f"({label}):"
        named = [p for p in hits if where in p]
        assert named, hits
        row_file = named[0].split(":")[0]
        row_text = (folder / row_file.split("/")[1]).read_text()
        if row_file.endswith(file):
            anchor = new
        else:  # a build that uses the edited row: "torch ==2.0.* cu118"
            _, versions, variant = label.split()
            anchor = f'versions = "{versions}"\nvariant = "{variant}"'
        n = _row_index(row_text, row_text.index(anchor), table)
        assert named[0].startswith(f"{row_file}: {table}[{n}] ({label}): ")
    else:
        assert hits[0].startswith(f"matrix/{file}") or hits[0].startswith(file)


def test_a_driver_past_the_int_digit_limit_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    # Found by tests/reliability (test_mutated_matrix_file): the row passed the check, then
    # Version() raised ValueError (Python's 4300-digit limit) inside the resolver.
    folder = _copy_matrix(tmp_path)
    path = folder / "cuda.toml"
    text = path.read_text()
    old = 'major = 13\ndriver = "580"'
    assert text.count(old) == 1
    path.write_text(text.replace(old, f'major = 13\ndriver = "{"9" * 5000}"'))
    _, problems, _ = mx.collect(mx.read_matrix_files(folder, label="matrix"))
    assert any("minor_compat" in p and "driver must be a driver version" in p for p in problems)


def test_duplicate_row_is_caught(tmp_path: Path) -> None:
    folder = _copy_matrix(tmp_path)
    path = folder / "cuda.toml"
    text = path.read_text()
    start = text.index("\n[[cuda]]\n")
    end = text.index("\n[[cuda]]\n", start + 1)
    path.write_text(text + "\n" + text[start:end])
    _, problems, _ = mx.collect(mx.read_matrix_files(folder, label="matrix"))
    assert any(
        "duplicate key 'cuda:" in p and "first at matrix/cuda.toml: cuda[1]" in p for p in problems
    ), problems


def test_missing_source_is_caught(tmp_path: Path) -> None:
    folder = _copy_matrix(tmp_path)
    path = folder / "os_images.toml"
    lines = path.read_text().splitlines(keepends=True)
    first_source = next(i for i, ln in enumerate(lines) if ln.startswith("source = "))
    del lines[first_source]
    path.write_text("".join(lines))
    _, problems, _ = mx.collect(mx.read_matrix_files(folder, label="matrix"))
    assert any(
        p.startswith("matrix/os_images.toml: os[1] (debian12): source is missing") for p in problems
    ), problems


def test_arch_that_the_builds_cuda_cannot_target_is_a_contradiction(tmp_path: Path) -> None:
    folder = _copy_matrix(tmp_path)
    path = folder / "torch.toml"
    text = path.read_text()
    at = text.index('versions = "==2.0.*"\nvariant = "cu118"')
    archs_at = text.index("archs = [", at)
    end = text.index("]", archs_at)
    path.write_text(text[:end] + ', "sm_120"' + text[end:])
    _, problems, _ = mx.collect(mx.read_matrix_files(folder, label="matrix"))
    assert any(
        "(torch ==2.0.* cu118): arch sm_120 cannot be built with CUDA 11.8.0" in p for p in problems
    ), problems


def test_unknown_file_and_unknown_table_are_caught() -> None:
    files = real_files()
    files["matrix/extras.toml"] = "schema_version = 1\n"
    files["matrix/gpus.toml"] = files["matrix/gpus.toml"] + "\n[[archs]]\ncc = '1.0'\n"
    _, problems, _ = mx.collect(files)
    assert any(p.startswith("matrix/extras.toml: unknown matrix file") for p in problems)
    assert "matrix/gpus.toml: unknown top-level key 'archs'" in problems


def test_missing_lib_row_is_a_warning_not_a_problem() -> None:
    files = real_files()
    nccl = files["matrix/nccl.toml"]
    start = nccl.index('[[release]]\nversion = "2.14.3"')
    end = nccl.index("[[release]]", start + 1)
    files["matrix/nccl.toml"] = nccl[:start] + nccl[end:]
    _, problems, warnings = mx.collect(files)
    assert problems == []
    assert any("(torch ==2.0.* cu117): nccl 2.14.3 has no row in nccl.toml" in w for w in warnings)


def test_parse_matrix_raises_with_every_problem() -> None:
    files = real_files()
    files["matrix/cuda.toml"] = files["matrix/cuda.toml"].replace(
        'version = "12.8.1"\n', 'version = "12.8.1"\nfoo = 1\nbar = 2\n'
    )
    with pytest.raises(MatrixError) as err:
        mx.parse_matrix(files)
    assert err.value.exit_code == 2
    assert "matrix/cuda.toml: cuda[" in err.value.message
    assert len(err.value.fields["problems"]) >= 2


def test_invalid_toml_raises_naming_the_file() -> None:
    files = real_files()
    files["matrix/nccl.toml"] = files["matrix/nccl.toml"][:-40]
    with pytest.raises(MatrixError) as err:
        mx.collect(files)
    assert err.value.message.startswith("matrix/nccl.toml: not valid TOML")


def test_tomlkit_fallback_reads_the_same_data() -> None:
    # Python 3.10 has no tomllib; the fallback must give identical plain data.
    import tomlkit

    tomllib = pytest.importorskip("tomllib")

    for name, text in real_files().items():
        assert tomlkit.parse(text).unwrap() == tomllib.loads(text), name


# --- overlay -----------------------------------------------------------------------------------


def _overlay(tmp_path: Path, text: str, name: str = "torch.toml") -> Path:
    folder = tmp_path / "overlay"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return folder


OVERLAY_TORCH = """schema_version = 1
framework = "torch"

[[build]]
versions = "==2.7.*"
variant = "cu128"
pypi_default = false
cuda = "12.8.1"
cudnn = "9.7.1.26"
archs = ["sm_80", "sm_90", "sm_100", "sm_120"]
requirement = "torch=={version}"
index_url = "https://download.pytorch.org/whl/cu128"
source = "our own measurement of the wheel (test)"

[[build]]
versions = "==2.7.*"
variant = "cu128internal"
pypi_default = false
cuda = "12.8.1"
archs = ["sm_90"]
requirement = "torch=={version}"
index_url = "https://pypi.internal.example/simple"
source = "internal build farm (test)"
"""


def test_overlay_replaces_and_adds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mx.clear_cache()
    folder = _overlay(tmp_path, OVERLAY_TORCH)
    m = mx.load_matrix(overlay=folder)
    base = mx.load_matrix()
    assert m is not base
    replaced = {b.key: b for b in m.builds}["build:torch:==2.7.*:cu128"]
    assert replaced.archs == ("sm_80", "sm_90", "sm_100", "sm_120")
    assert m.origins[replaced.key].startswith(f"{folder}/torch.toml: build[1]")
    assert "build:torch:==2.7.*:cu128internal" in {b.key for b in m.builds}
    assert len(m.builds) == len(base.builds) + 1
    # The environment variable gives the same view.
    monkeypatch.setenv(mx.OVERLAY_ENV, str(folder))
    assert mx.load_matrix() is m
    # The explicit loader reads no environment: None is no overlay.
    assert mx.load_matrix_from(None) is base
    assert mx.load_matrix_from(folder) is m


def test_overlay_from_env_is_the_one_environment_read() -> None:
    assert mx.overlay_from_env({mx.OVERLAY_ENV: "/srv/overlay"}) == Path("/srv/overlay")
    assert mx.overlay_from_env({mx.OVERLAY_ENV: ""}) is None
    assert mx.overlay_from_env({}) is None


def test_overlay_is_validated_against_the_merged_view(tmp_path: Path) -> None:
    mx.clear_cache()
    folder = _overlay(tmp_path, OVERLAY_TORCH.replace('archs = ["sm_90"]', 'archs = ["sm_99"]'))
    with pytest.raises(MatrixError) as err:
        mx.load_matrix(overlay=folder)
    assert (
        f"{folder}/torch.toml: build[2] (torch ==2.7.* cu128internal): arch sm_99 is not in "
        "gpus.toml" in err.value.fields["problems"]
    )


def test_missing_overlay_folder_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(MatrixError) as err:
        mx.load_matrix(overlay=tmp_path / "nope")
    assert err.value.exit_code == 2


# --- lookups -----------------------------------------------------------------------------------


def test_cuda_release_for_a_minor_answers_with_its_newest_update() -> None:
    m = mx.load_matrix()
    rows = [c for c in m.cuda if c.version.startswith("12.8.")]
    newest = max(rows, key=lambda c: Version(c.version))
    assert m.cuda_release("12.8") == newest
    assert m.cuda_release(newest.version) == newest
    assert m.cuda_release("12.7") is None


def test_lib_matches_the_longest_release_prefix() -> None:
    libs = (
        mx.LibRelease("cudnn", "9.10", ">=12", "s"),
        mx.LibRelease("cudnn", "9.10.2", ">=12", "s"),
        mx.LibRelease("cudnn", "9.1", ">=12", "s"),
    )
    m = mx.Matrix(libs=libs)
    hit = m.lib("cudnn", "9.10.2.21")
    assert hit is not None and hit.version == "9.10.2"
    hit = m.lib("cudnn", "9.1.0.70")
    assert hit is not None and hit.version == "9.1"
    assert m.lib("nccl", "9.10.2.21") is None


def test_image_refs_follow_the_tag_scheme() -> None:
    m = mx.load_matrix()
    for img in m.cuda_images:
        for os_name in img.oses:
            for flavour in img.flavours:
                ref = img.ref(flavour, os_name)
                assert ref.startswith(f"nvidia/cuda:{img.cuda}-") and ref.endswith(f"-{os_name}")
        if "cudnn" in img.flavours:
            assert f"-{img.cudnn_tag}-runtime-" in img.ref("cudnn", img.oses[0])


def test_fingerprint_changes_with_the_row() -> None:
    m = mx.load_matrix()
    row = m.cuda[0]
    other = mx.CudaRelease(
        row.version, row.toolkit_driver, row.minor_compat_driver, row.source + "!"
    )
    assert mx.fingerprint_of(row) != mx.fingerprint_of(other)
    assert mx.fingerprint_of(row) == m.fingerprints()[row.key]


def test_check_matrix_on_a_matrix_built_in_code() -> None:
    arch = mx.Arch("9.0", "sm_90", "Hopper", ("H100",), "11.8", None, "s")
    build = mx.FrameworkBuild(
        "torch",
        "==2.7.*",
        "cu999",
        "12.9.9",
        None,
        None,
        ("sm_90",),
        "torch=={version}",
        "https://x.example/simple",
        False,
        "s",
    )
    problems = mx.check_matrix(mx.Matrix(archs=(arch,), builds=(build,)))
    assert problems == ["build:torch:==2.7.*:cu999: cuda 12.9.9 is not in cuda.toml"]

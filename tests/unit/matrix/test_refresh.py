"""Parsing and derivation of `matrix refresh` against recorded PyPI responses (no network).

Expected values are read independently from the recorded texts (a regex over the METADATA
lines or the wheel file names), or cited from PyPI (https://pypi.org/project/torch/).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from envbuild.matrix import (
    CudaImage,
    FrameworkBuild,
    FrameworkRelease,
    Matrix,
    OsImage,
    collect,
    load_matrix,
    refresh,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "refresh"
SEEN = "2026-11-30"


def simple(project: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIX / f"simple-{project}.json").read_text())
    return data


def _search(pattern: str, text: str, flags: int = 0) -> re.Match[str]:
    found = re.search(pattern, text, flags)
    assert found is not None, pattern
    return found


def metadata_text(project_file_prefix: str) -> str:
    (path,) = FIX.glob(f"metadata-{project_file_prefix}*.txt")
    return path.read_text()


def pin(text: str, name: str) -> str:
    """The version a Requires-Dist line pins for `name` (independent of refresh's parser)."""
    m = re.search(rf"^Requires-Dist: {re.escape(name)}(?:\[[^\]]*\])?==(\d+(?:\.\d+)*)", text, re.M)
    assert m, f"no pin for {name}"
    return m.group(1)


def channel_data(fw: str, project: str) -> refresh.ChannelData:
    """What pypi.gather_channel returns, built from the recorded files."""
    (channel,) = [c for c in refresh.CHANNELS[fw] if c.project == project]
    files = refresh.parse_simple_json(simple(project))
    releases = []
    for version, wheels in sorted(refresh.wheels_for(files).items()):
        chosen = refresh.pick_metadata_wheel(wheels)
        meta_path = FIX / f"metadata-{chosen.file.filename}.txt"
        meta = refresh.parse_metadata(meta_path.read_text()) if meta_path.exists() else None
        releases.append(refresh.ReleaseData(str(version), tuple(wheels), chosen, meta))
    return refresh.ChannelData(channel, f"https://pypi.org/simple/{project}/", tuple(releases))


@pytest.fixture(scope="module")
def runtime_pins() -> dict[str, str]:
    metas = {}
    for path in FIX.glob("metadata-cuda_toolkit-*.txt"):
        version = path.name.split("-")[2]
        metas[version] = refresh.parse_metadata(path.read_text())
    return refresh.toolkit_runtime_pins(metas)


# -- index parsing ----------------------------------------------------------------------------


def test_simple_json_lists_every_recorded_file() -> None:
    data = simple("torch")
    files = refresh.parse_simple_json(data)
    assert [f.filename for f in files] == [f["filename"] for f in data["files"]]
    assert all(f.url.startswith("https://files.pythonhosted.org/") for f in files)
    assert all(f.sha256 == d["hashes"]["sha256"] for f, d in zip(files, data["files"], strict=True))


def test_linux_wheels_grouped_by_release() -> None:
    data = simple("torch")
    by_release = refresh.wheels_for(refresh.parse_simple_json(data))
    expected: dict[str, set[str]] = {}
    for f in data["files"]:
        name = f["filename"]
        if name.endswith("manylinux_2_28_x86_64.whl"):
            expected.setdefault(name.split("-")[1], set()).add(name)
    assert {str(v): {w.file.filename for w in ws} for v, ws in by_release.items()} == expected


def test_python_specifier_spans_the_cpython_tags() -> None:
    data = simple("torch")
    by_release = refresh.wheels_for(refresh.parse_simple_json(data))
    for version, wheels in by_release.items():
        minors = {
            int(m.group(1)) for w in wheels if (m := re.search(r"-cp3(\d+)-", w.file.filename))
        }
        rp = wheels[0].file.requires_python
        spec = refresh.python_specifier(wheels, rp)
        assert spec == f">=3.{min(minors)},<3.{max(minors) + 1}", version


def test_python_specifier_respects_requires_python_floor() -> None:
    wheels = refresh.wheels_for(refresh.parse_simple_json(simple("torch")))
    any_release = next(iter(wheels.values()))
    # A Requires-Python stricter than the tags raises the floor: the tags alone do not decide.
    assert refresh.python_specifier(any_release, ">=3.12").startswith(">=3.12,")


def test_simple_html_matches_the_anchors() -> None:
    text = (FIX / "simple-torch.html").read_text()
    files = refresh.parse_simple_html(text, "https://pypi.org/simple/torch/")
    anchors = re.findall(r'<a href="([^"#]+)#sha256=([0-9a-f]+)"[^>]*>([^<]+)</a>', text)
    assert [(f.url, f.sha256, f.filename) for f in files] == anchors
    assert files and all(f.filename.startswith("torch-2.7.1-") for f in files)


# -- metadata and pins ------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["2.7.0", "2.7.1"])
def test_torch_runtime_pins(version: str) -> None:
    text = metadata_text(f"torch-{version}-")
    meta = refresh.parse_metadata(text)
    assert meta.version == version
    assert meta.requires_python == _search(r"^Requires-Python: (.+)$", text, re.M).group(1)
    pins = refresh.cuda_pins(meta)
    assert pins.cudnn == pin(text, "nvidia-cudnn-cu12")
    assert pins.nccl == pin(text, "nvidia-nccl-cu12")
    assert pins.runtime == pin(text, "nvidia-cuda-runtime-cu12")
    assert pins.toolkit is None and pins.cuda_major == 12 and pins.exact


def test_torch_cuda_toolkit_pin() -> None:
    text = metadata_text("torch-2.15.0-")
    pins = refresh.cuda_pins(refresh.parse_metadata(text))
    assert pins.toolkit == pin(text, "cuda-toolkit")
    assert pins.cudnn == pin(text, "nvidia-cudnn-cu13")
    assert pins.nccl == pin(text, "nvidia-nccl-cu13")
    assert pins.runtime is None and pins.cuda_major == 13


def test_runtime_maps_to_the_oldest_toolkit_that_ships_it(runtime_pins: dict[str, str]) -> None:
    # The recorded cuda-toolkit 12.6.x metadata: which releases pin which cudart.
    recorded = {}
    for path in FIX.glob("metadata-cuda_toolkit-*.txt"):
        recorded[path.name.split("-")[2]] = pin(path.read_text(), "nvidia-cuda-runtime-cu12")
    assert runtime_pins == recorded
    runtime = pin(metadata_text("torch-2.7.1-"), "nvidia-cuda-runtime-cu12")
    shipping = sorted((tk for tk, rt in recorded.items() if rt == runtime), key=refresh.Version)
    assert shipping, "fixture must contain a toolkit that ships torch 2.7.1's runtime"
    assert refresh.toolkit_for_runtime(runtime, runtime_pins) == shipping[0]
    assert refresh.toolkit_for_runtime("11.0.1", runtime_pins) is None


def test_lower_bounds_for_range_pins() -> None:
    text = metadata_text("jax_cuda12_plugin-0.12.0.1-")
    pins = refresh.cuda_pins(refresh.parse_metadata(text), extra="with-cuda")
    cudnn_floor = _search(r"nvidia-cudnn-cu12[^;]*>=([\d.]+)", text).group(1)
    nccl_floor = _search(r"nvidia-nccl-cu12>=([\d.]+)", text).group(1)
    assert (pins.cudnn, pins.nccl, pins.exact) == (cudnn_floor, nccl_floor, False)
    # Without the extra the plugin pulls no CUDA wheels at all.
    assert refresh.cuda_pins(refresh.parse_metadata(text)).cudnn is None


# -- derivation -------------------------------------------------------------------------------


def test_torch_rows_from_pypi_alone(runtime_pins: dict[str, str]) -> None:
    data = channel_data("torch", "torch")
    d = refresh.derive_channel(data, runtime_pins=runtime_pins, seen=SEEN)
    assert [r.version for r in d.releases] == ["2.7.0", "2.7.1", "2.15.0"]
    assert all(r.source == "https://pypi.org/simple/torch/" and r.seen == SEEN for r in d.releases)
    by_versions = {b.versions: b for b in d.builds}
    # 2.7.0 and 2.7.1 pin the same CUDA libraries (their Requires-Dist: cu126, cuDNN 9.5.1.17).
    assert set(by_versions) == {"==2.7.*", "==2.15.*"}
    b27 = by_versions["==2.7.*"]
    text = metadata_text("torch-2.7.1-")
    assert (b27.variant, b27.cudnn, b27.nccl) == (
        "cu126",
        pin(text, "nvidia-cudnn-cu12"),
        pin(text, "nvidia-nccl-cu12"),
    )
    assert b27.cuda == refresh.toolkit_for_runtime(
        pin(text, "nvidia-cuda-runtime-cu12"), runtime_pins
    )
    b215 = by_versions["==2.15.*"]
    toolkit = pin(metadata_text("torch-2.15.0-"), "cuda-toolkit")
    assert b215.cuda == toolkit
    assert b215.variant == "cu" + "".join(toolkit.split(".")[:2])
    for b in d.builds:
        # PyPI alone does not tell the archs: none are invented, and the row says so.
        assert b.archs == () and b.confidence == "medium" and "PyPI only" in b.note
        assert b.pypi_default and b.index_url is None and b.requirement == "torch=={version}"
        assert b.source.endswith("(core metadata: Requires-Dist)") and b.seen == SEEN


def test_jax_and_tensorflow_rows_are_low_confidence(runtime_pins: dict[str, str]) -> None:
    for fw, project, variant in (
        ("jax", "jax-cuda12-plugin", "cuda12"),
        ("tensorflow", "tensorflow", "and-cuda"),
    ):
        d = refresh.derive_channel(channel_data(fw, project), runtime_pins=runtime_pins, seen=SEEN)
        assert d.releases and d.builds
        for b in d.builds:
            assert b.variant == variant and b.confidence == "low" and not b.pypi_default
            assert f"[{variant}]" in b.requirement and "lower bounds" in b.note


def test_runtime_floor_without_a_toolkit_gives_the_cuda_minor() -> None:
    # No recorded cuda-toolkit release pins TensorFlow's runtime floor: the CUDA minor is still
    # known from the runtime's own version ("update unknown" in the matrix's terms).
    text = metadata_text("tensorflow-2.21.0-")
    floor = _search(r"nvidia-cuda-runtime-cu12[^;]*>=(\d+)\.(\d+)", text)
    d = refresh.derive_channel(channel_data("tensorflow", "tensorflow"), runtime_pins={}, seen=SEEN)
    assert [b.cuda for b in d.builds] == [f"{floor.group(1)}.{floor.group(2)}"]


def test_release_without_metadata_is_skipped_not_invented() -> None:
    data = channel_data("torch", "torch")
    stripped = refresh.ChannelData(
        data.channel,
        data.index_url,
        tuple(refresh.ReleaseData(r.version, r.wheels, None, None) for r in data.releases),
    )
    d = refresh.derive_channel(stripped, runtime_pins={}, seen=SEEN)
    assert len(d.releases) == 3 and d.builds == ()
    assert all("no core metadata" in s for s in d.skipped)


# -- plan and TOML ----------------------------------------------------------------------------


def _existing_matrix() -> Matrix:
    return Matrix(
        releases=(FrameworkRelease("torch", "2.7.0", ">=3.9,<3.13", "hand-written"),),
        builds=(
            FrameworkBuild(
                framework="torch",
                versions="==2.7.*",
                variant="cu126",
                cuda="12.6.3",
                cudnn="9.5.1.17",
                nccl="2.21.5",
                archs=("sm_80", "sm_90"),
                requirement="torch=={version}",
                index_url=None,
                pypi_default=True,
                source="hand-written",
            ),
        ),
    )


def test_plan_appends_new_and_reports_changed(runtime_pins: dict[str, str]) -> None:
    d = refresh.derive_channel(channel_data("torch", "torch"), runtime_pins=runtime_pins, seen=SEEN)
    plan = refresh.plan_changes(_existing_matrix(), [d])
    assert [r.version for r in plan.new_releases] == ["2.7.1", "2.15.0"]
    assert [b.versions for b in plan.pending_builds] == ["==2.15.*"]
    changed = {(c.key, c.field) for c in plan.changes}
    new_27 = next(r for r in d.releases if r.version == "2.7.0")
    # python differs from the hand-written row, which also lacks the cp313t wheels
    # (free_threaded); nccl differs; cuda 12.6.3 vs 12.6.2 is the same minor (same runtime), so
    # it is not a change.
    assert changed == {
        ("release:torch:2.7.0", "python"),
        ("release:torch:2.7.0", "free_threaded"),
        ("build:torch:==2.7.*:cu126", "nccl"),
    }
    assert new_27.python != ">=3.9,<3.13"
    lines = refresh.summary_lines(plan)
    assert "new releases (appended): 2" in lines
    assert any("~ build:torch:==2.7.*:cu126: nccl '2.21.5' -> " in ln for ln in lines)
    assert json.loads(json.dumps(refresh.plan_json(plan)))["new_releases"][0]["version"] == "2.7.1"


def test_appended_rows_keep_the_file_and_parse_back(runtime_pins: dict[str, str]) -> None:
    d = refresh.derive_channel(channel_data("torch", "torch"), runtime_pins=runtime_pins, seen=SEEN)
    original = (
        "# hand-written header, kept byte for byte\n"
        "schema_version = 1\n"
        'framework = "torch"\n\n'
        "[[release]]\n"
        'version = "2.6.0"\n'
        'python = ">=3.9,<3.14"   # a comment\n'
        'source = "https://pypi.org/simple/torch/"\n'
    )
    new = refresh.append_rows(original, "release", d.releases)
    assert new.startswith(original)
    matrix, problems, _ = collect({"matrix/torch.toml": new})
    assert not [p for p in problems if "release[" in p]
    parsed = {r.version: r for r in matrix.releases}
    for r in d.releases:
        assert parsed[r.version] == r


def test_new_framework_file_parses() -> None:
    d_rows = (FrameworkRelease("jax", "0.12.0", ">=3.12,<3.16", "https://pypi.org/simple/x/"),)
    text = refresh.append_rows(refresh.new_framework_file("jax"), "release", d_rows)
    matrix, problems, _ = collect({"matrix/jax.toml": text})
    assert matrix.releases == d_rows and not [p for p in problems if "jax.toml" in p]


# -- PyTorch index and registry ---------------------------------------------------------------


def test_index_variants_from_local_versions() -> None:
    base = "https://download.pytorch.org/whl/"
    names = [
        "torch-2.7.1+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.7.1+cu118-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.7.1+cpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.7.1+cu128-cp312-cp312-win_amd64.whl",
        "torch-2.8.0.dev20250601+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
    ]
    files = [refresh.IndexFile(n, base + n) for n in names]
    variants = refresh.index_variants(files)
    assert variants == {"2.7.1": {"cu128", "cu118", "cpu"}}
    findings = refresh.variant_findings("torch", variants, _existing_matrix())
    assert findings == tuple(
        f"torch 2.7.1+{v} is on the PyTorch index; no matrix build"
        for v in ("cpu", "cu118", "cu128")
    )


def test_cuda_tag_families_from_the_tag_list() -> None:
    tags = (FIX / "nvidia-cuda-tags-2025-08.txt").read_text().split()
    fam = refresh.cuda_tag_families(tags)
    assert set(fam) == {t.split("-")[0] for t in tags}
    for cuda, (oses, flavours) in fam.items():
        listed = [t for t in tags if t.startswith(f"{cuda}-")]
        assert oses == {t.rsplit("-", 1)[1] for t in listed}
        assert flavours <= {"base", "runtime", "devel", "cudnn"}
        assert ("cudnn" in flavours) == any("cudnn" in t for t in listed)
    known = Matrix(
        cuda_images=(
            CudaImage("12.8.1", ("ubuntu22.04",), ("base",), None, "cuda>=12.8", "hand-written"),
        )
    )
    findings = refresh.image_findings(fam, known)
    assert any(
        f.startswith("nvidia/cuda 12.8.1: new OS tags") and "ubuntu24.04" in f for f in findings
    )
    assert any(f.startswith("nvidia/cuda 12.9.1: new (") for f in findings)
    # With os_images rows, only those OSes count.
    only_noble = Matrix(
        cuda_images=known.cuda_images,
        os_images=(OsImage("ubuntu24.04", "ubuntu:24.04", "3.12", ("python3",), "hand-written"),),
    )
    findings = refresh.image_findings(fam, only_noble)
    assert findings == (
        "nvidia/cuda 12.8.1: new OS tags ubuntu24.04",
        f"nvidia/cuda 12.9.1: new ({', '.join(sorted(fam['12.9.1'][1]))} on ubuntu24.04)",
    )


def test_range_floors_only_flag_values_below_the_floor() -> None:
    d = refresh.derive_channel(channel_data("jax", "jax-cuda12-plugin"), runtime_pins={}, seen=SEEN)
    (derived,) = d.builds
    text = metadata_text("jax_cuda12_plugin-0.12.0.1-")
    cudnn_floor = _search(r"nvidia-cudnn-cu12[^;]*>=([\d.]+)", text).group(1)

    def row(cudnn: str | None) -> Matrix:
        return Matrix(
            builds=(
                FrameworkBuild(
                    framework="jax",
                    versions=">=0.12.0.1",
                    variant="cuda12",
                    cuda="12.9",  # what the build carries; above the runtime floor
                    cudnn=cudnn,
                    nccl=None,  # the matrix does not say: a floor does not contradict it
                    archs=("sm_80",),
                    requirement="jax[cuda12]=={version}",
                    index_url=None,
                    pypi_default=False,
                    source="hand-written",
                ),
            )
        )

    assert refresh.plan_changes(row(cudnn_floor), [d]).changes == ()
    below = refresh.plan_changes(row("9.0"), [d]).changes
    assert [(c.field, c.old, c.new) for c in below] == [("cudnn", "9.0", cudnn_floor)]
    assert derived.cudnn == cudnn_floor


def test_free_threaded_wheels_of_the_recorded_file_list_are_what_torch_toml_says() -> None:
    """torch.toml's free_threaded (issue 32) against the cp3XXt tags of the recorded PyPI file
    list: every release in both agrees, and releases without such tags have none."""
    by_release = refresh.wheels_for(refresh.parse_simple_json(simple("torch")))
    rows = {r.version: r for r in load_matrix().releases_of("torch")}
    compared = 0
    for release, wheels in by_release.items():
        version = str(release)
        if version not in rows:
            continue
        derived = refresh.free_threaded_specifier(wheels)
        has_t = any(re.search(r"-cp3\d+t-", w.file.filename) for w in wheels)
        assert (derived is not None) == has_t, version
        assert rows[version].free_threaded == derived, version
        compared += 1
    assert compared == len(by_release)  # 2.7.0, 2.7.1, 2.15.0: cp313t; cp314t and cp315t

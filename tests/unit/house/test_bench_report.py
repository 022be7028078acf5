"""The pure parts of `make bench` (benchmarks/): the report writer, the H200 result readers and
the layer analysis, fed canned data (no timing is measured or asserted here: benchmarks report,
tests check behaviour)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import build as build_bench
from benchmarks import common
from benchmarks import h200 as h200_bench
from benchmarks import layers as layers_bench
from benchmarks import lock as lock_bench
from benchmarks import report as report_bench
from envbuild.matrix import load_matrix


def _canned() -> dict[str, Any]:
    return {
        "machine": {"cpus": 2, "uv": "uv 0.13.9"},
        "settings": {"BENCH_REPEAT": 5},
        "cli_start": {
            "title": "1. CLI start",
            "rows": [
                common.row(
                    "`envbuild --help`", [0.2, 0.3, 0.25], [0.05, 0.04, 0.06], peer_name="py"
                )
            ],
            "notes": ["Wall time."],
        },
        "resolve": {
            "title": "2. Resolve",
            "rows": [common.row("sweep", 1234.5, unit="requests/s", note="34 s in all")],
        },
        "lock": {"title": "3. Lock", "skipped": "no network"},
        "build": {"title": "4. Build", "rows": [], "error": "envbuild image exited 5"},
        "smoke_h200": {"title": "5. Smoke", "pending": "PENDING: no GPU results yet"},
    }


def test_row_takes_medians_and_the_ratio_of_medians() -> None:
    r = common.row("x", [3.0, 1.0, 2.0], [4.0, 8.0, 6.0], peer_name="peer")
    assert r["envbuild"] == 2.0 and r["peer"] == 6.0
    assert r["ratio"] == 2.0 / 6.0
    assert r["n"] == 3
    assert r["samples"]["envbuild"] == [3.0, 1.0, 2.0]
    assert common.row("y", 5.0)["ratio"] is None


def test_report_has_one_table_row_per_measurement() -> None:
    text = report_bench.write_report(_canned())
    lines = text.splitlines()
    assert lines[0] == "# envbuild benchmarks"
    assert "- cpus: 2" in lines and "- settings: BENCH_REPEAT=5" in lines
    help_row = next(ln for ln in lines if ln.startswith("| `envbuild --help`"))
    cells = [c.strip() for c in help_row.strip("|").split("|")]
    assert cells == ["`envbuild --help`", "0.25 s", "50 ms", "py", "5.00x", "3", ""]
    sweep = next(ln for ln in lines if ln.startswith("| sweep"))
    assert "1,234 requests/s" in sweep or "1,235 requests/s" in sweep
    assert "Skipped: no network" in lines
    assert "**FAILED:**" in lines and "envbuild image exited 5" in text
    assert "**PENDING: no GPU results yet**" in lines
    assert "- Wall time." in lines
    # Deterministic: the same data gives the same text.
    assert report_bench.write_report(_canned()) == text


def test_smoke_results_fractions_come_from_the_matrix_baseline(tmp_path: Path) -> None:
    assert "pending" in h200_bench.smoke_results(tmp_path)
    report = {
        "ok": True,
        "tier": 2,
        "framework": "torch",
        "device": "cuda",
        "checks": [{"name": "gpu-visible", "status": "pass"}],
        "host": {"gpus": [{"name": "NVIDIA H200", "cc": "9.0"}]},
        "timings": {"import_s": 3.5, "tier1_s": 0.3, "tier2_s": 6.0, "total_s": 9.8},
        "metrics": {"perf": [{"index": 0, "bf16_tflops": 700.0, "mem_bw_tbs": 4.0}]},
    }
    (tmp_path / "h200-smoke-x.json").write_text(json.dumps(report))
    section = h200_bench.smoke_results(tmp_path)
    (only,) = section["runs"]
    assert only["total_s"] == 9.8 and only["ok"] is True and only["checks"] == 1
    base = next(b for b in load_matrix().baselines if b.gpu == only["baseline"]["gpu"])
    assert "H200" in base.gpu
    fig = only["figures"][0]
    assert fig["bf16_tflops_of_baseline"] == 700.0 / base.bf16_tflops
    assert base.datasheet_mem_bw_tbs is not None
    assert fig["mem_bw_tbs_of_datasheet"] == 4.0 / base.datasheet_mem_bw_tbs
    text = report_bench.write_report({"smoke_h200": section})
    assert "| h200-smoke-x.json | torch | 1 | 2 | PASS on cuda | 1 |" in text


def test_layer_analysis_finds_deleted_duplicated_and_cuda_content() -> None:
    mib = 1 << 20
    layers = [
        {"/usr/lib/libc.so.6": (2 * mib, "aa")},
        {
            "/tmp/wheels/torch-1-cp311.whl": (5 * mib, "bb"),
            "/opt/venv/lib/libcudnn.so.9": (3 * mib, "cc"),
        },
        {"/opt/venv/lib/libcudnn.so.9": (3 * mib, "cc"), "/opt/copy.so.6": (2 * mib, "aa")},
    ]
    whiteouts: list[list[str]] = [[], [], ["/tmp/wheels"]]
    out = layers_bench._analyse_layers(
        layers, whiteouts, [2 * mib, 8 * mib, 5 * mib], ["a", "b", "c"], mib
    )
    # The wheel (deleted later) and the first libcudnn (overwritten later) are dead weight.
    assert out["shadowed_bytes"] == 8 * mib
    assert out["cuda_libs_in_several_layers"] == ["libcudnn.so.9"]
    assert out["wheel_bytes"] == 5 * mib
    assert out["wheels_in_layers"] == ["layer 1: /tmp/wheels/torch-1-cp311.whl (5 MB)"]
    assert out["duplicate_bytes"] == 5 * mib  # libcudnn twice + libc copied under another name
    assert [layer["step"] for layer in out["layers"]] == ["a", "b", "c"]


def test_unreachable_index_retries_are_counted_per_index() -> None:
    line = (
        "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) "
        "after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection."
        "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -2] Name "
        "or service not known')': /whl/cpu/{}/"
    )
    log = "\n".join([line.format("torch"), line.format("sympy"), "Collecting torch", ""])
    assert build_bench._unreachable_retries(log) == {"/whl/cpu/": 2}
    assert build_bench._unreachable_retries("Successfully installed torch\n") == {}


def test_history_entries_read_as_the_dockerfile_wrote_them() -> None:
    assert (
        layers_bench._step_text("|1 DEBIAN_FRONTEND=noninteractive /bin/bash -o pipefail -c pip x")
        == "pip x"
    )
    assert (
        layers_bench._step_text("/bin/sh -c #(nop) COPY dir:abc in /wheels/")
        == "COPY dir:abc in /wheels/"
    )


def test_layer_analysis_names_each_layers_largest_file() -> None:
    mib = 1 << 20
    layers = [{"/a": (mib, ""), "/b": (3 * mib, "")}, {}]
    out = layers_bench._analyse_layers(layers, [[], []], [4 * mib, 0], ["x", "y"], 1 << 30)
    assert [layer["largest"] for layer in out["layers"]] == ["/b (3.1 MB)", ""]


def test_context_digests_are_shortened_for_readers() -> None:
    step = "COPY dir:" + "ab" * 32 + " in /tmp/envbuild-wheels/"
    assert layers_bench._short(step) == "COPY dir:abababababab in /tmp/envbuild-wheels/"


def test_goals_table_sets_each_ratio_beside_its_goal() -> None:
    data = _canned()
    data["machine"] = {"cpus": 2, "load average at start": "7.10 6.00 5.00"}
    data["cli_start"]["rows"] = [
        common.row("`envbuild --help`", [0.06], [0.05], peer_name="click", goal=1.2),
        common.row("`envbuild resolve`", [0.12], [0.05], peer_name="click", goal=2.0),
        common.row("`python -c pass`", [0.01]),
    ]
    lines = report_bench.write_report(data).splitlines()
    start = lines.index("## Speed goals")
    end = lines.index("## 1. CLI start", start)
    table = [ln for ln in lines[start:end] if ln.startswith("| `")]
    assert [c.strip() for c in table[0].strip("|").split("|")] == [
        "`envbuild --help`",
        "1",
        "60 ms",
        "50 ms",
        "1.20x",
        "<= 1.20x",
        "yes",
    ]
    assert table[1].endswith("| 2.40x | <= 2.00x | **no**, 20% over |")
    assert len(table) == 2  # a row without a goal is not a goal
    assert any(
        ln.startswith("**The machine was loaded** (1-minute load average up to 7.1 on 2")
        for ln in lines
    )


def test_lock_peer_allows_the_sdist_the_lock_takes_and_nothing_else() -> None:
    # images/torch-ext locks envbuild-vecadd from its sdist: the peer's `--only-binary :all:`
    # alone refuses it ("has no usable wheels"), so the user's command names it, as envbuild's
    # does; torch-cpu's lock has no sdist and its peer is pydeps' command unchanged.
    from envbuild.lock import format as lockfile
    from envbuild.lock import pins as pydeps
    from envbuild.request.parse import load_request

    for name, extra in [("torch-ext", ["--no-binary", "envbuild-vecadd"]), ("torch-cpu", [])]:
        image = common.ROOT / "images" / name
        lock = lockfile.loads((image / "envbuild.lock").read_text())
        request = load_request(image)
        argv, requirements = lock_bench.peer_lock_command(
            lock, request, image_dir=image, uv=("uv",)
        )
        plain, plain_requirements = pydeps.peer_compile_command(
            lock, request, image_dir=image, uv=("uv",)
        )
        assert argv == [*plain, *extra]
        assert requirements == plain_requirements


def test_lock_peer_pins_a_builder_stage_with_a_second_command() -> None:
    # images/torch-ext's lock has a [build] stage (toolkit wheels, the sdist's build
    # requirements) pinned against the image's pins: a user gets the same with a second
    # `uv pip compile` constrained by the first one's output. torch-cpu has no stage.
    from envbuild.lock import format as lockfile
    from envbuild.request.parse import load_request

    image = common.ROOT / "images" / "torch-ext"
    lock = lockfile.loads((image / "envbuild.lock").read_text())
    argv, _ = lock_bench.peer_lock_command(lock, load_request(image), image_dir=image, uv=("uv",))
    second = lock_bench.peer_build_command(lock, argv)
    assert second is not None
    build_argv, build_in = second
    toolkit = next(p for p in lock.packages if p.name == "cuda-toolkit")
    lines = build_in.splitlines()
    # The toolkit the runtime pins, with nvcc; the runtime's own CCCL wheel (see
    # envbuild.cuda.extensions.toolchain_requirements); then the sdist's build requirements.
    assert lines[:2] == [f"cuda-toolkit[nvcc]=={toolkit.version}", "nvidia-cuda-cccl"]
    assert lines[2:] == sorted(next(p for p in lock.packages if p.sdist).build_requires)
    assert build_argv[:4] == ["uv", "pip", "compile", "build.in"]
    assert build_argv[-2:] == ["--constraint", "requirements.txt"]
    assert "--no-binary" not in build_argv
    assert build_argv[build_argv.index("--output-file") + 1] == "build.txt"

    cpu = common.ROOT / "images" / "torch-cpu"
    cpu_lock = lockfile.loads((cpu / "envbuild.lock").read_text())
    assert lock_bench.peer_build_command(cpu_lock, argv) is None


def _h200_build_fixture() -> dict[str, Any]:
    """A small h200-build-bench.json as tests/gpu/h200_build_bench.py writes it."""
    peer = "hand-written Dockerfile"
    return {
        "ok": True,
        "settings": {"cold_rounds": 3, "warm_samples": 3},
        "machine": {
            "gpu": {"name": "H200", "driver": "580.159.04", "count": "1"},
            "engine": "26.1.5+dfsg1",
            "cpus": 16,
            "torch": "2.11.0+cu130",
            "base": {"bytes": 6.2e9},
            "date_utc": "2026-12-01 22:25",
        },
        "setup": {"base_s": 39.85, "lock_s": {"tier2": 9.66}},
        "probes": {
            "container_python_pass": [{"rc": 0, "seconds": 0.18}],
            "container_import_torch_gpu": [{"rc": 0, "seconds": 6.23}],
            "host_check": [{"rc": 0, "seconds": 11.3, "split": {"import_s": 4.1}}],
        },
        "rows": [
            common.row(
                "H200 cold build",
                [17.0, 18.0, 16.0],
                [14.0, 13.0, 15.0],
                peer_name=peer,
                note="envbuild: build 0.59 s + smoke 15.80 s",
                goal=1.0,
            ),
            common.row(
                "H200 warm rebuild", [1.0, 1.2, 1.1], [14.0, 13.0, 15.0], peer_name=peer, goal=1.3
            ),
            common.row(
                "H200 cold build, tier 1", [7.0, 7.5, 8.0], [14.0, 13.0, 15.0], peer_name=peer
            ),
        ],
    }


def test_h200_build_result_is_pending_until_committed(tmp_path: Path) -> None:
    section = h200_bench.h200_build_results(tmp_path)
    assert section["pending"].startswith("PENDING: no benchmarks/results/h200-build-bench.json")
    data = {**_canned(), "h200_build": section}
    lines = report_bench.write_report(data).splitlines()
    assert f"**{section['pending']}**" in lines
    assert "## Speed goals" not in lines  # nothing measured, no goal row


def test_h200_build_rows_sit_beside_their_goals(tmp_path: Path) -> None:
    (tmp_path / "h200-build-bench.json").write_text(json.dumps(_h200_build_fixture()))
    section = h200_bench.h200_build_results(tmp_path)
    data = {**_canned(), "h200_build": section}
    lines = report_bench.write_report(data).splitlines()
    start = lines.index("## Speed goals")
    goals = [ln for ln in lines[start:] if ln.startswith("| H200")][:2]
    assert goals == [
        "| H200 cold build | 6 | 17 s | 14 s | 1.21x | <= 1.00x | **no**, 21% over |",
        "| H200 warm rebuild | 6 | 1.1 s | 14 s | 0.08x | <= 1.30x | yes |",
    ]
    assert (
        "## 6. Build on the H200 (committed GPU run: benchmarks/results/h200-build-bench.json)"
        in lines
    )
    tier1 = next(ln for ln in lines if ln.startswith("| H200 cold build, tier 1 |"))
    assert [c.strip() for c in tier1.strip("|").split("|")][1:6] == [
        "7.5 s",
        "14 s",
        "hand-written Dockerfile",
        "0.54x",
        "3",
    ]
    notes = [ln for ln in lines if ln.startswith("- Measured 2026-12-01 22:25 UTC on 1 x H200")]
    assert len(notes) == 1 and "torch 2.11.0+cu130" in notes[0] and "6.2 GB" in notes[0]
    assert any("a bare container 0.18 s" in ln and "import 4.1 s" in ln for ln in lines)
    # A base recorded without byte_compile was made before the venv was compiled: said.
    assert any(
        ln.startswith("- **Caveat:** this run's stand-in base had no byte-code") for ln in lines
    )


def test_a_byte_compiled_base_is_said_without_the_caveat(tmp_path: Path) -> None:
    doc = _h200_build_fixture()
    doc["machine"]["base"]["byte_compile"] = {"seconds": 9.0, "pyc_files": 5933}
    (tmp_path / "h200-build-bench.json").write_text(json.dumps(doc))
    notes = h200_bench.h200_build_results(tmp_path)["notes"]
    assert any("carries byte-code, as pip leaves an install (5933 .pyc files" in n for n in notes)
    assert not any("Caveat" in n for n in notes)


def test_a_broken_h200_build_file_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "h200-build-bench.json").write_text("{not json")
    section = h200_bench.h200_build_results(tmp_path)
    assert section["rows"] == [] and "h200-build-bench.json unreadable" in section["error"]
    doc = {**_h200_build_fixture(), "ok": False, "error": "RuntimeError: peer check exited 1"}
    (tmp_path / "h200-build-bench.json").write_text(json.dumps(doc))
    text = report_bench.write_report(
        {**_canned(), "h200_build": h200_bench.h200_build_results(tmp_path)}
    )
    assert "**FAILED:**" in text and "RuntimeError: peer check exited 1" in text


def test_h200_cold_gap_splits_the_difference_by_stage() -> None:
    stages = {
        "envbuild_cold": {
            **{"wall_s": 17.6, "build_s": 0.6, "other_s": 1.2, "smoke_s": 15.8, "tag_s": 0.1},
            "payload": {"tier1_s": 0.3, "conv_s": 0.2, "sdpa_s": 1.0, "perf_s": 0.1},
        },
        "peer_cold": {"wall_s": 14.0, "build_s": 0.05, "run_s": 13.9},
    }
    runs = [
        {"steps": {"build": 0.6, "smoke": 15.8, "engine": 0.2, "inputs": 0.1}, "cli_start_s": 0.3},
        {"steps": {"build": 0.5, "smoke": 15.0, "engine": 0.4, "inputs": 0.1}, "cli_start_s": 0.5},
    ]
    text = h200_bench._h200_cold_gap(stages, {"envbuild_cold": runs})
    assert text.startswith("Where the cold difference (+3.6 s) goes, medians: ")
    assert "own steps (build, tag and the rest) 1.9 s against the peer's build 50 ms" in text
    assert "tier 1 0.3 s and its tier 2 checks beyond training" in text and "1.3 s." in text
    # The steps beside build and smoke, as medians, largest first, the CLI start among them.
    assert text.endswith("(`steps_s`): CLI start 0.4 s, engine 0.3 s, inputs 0.1 s.")
    # The peer that checks the same things is the one compared with, where the run has it.
    full = {**stages, "peer_full_cold": {"wall_s": 17.0, "build_s": 0.05, "run_s": 16.9}}
    assert "difference (+0.6 s)" in h200_bench._h200_cold_gap(full, {})
    assert h200_bench._h200_cold_gap({"peer_cold": stages["peer_cold"]}, {}) == ""


def test_lock_peer_resolves_a_projects_own_requirements_too() -> None:
    # images/torch-project's requirements come from its pyproject.toml ([packages] files,
    # extras, and the build backend its install needs): the peer asks uv for the same lines.
    from envbuild.app import lock_project as project_lock
    from envbuild.lock import format as lockfile
    from envbuild.request.parse import load_request

    image = common.ROOT / "images" / "torch-project"
    lock = lockfile.loads((image / "envbuild.lock").read_text())
    request = load_request(image)
    _, requirements = lock_bench.peer_lock_command(lock, request, image_dir=image, uv=("uv",))
    project = project_lock.read_inputs(image, request)
    assert project is not None and "hatchling>=1.18" in project.lines
    assert requirements.splitlines()[-len(project.lines) :] == list(project.lines)


def test_the_fleet_benchmark_inputs_read_back_in_every_end_state(tmp_path: Path) -> None:
    """benchmarks/fleet.py's made-up fleets are runs `fleet results` understands: the share of
    each end state it writes is what the view counts (no timing is asserted)."""
    from benchmarks import fleet as bench
    from envbuild.app import fleet as app
    from envbuild.preflight import fleet_run

    view = fleet_run.k8s_results(bench.k8s_listing(200))
    assert view.to_json()["counts"] == {
        "evicted": 4, "failed": 10, "never_scheduled": 4, "never_started": 2, "passed": 180,
    }  # fmt: skip
    run = bench.slurm_folder(tmp_path, 200)
    slurm = fleet_run.slurm_results(app.read_slurm_folder(run, ""))
    assert slurm.to_json()["counts"] == {"failed": 14, "never_started": 6, "passed": 180}


def test_cuda_peer_requirements_pin_every_locked_package_with_its_hashes() -> None:
    from benchmarks import cuda_image
    from envbuild.lock import format as lockfile

    text = (common.ROOT / "images" / "torch-slim" / "envbuild.lock").read_text()
    lock = lockfile.loads(text)
    reqs = cuda_image.requirements_from_lock(text)
    for p in lock.packages:
        assert f"{p.name}=={p.version} \\" in reqs
        for h in p.hashes:
            assert f"--hash={h}" in reqs
    assert reqs.count("==") == len(lock.packages)


def test_cuda_image_section_is_read_back_and_reported_with_its_goals(tmp_path: Path) -> None:
    from benchmarks import cuda_image

    assert cuda_image.cuda_image_results(tmp_path) == {}
    section = {
        "title": "9. CUDA image build",
        "rows": [
            common.row("cold", [200.0, 210.0], [190.0, 200.0], peer_name="p", goal=1.0),
            common.row("size", 4.1, 4.0, unit="GB", goal=0.9),
        ],
        "notes": [],
        "machine": {"date (UTC)": "2026-12-03 07:39", "git": "abc1234"},
    }
    (tmp_path / "cuda-image.json").write_text(json.dumps(section))
    read = cuda_image.cuda_image_results(tmp_path)
    assert "measured alone, 2026-12-03 07:39 UTC, git abc1234" in read["notes"][-1]
    text = report_bench.write_report({**_canned(), "cuda_image": read})
    assert "## 9. CUDA image build" in text
    assert "| cold | 9 |" in text and "| size | 9 |" in text
    assert "**no**, 14% over" in text  # 4.1 / 4.0 = 1.025x against 0.90x

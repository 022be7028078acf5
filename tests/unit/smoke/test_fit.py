"""Memory fit of a smoke report against GPUs (data-driven: tests/cases/smoke/fit/cases.json),
the matrix's memory_gib and its strict checks, and the fleet view's too-small hosts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envbuild import matrix as matrix_data
from envbuild.core.models import Host, HostGpu
from envbuild.matrix.parse import check_files
from envbuild.preflight.fleet import host_memory_fit
from envbuild.smoke import fit

CASES = json.loads((Path(__file__).parents[2] / "cases/smoke/fit/cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_fit_cases(case: dict[str, Any]) -> None:
    gpus = [(name, float(gib)) for name, gib in case["gpus"]]
    got = fit.memory_fit({"metrics": case["metrics"]}, gpus)
    if case["source"] is None:
        assert got is None
        return
    assert got is not None
    assert got.peak.source == case["source"]
    assert [g.gpu for g in got.gpus if g.fits] == case["fits"]
    assert [g.gpu for g in got.too_small] == case["too_small"]
    assert got.summary() == case["summary"]
    doc = got.to_json()
    assert doc["too_small"] == case["too_small"] and doc["summary"] == case["summary"]


def test_headroom_rule_numbers() -> None:
    torch = fit.Peak(10 * 1024, "torch")
    assert torch.need_gib == pytest.approx(10 * 1.1 + 0.5)
    assert fit.Peak(10 * 1024, "nvml").need_gib == pytest.approx(11.0)


MATRIX = matrix_data.load_matrix_from(None)
TABLE = fit.matrix_memory(MATRIX)


@pytest.mark.parametrize(
    ("name", "gib"),
    [
        ("H100", 80),
        ("NVIDIA H100 80GB HBM3", 80),
        ("NVIDIA H100 NVL", 94),
        ("NVIDIA H200", 141),
        ("NVIDIA A100-SXM4-40GB", 40),
        ("NVIDIA A100 80GB PCIe", 80),
        ("NVIDIA L4", 24),
        ("NVIDIA L40S", 48),
        ("NVIDIA A10", 24),
        ("Tesla T4", 16),
        ("Tesla V100-SXM2-16GB", 16),
        ("Tesla V100-PCIE-32GB", 32),
        ("NVIDIA GeForce RTX 4090", 24),
        ("B200", 180),
    ],
)
def test_matrix_memory_of_common_gpus(name: str, gib: float) -> None:
    assert fit.memory_of_name(name, TABLE) == gib


def test_unknown_gpu_has_no_memory() -> None:
    assert fit.memory_of_name("NVIDIA GH200 480GB", TABLE) is None
    assert fit.memory_of_name("Radeon", TABLE) is None


def _gpus_toml(memory: str) -> dict[str, str]:
    return {
        "gpus.toml": 'schema_version = 1\n[[arch]]\ncc = "9.0"\nsm = "sm_90"\nfamily = "Hopper"\n'
        'gpus = ["H100", "H200"]\nsource = "x"\n' + memory
    }


@pytest.mark.parametrize(
    ("memory", "problem"),
    [
        ('memory_gib = { "H100" = 80 }\n', "needs memory_source"),
        ('memory_gib = { "B200" = 180 }\nmemory_source = "https://x"\n', "not one of this arch"),
        ('memory_gib = { "H100" = 0.5 }\nmemory_source = "https://x"\n', "between 1 and 1024"),
        ('memory_gib = { "H100" = 80, "h 100" = 80 }\nmemory_source = "https://x"\n', "twice"),
        ('memory_gib = { "H100" = "80" }\nmemory_source = "https://x"\n', "memory_gib must be"),
        ('memory_gib = ["H100"]\nmemory_source = "https://x"\n', "memory_gib must be"),
        ('memory_source = "https://x"\n', "memory_source without memory_gib"),
    ],
)
def test_memory_gib_is_checked_strictly(memory: str, problem: str) -> None:
    report = check_files(_gpus_toml(memory))
    assert any(problem in p for p in report.problems), report.problems


def test_memory_gib_ok_and_variant_names() -> None:
    text = 'memory_gib = { "H100 80GB" = 80, "H200" = 141 }\nmemory_source = "https://x"\n'
    assert not [p for p in check_files(_gpus_toml(text)).problems if "memory" in p]


def test_shipped_matrix_has_the_common_datacenter_gpus() -> None:
    names = {n for n, _ in TABLE}
    for want in ("H100", "H200", "A100 40GB", "A100 80GB", "L4", "L40S", "A10", "T4", "B200"):
        assert want in names
    for arch in MATRIX.archs:
        if arch.memory_gib:
            assert "https://" in arch.memory_source


def test_host_memory_fit_uses_nvml_memory_then_the_matrix() -> None:
    peak = fit.Peak(30 * 1024, "torch")  # needs 33.5 GiB
    small = Host(name="l4", driver="570", gpus=(HostGpu("NVIDIA L4", "8.9"),))
    big = Host(
        name="h100",
        driver="570",
        gpus=(HostGpu("NVIDIA H100 80GB HBM3", "9.0", memory_mib=81559),),
    )
    unknown = Host(name="x", driver="570", gpus=(HostGpu("Mystery", "9.0"),))
    assert host_memory_fit(small, peak, TABLE)["fits"] is False
    got = host_memory_fit(big, peak, TABLE)
    assert got["fits"] is True and got["memory_gib"] == 79.6
    assert host_memory_fit(unknown, peak, TABLE)["fits"] is None


def test_the_fit_is_held_against_the_locks_target_gpus() -> None:
    # An H100 + L4 + A100 request: the table is those GPUs (both A100 sizes), not the whole
    # matrix; without targets (or none known) it is the whole table.
    table = fit.matrix_memory(matrix_data.load_matrix_from(None))
    picked = fit.for_targets(table, ["H100", "L4", "A100"])
    names = {name for name, _ in picked}
    assert {"H100", "L4", "A100 40GB", "A100 80GB"} <= names
    assert "T4" not in names and "H200" not in names
    assert fit.for_targets(table, []) == table
    assert fit.for_targets(table, ["sm_90"]) == table


def test_the_projects_own_step_can_set_the_peak() -> None:
    # The payload's small transformer used 3 GiB; the project's step (watched) 38 GiB.
    report = {"metrics": {"nvml": {"mem_used_mib": 3 * 1024}}}
    command = {"watch": {"peaks": {"mem_used_mib": 38 * 1024, "samples": 40}}}
    got = fit.memory_fit(report, [("H100", 80.0), ("L4", 24.0)], command)
    assert got is not None
    assert got.peak.source == "nvml, the project's smoke step"
    assert [g.gpu for g in got.too_small] == ["L4"]
    assert got.summary().startswith("peak 38.0 GiB (nvml, the project's smoke step): fits H100")
    alone = fit.memory_fit(report, [("L4", 24.0)], None)
    assert alone is not None and alone.peak.source == "nvml" and not alone.too_small

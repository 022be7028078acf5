"""Fleet verdicts from what the image needs: the real `images/torch-train` lock and the real
matrix against recorded (`doctor --json`) and hand-written fleets (tests/fixtures/hosts)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envbuild.cli.main import cli
from envbuild.core.errors import UserError
from envbuild.core.models import Host, HostGpu, Lock
from envbuild.host.probe import host_from_facts, load_facts_file
from envbuild.lock.format import loads
from envbuild.matrix import Matrix, load_matrix
from envbuild.preflight import validate as v
from envbuild.preflight.fleet import FleetView, fleet_view

ROOT = Path(__file__).resolve().parents[3]
HOSTS = ROOT / "tests" / "fixtures" / "hosts"
LOCK_DIR = ROOT / "images" / "torch-train"


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix()


@pytest.fixture(scope="module")
def lock() -> Lock:
    return loads((LOCK_DIR / "envbuild.lock").read_text(), path="images/torch-train")


def view_of(path: Path, lock: Lock, matrix: Matrix) -> FleetView:
    facts = load_facts_file(path)
    hosts = [(host_from_facts(f, gpu_cc=v.gpu_cc_of(matrix)), f) for f in facts]
    return fleet_view([("images/torch-train", lock)], hosts, matrix=matrix)


def verdicts(view: FleetView) -> dict[str, tuple[str, str]]:
    """host -> (outcome, fix)."""
    out: dict[str, tuple[str, str]] = {}
    for r in view.results:
        assert r.verdict is not None
        out[r.host] = (r.verdict.outcome, r.verdict.fix)
    return out


def test_the_lock_is_the_one_the_issue_describes(lock: Lock) -> None:
    # What the verdicts below rest on: CUDA 12.8.1 wheels, targets.driver 570.124.06 with
    # minor-version compatibility allowed, sm_70..sm_120 cubins, cuDNN 9.10.2.21.
    assert (lock.stack.cuda, lock.targets.driver, lock.compat) == ("12.8.1", "570.124.06", "minor")
    assert lock.stack.floors is not None and lock.stack.floors.minor_compat == "525.60.13"
    assert "sm_70" in lock.stack.archs and "sm_60" not in lock.stack.archs


# --- the hand-written fleet, in the documented format --------------------------------------------

RELOCK_4090 = (
    're-lock for this host: set targets.driver = "550.127.05" in images/torch-train/envbuild.toml, '
    "then `envbuild lock images/torch-train` (its NVIDIA_REQUIRE_CUDA then asks only for what "
    "this driver runs under minor-version compatibility)"
)
EXPECTED = {
    "h100-a": ("runs", ""),
    "l4-a": ("runs_minor_compat", ""),
    "v100-a": ("runs_minor_compat", ""),
    "h100-nocc": ("runs", ""),
    "a100-470": ("does_not_run", "upgrade the host driver to >= 570.124.06 (CUDA 12.8)"),
    "rtx4090-550": ("does_not_run", RELOCK_4090),
    "p100-550": (
        "does_not_run",
        'add "Tesla P100-PCIE-16GB" to targets.gpus in images/torch-train/envbuild.toml, then '
        "`envbuild lock images/torch-train`",
    ),
    "cpu-only": (
        "does_not_run",
        "run it on a host with an NVIDIA GPU (`envbuild doctor` there lists them)",
    ),
}


def test_handwritten_fleet_verdicts(lock: Lock, matrix: Matrix) -> None:
    view = view_of(HOSTS / "fleet-handwritten.jsonl", lock, matrix)
    assert verdicts(view) == EXPECTED
    assert view.passing("images/torch-train") == ["h100-a", "l4-a", "v100-a", "h100-nocc"]


def test_h100_at_the_lock_target_runs_with_cuda_from_the_driver(lock: Lock, matrix: Matrix) -> None:
    # The issue's first point: the documented facts of the lock's own target got "no".
    facts = {"name": "n1", "driver": "570.124.06", "gpus": [{"name": "H100", "cc": "9.0"}]}
    pf = v.preflight(lock, host_from_facts(facts), facts=facts, matrix=matrix)
    assert pf.verdict is not None and pf.verdict.outcome == "runs"
    require = next(c for c in pf.checks if c.name == "require-cuda")
    assert require.status == "pass"
    assert require.detail.endswith("holds (CUDA 12.8 derived from driver 570.124.06)")
    assert all(c.status == "pass" for c in pf.checks)


def test_without_the_matrix_the_cuda_version_stays_unknown_and_the_fix_says_record_it(
    lock: Lock,
) -> None:
    facts = {"name": "n1", "driver": "570.124.06", "gpus": [{"name": "H100", "cc": "9.0"}]}
    pf = v.preflight(lock, host_from_facts(facts), facts=facts)
    assert pf.verdict is not None and pf.verdict.outcome == "does_not_run"
    assert pf.verdict.fix == v.RECORD_FACTS  # not "re-lock with targets.driver = 570.124.06"


def test_l4_on_550_relies_on_minor_version_compatibility_and_says_what_it_gives_up(
    lock: Lock, matrix: Matrix
) -> None:
    pf = view_of(HOSTS / "fleet-handwritten.jsonl", lock, matrix).result(
        "images/torch-train", "l4-a"
    )
    assert pf.verdict is not None
    assert pf.verdict.reason == (
        "driver 550.127.05 is below 570.124.06, CUDA 12.8.1's own floor, and reaches 525.60.13, "
        "the minor-version-compatibility floor of CUDA 12.x"
    )
    assert "cannot JIT-compile PTX newer than CUDA 12.4" in pf.verdict.gives_up
    assert "cudaErrorCallRequiresNewerDriver" in pf.verdict.gives_up
    # No brand in the facts: the expression holds only through datacenter brands' clauses.
    (note,) = pf.verdict.notes
    assert note.startswith("NVIDIA_REQUIRE_CUDA holds on GPU 0 only through its forward-compat")
    assert "geforce board would be refused" in note


def test_a_strict_lock_needs_the_toolkit_floor(lock: Lock, matrix: Matrix) -> None:
    strict = replace(lock, compat="strict")
    view = fleet_view(
        [("strict", strict)],
        [(host_from_facts(f), f) for f in load_facts_file(HOSTS / "fleet-handwritten.jsonl")[:2]],
        matrix=matrix,
    )
    (h100, l4) = view.results
    assert h100.verdict is not None and h100.verdict.outcome == "runs"
    assert l4.verdict is not None and l4.verdict.outcome == "does_not_run"
    assert 'the lock says compat = "strict"' in l4.verdict.reason
    assert l4.verdict.fix == "upgrade the host driver to >= 570.124.06 (CUDA 12.8)"


def test_fixes_never_ask_for_what_is_already_true(lock: Lock, matrix: Matrix) -> None:
    view = view_of(HOSTS / "fleet-handwritten.jsonl", lock, matrix)
    facts = {f.get("name"): f for f in load_facts_file(HOSTS / "fleet-handwritten.jsonl")}
    for r in view.results:
        assert r.verdict is not None
        fix = r.verdict.fix
        assert f'targets.driver = "{lock.targets.driver}"' not in fix
        m = re.search(r"upgrade the host driver to >= (\S+)", fix)
        driver = facts[r.host].get("driver")
        if m and driver:
            assert tuple(map(int, m.group(1).split("."))) > tuple(map(int, driver.split(".")))
        for name in re.findall(r'add "([^"]+)" to targets.gpus', fix):
            assert name not in lock.targets.gpus


# --- host facts as documented --------------------------------------------------------------------


def test_cc_is_optional_when_the_name_is_known(matrix: Matrix) -> None:
    host = host_from_facts(
        {"driver": "570.124.06", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}, {"name": "L4"}]},
        gpu_cc=v.gpu_cc_of(matrix),
    )
    assert [g.cc for g in host.gpus] == ["9.0", "8.9"]


def test_an_unknown_name_without_cc_is_a_user_error(matrix: Matrix) -> None:
    with pytest.raises(UserError, match=r"host facts of x: gpus\[0\] has no 'cc', and unknown GPU"):
        host_from_facts(
            {"name": "x", "driver": "570.124.06", "gpus": [{"name": "Frobnicator 9000"}]},
            gpu_cc=v.gpu_cc_of(matrix),
        )
    with pytest.raises(UserError, match=r"gpus\[0\] needs 'cc'"):  # no matrix: as before
        host_from_facts({"driver": "570.124.06", "gpus": [{"name": "H100"}]})


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [
        ("570.124.06", "12.8"),
        ("570.26", "12.8"),
        ("550.127.05", "12.4"),
        ("535.230.02", "12.2"),
        ("580.159.04", "13.0"),  # what NVML reported on the recorded H200 (h200-healthy.json)
        ("470.256.02", "11.4"),
        (None, None),
        ("not-a-version", None),
    ],
)
def test_host_cuda_from_the_driver(matrix: Matrix, driver: str | None, cuda: str | None) -> None:
    assert v.driver_cuda(driver, matrix) == cuda


def test_recorded_h200_cuda_matches_the_derivation(matrix: Matrix) -> None:
    facts = json.loads((HOSTS / "h200-healthy.json").read_text())
    assert v.driver_cuda(facts["driver"]["version"], matrix) == facts["driver"]["cuda"]


def test_doctor_record_and_handwritten_facts_give_the_same_verdicts(
    lock: Lock, matrix: Matrix
) -> None:
    recorded = verdicts(view_of(HOSTS / "fleet-doctor.jsonl", lock, matrix))
    written = verdicts(view_of(HOSTS / "fleet-handwritten.jsonl", lock, matrix))
    assert set(recorded) == {"h100-a", "l4-a", "v100-a"}
    assert recorded == {h: written[h] for h in recorded}


def test_doctor_records_carry_what_handwritten_facts_leave_out() -> None:
    # The recorded twins have brand, CUDA and free memory; the hand-written ones need none.
    for record in load_facts_file(HOSTS / "fleet-doctor.jsonl"):
        assert record["driver"]["cuda"] and record["findings"]
        assert all(g["brand"] and g["memory_free_mib"] for g in record["gpus"])


# --- what the image needs, one at a time ---------------------------------------------------------


def one_host(*gpus: HostGpu, driver: str = "570.124.06") -> Host:
    return Host(driver=driver, gpus=gpus, name="h")


def test_cudnn_range_below_fails_with_the_gpu_to_add(lock: Lock, matrix: Matrix) -> None:
    # A build that has sm_37 code but whose cuDNN (9.10.2.21: cc >= 5.0) refuses the K80.
    k80_lock = replace(lock, stack=replace(lock.stack, archs=("sm_37", *lock.stack.archs)))
    pf = v.preflight(k80_lock, one_host(HostGpu("Tesla K80", "3.7", brand="tesla")), matrix=matrix)
    assert [(c.name, c.status) for c in pf.checks if c.status == "fail"] == [("cudnn", "fail")]
    assert pf.verdict is not None and pf.verdict.fix == (
        'add "Tesla K80" to targets.gpus in images/torch-train/envbuild.toml, then '
        "`envbuild lock images/torch-train`"
    )


def test_cudnn_above_its_listed_range_is_a_note(lock: Lock, matrix: Matrix) -> None:
    # cc 12.1 (DGX Spark's GB10): sm_120 cubins cover it; cuDNN 9.10.2's matrix stops at 12.0.
    pf = v.preflight(lock, one_host(HostGpu("GB10", "12.1", brand="nvidia")), matrix=matrix)
    assert pf.verdict is not None and pf.verdict.outcome == "runs"
    assert pf.verdict.notes == (
        "cuDNN 9.10.2.21's support matrix lists compute capability up to 12.0; GPU 0 GB10 is "
        "12.1 (not listed, not excluded)",
    )


def facts_with(**gpu: Any) -> dict[str, Any]:
    facts: dict[str, Any] = json.loads((HOSTS / "h200-healthy.json").read_text())
    facts["gpus"][0].update(gpu)
    return facts


def test_too_little_gpu_memory_fails_with_tier_1_as_the_fix(lock: Lock, matrix: Matrix) -> None:
    facts = facts_with(memory_mib=2048)
    pf = v.preflight(lock, host_from_facts(facts), facts=facts, matrix=matrix)
    assert pf.verdict is not None and pf.verdict.outcome == "does_not_run"
    assert pf.verdict.reason == (
        "GPU 0 NVIDIA H200 has 2048 MiB; the smoke test (tier 2) needs 4096 MiB free"
    )
    assert pf.verdict.fix == (
        "set tier = 1 under [smoke] in images/torch-train/envbuild.toml (it needs 512 MiB)"
    )


def test_busy_gpu_fails_on_recorded_free_memory(lock: Lock, matrix: Matrix) -> None:
    facts = facts_with(memory_free_mib=1000)
    pf = v.preflight(lock, host_from_facts(facts), facts=facts, matrix=matrix)
    assert pf.verdict is not None
    assert pf.verdict.fix == "free GPU 0: stop the processes `nvidia-smi` lists on it"
    roomy = facts_with(memory_free_mib=140000)
    ok = v.preflight(lock, host_from_facts(roomy), facts=roomy, matrix=matrix)
    assert ("memory", "pass") in [(c.name, c.status) for c in ok.checks]


def test_small_host_shm_is_a_note_not_a_failure(lock: Lock, matrix: Matrix) -> None:
    facts = json.loads((HOSTS / "small-shm.json").read_text())  # L4 on 550, /dev/shm 64 MiB
    pf = v.preflight(lock, host_from_facts(facts), facts=facts, matrix=matrix)
    assert pf.verdict is not None and pf.verdict.outcome == "runs_minor_compat"
    assert pf.verdict.notes == (
        "give containers their own /dev/shm of >= 1024 MiB (docker run --shm-size=1024m; the "
        "Kubernetes Job mounts a memory emptyDir), not --ipc=host: the host's is 64 MiB",
    )


def test_geforce_on_550_without_brand_runs_with_a_note_and_with_brand_does_not(
    lock: Lock, matrix: Matrix
) -> None:
    bare = v.preflight(
        lock, one_host(HostGpu("RTX 4090", "8.9"), driver="550.127.05"), matrix=matrix
    )
    assert bare.verdict is not None and bare.verdict.outcome == "runs_minor_compat"
    assert bare.verdict.notes and "geforce board would be refused" in bare.verdict.notes[0]
    branded = v.preflight(
        lock,
        one_host(HostGpu("RTX 4090", "8.9", brand="geforce"), driver="550.127.05"),
        matrix=matrix,
    )
    assert branded.verdict is not None and branded.verdict.fix == RELOCK_4090


def test_ptx_only_gpu_below_the_toolkit_floor_needs_the_toolkit_driver(
    lock: Lock, matrix: Matrix
) -> None:
    ptx_lock = replace(lock, stack=replace(lock.stack, archs=("sm_80", "compute_80")))
    pf = v.preflight(
        ptx_lock,
        one_host(HostGpu("H100", "9.0", brand="nvidia"), driver="550.127.05"),
        matrix=matrix,
    )
    assert pf.verdict is not None and pf.verdict.outcome == "does_not_run"
    assert pf.verdict.fix == "upgrade the host driver to >= 570.124.06 (CUDA 12.8)"


def test_mismatch_host_says_reboot_whatever_the_lock(lock: Lock, matrix: Matrix) -> None:
    facts = json.loads((HOSTS / "mismatch.json").read_text())
    pf = v.preflight(lock, host_from_facts(facts), facts=facts, matrix=matrix)
    assert pf.verdict is not None and pf.verdict.outcome == "does_not_run"
    assert pf.verdict.fix.startswith("reboot the host")


def test_verdict_json_is_plain(lock: Lock, matrix: Matrix) -> None:
    doc = view_of(HOSTS / "fleet-handwritten.jsonl", lock, matrix).to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["require_cuda"]["images/torch-train"] == lock.stack.base_image.require_cuda
    by_host = {r["host"]: r for r in doc["results"]}
    assert by_host["l4-a"]["verdict"] == "runs_minor_compat" and by_host["l4-a"]["runs"] is True
    assert by_host["a100-470"]["fix"].startswith("upgrade the host driver")
    assert "fix" not in by_host["h100-a"] and "gives_up" not in by_host["h100-a"]


# --- through the CLI -----------------------------------------------------------------------------

FLEET_TABLE = """\
lock                h100-a  l4-a                v100-a              h100-nocc  a100-470          rtx4090-550       p100-550       cpu-only
images/torch-train  yes     yes (minor compat)  yes (minor compat)  yes        no: driver-floor  no: require-cuda  no: gpu0-arch  no: gpus
"""


def test_cli_fleet_table_and_one_fix_per_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    hosts = "tests/fixtures/hosts/fleet-handwritten.jsonl"
    res = CliRunner().invoke(cli, ["validate", "--hosts", hosts, "--lock", "images/torch-train"])
    assert res.exit_code == 1
    assert res.output.startswith(FLEET_TABLE)
    assert res.output.count("    fix: ") == 4  # one per host that does not run
    assert "    fix: upgrade the host driver to >= 570.124.06 (CUDA 12.8)\n" in res.output
    assert res.output.count("    gives up: the driver cannot JIT-compile PTX newer than") == 2


def test_cli_fleet_json_matches_the_pure_view(lock: Lock, matrix: Matrix) -> None:
    res = CliRunner().invoke(
        cli,
        [
            *("validate", "--hosts", str(HOSTS / "fleet-handwritten.jsonl")),
            *("--lock", str(LOCK_DIR), "--json"),
        ],
    )
    doc = json.loads(res.stdout)
    got = {r["host"]: (r["verdict"], r.get("fix", "")) for r in doc["results"]}
    assert got == EXPECTED
    assert doc["require_cuda"][str(LOCK_DIR)] == lock.stack.base_image.require_cuda


def test_cli_single_host_minor_compat_verdict_and_brief_require_cuda(lock: Lock) -> None:
    env = {"ENVBUILD_HOST_FACTS": str(HOSTS / "small-shm.json")}  # L4 on 550, 64 MiB /dev/shm
    res = CliRunner().invoke(cli, ["validate", str(LOCK_DIR)], env=env)
    assert res.exit_code == 0, res.output
    tail = res.output.split("\n\nverdict: ", 1)[1].splitlines()
    assert tail[0] == (
        "runs relying on minor-version compatibility: driver 550.127.05 is below 570.124.06, "
        "CUDA 12.8.1's own floor, and reaches 525.60.13, the minor-version-compatibility floor "
        "of CUDA 12.x"
    )
    assert tail[1].startswith("  gives up: the driver cannot JIT-compile PTX newer than CUDA 12.4")
    assert tail[2].startswith("  note: give containers their own /dev/shm of >= 1024 MiB")
    full = lock.stack.base_image.require_cuda
    assert len(full) > 2000 and full not in res.output
    assert (
        "NVIDIA_REQUIRE_CUDA='cuda>=12.8' (+60 brand= forward-compat clauses: branches 470, 535, "
        "550, 560, 565) holds"
    ) in res.output
    doc = json.loads(CliRunner().invoke(cli, ["validate", str(LOCK_DIR), "--json"], env=env).stdout)
    assert doc["require_cuda"] == full
    assert doc["verdict"]["outcome"] == "runs_minor_compat"


def test_recorded_h200_with_free_memory_runs(lock: Lock, matrix: Matrix) -> None:
    facts = json.loads((HOSTS / "h200-doctor-free.json").read_text())
    host = host_from_facts(facts, gpu_cc=v.gpu_cc_of(matrix))
    pf = v.preflight(lock, host, facts=facts, matrix=matrix)
    assert pf.verdict is not None and pf.verdict.outcome == "runs"
    memory = next(c for c in pf.checks if c.name == "memory")
    assert memory.detail == "every GPU has >= 4096 MiB free"

"""NGC framework containers as bases: the matrix table (matrix/ngc.toml, strict at load, in
`matrix check` and the compiled cache), the lock's facts from a row when the image is not
probed, a probe checked against the row, and the data-driven cases of tests/cases/ngc/.

Each case file holds one case:

    fact = "the published facts it rests on, with their sources"
    [request]                     # framework-base request keys
    base = "nvcr.io/nvidia/pytorch:25.12-py3"
    framework = "torch>=2.11"     # default "torch"
    gpus = ["H100"]
    driver = "580.95.05"
    compat = "strict"             # default "minor"
    packages = ["einops"]
    [probe]                       # absent: the engine does not answer, the row stands in
    version = "2.10.0a0+b4e4ee81d3.nv25.12"
    cuda = "13.1"                 # also cudnn, nccl, python, os, archs
    [expect]
    ok = true
    facts = "row"                 # or "probe": where the lock's facts come from
    framework_version = "..."     # cuda (major.minor), python: the stack's
    floors = ["toolkit", "minor_compat", "relied_on"]
    rows = ["cuda:13.1.0", ...]   # the matrix rows the lock's input hash covers
    notes = ["substring", ...]    # each in some stack note
    warnings = ["substring", ...] # each in some lock warning
    reasons = ["substring", ...]  # (ok = false) each in some reason
    error = "substring"           # (ok = false) the refusal's message
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envbuild.app import lock_base as base_lock
from envbuild.cli.main import cli
from envbuild.core.errors import EngineError, EnvbuildError, UnsatisfiableError, UserError
from envbuild.core.models import Request, Targets
from envbuild.core.resources import matrix_dir
from envbuild.engine.protocol import RunResult, RunSpec
from envbuild.lock.format import loads
from envbuild.matrix import check_files, clear_cache, load_matrix_from, read_matrix_files
from envbuild.render.dockerfile import RenderOptions, render_dockerfile
from envbuild.resolver import base as fb

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomlkit as tomllib

CASES = sorted((Path(__file__).parent.parent.parent / "cases" / "ngc").glob("*.toml"))
MATRIX = load_matrix_from(None)
REF = "nvcr.io/nvidia/pytorch:25.12-py3"
ROW_SOURCE = "https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/rel-25-12.html"
PROBE: dict[str, Any] = {
    "archs": [],
    "cuda": None,
    "cudnn": None,
    "error": None,
    "framework": "torch",
    "has_pip": True,
    "nccl": None,
    "os": "ubuntu24.04",
    "packages": {"torch": "2.10.0a0+b4e4ee81d3.nv25.12"},
    "python": "3.12",
    "python_path": "/usr/bin/python",
    "schema": 1,
}


class Unreachable:
    """An engine that does not answer."""

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        raise EngineError("cannot reach the Docker engine at unix:///nowhere.sock", hint="-")


class Holding:
    """An engine that has the image and runs the probe, which prints `facts`."""

    def __init__(self, facts: dict[str, Any]) -> None:
        self.facts = facts
        self.pulled = False

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        return "sha256:" + "c" * 64, "sha256:" + "d" * 64

    def run(self, spec: RunSpec) -> RunResult:
        line = "ENVBUILD-BASE-FACTS " + json.dumps(self.facts)
        return RunResult(exit_code=0, stdout=line + "\n", stderr="")


def _request(data: dict[str, Any]) -> Request:
    return Request(
        framework=data.get("framework", "torch"),
        base=data["base"],
        targets=Targets(gpus=tuple(data.get("gpus", ())), driver=data.get("driver")),
        compat=data.get("compat", "minor"),
        packages=tuple(data.get("packages", ())),
    )


def _engine(case: dict[str, Any]) -> Any:
    if "probe" not in case:
        return Unreachable()
    probe = case["probe"]
    return Holding({**PROBE, **probe, "archs": probe.get("archs", [])})


def test_there_are_cases_and_each_cites_its_fact() -> None:
    assert len(CASES) >= 6
    for path in CASES:
        case = tomllib.loads(path.read_text(encoding="utf-8"))
        assert "https://" in case["fact"], path.name
        assert set(case) <= {"fact", "request", "probe", "expect"}, path.name


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import envbuild.engine.registry

    monkeypatch.setattr(envbuild.engine.registry, "registry_digest", lambda ref, timeout=5.0: None)
    case = tomllib.loads(path.read_text(encoding="utf-8"))
    request, expect = _request(case["request"]), case["expect"]
    ngc = MATRIX.ngc_image(request.base or "")
    assert ngc is not None
    try:
        facts, _digest, warnings = base_lock.read_facts(
            _engine(case), request, "torch", matrix=MATRIX
        )
        stack = fb.stack_for_base(request, facts, MATRIX, ngc)
    except UnsatisfiableError as err:
        assert not expect["ok"], err.message
        for want in expect.get("reasons", []):
            assert any(want in r for r in err.fields["reasons"]), (want, err.fields["reasons"])
        return
    except EnvbuildError as err:  # refused outright: exit 2
        assert not expect["ok"] and expect["error"] in err.message, err.message
        assert err.exit_code == 2
        return
    assert expect["ok"], stack
    assert facts.source == {"row": ngc.key, "probe": "probe"}[expect["facts"]]
    for key in ("framework_version", "cuda", "python"):
        if key in expect:
            got = stack.framework.version if key == "framework_version" else getattr(stack, key)
            assert got == expect[key], key
    if "floors" in expect:
        assert stack.floors is not None
        floors = [stack.floors.toolkit, stack.floors.minor_compat, stack.floors.relied_on]
        assert floors == expect["floors"]
    if "rows" in expect:
        assert list(stack.rows) == expect["rows"]
    for want in expect.get("notes", []):
        assert any(want in n for n in stack.notes), (want, stack.notes)
    for want in expect.get("warnings", []):
        assert any(want in w for w in warnings), (want, warnings)


# --- the table ---------------------------------------------------------------------------------


def test_the_shipped_row_says_only_what_its_page_says() -> None:
    row = MATRIX.ngc_image(REF)
    assert row is not None and row.source == ROW_SOURCE
    assert (row.framework, row.framework_version, row.cuda, row.python) == (
        "torch",
        "2.10.0a0+b4e4ee81d3",
        "13.1.0",
        "3.12",
    )
    assert (row.cudnn, row.nccl, row.os, row.driver, row.compat_drivers, row.min_cc) == (
        None,
        None,
        None,
        None,
        (),
        None,
    )
    evidence = (matrix_dir() / "evidence" / "nvidia_ngc_release_notes_2026-12-01.txt").read_text()
    for quoted in (ROW_SOURCE, "based on CUDA 13.1.0", "based on 2.10.0a0+b4e4ee81d3"):
        assert quoted in evidence
    assert "/usr/local/lib/python3.12/dist-packages/torch" in evidence
    assert MATRIX.ngc_image(REF + "@sha256:" + "e" * 64) is row
    assert MATRIX.ngc_image("nvcr.io/nvidia/pytorch:25.11-py3") is None


ROW = """schema_version = 1

[[image]]
image = "nvcr.io/nvidia/pytorch:25.12-py3"
release = "25.12"
framework = "torch"
framework_version = "2.10.0a0+b4e4ee81d3"
cuda = "13.1.0"
source = "https://example.org/notes"
"""


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            ('cuda = "13.1.0"', 'cuda = "13.1.0"\ncudnn_version = "9"'),
            "unknown key 'cudnn_version'",
        ),
        (('source = "https://example.org/notes"\n', ""), "source is missing"),
        (('release = "25.12"', 'release = "25.11"'), "is not tagged with release 25.11"),
        (('cuda = "13.1.0"', 'cuda = "13.1"'), "cuda '13.1' must be a full release"),
        (('cuda = "13.1.0"', 'cuda = "13.7.0"'), "cuda 13.7.0 is not in cuda.toml"),
        (('framework = "torch"', 'framework = "paddle"'), "framework 'paddle' has no"),
        (('cuda = "13.1.0"', 'cuda = "13.1.0"\ndriver = "latest"'), "driver 'latest'"),
        (('cuda = "13.1.0"', 'cuda = "13.1.0"\ncompat_drivers = "535"'), "compat_drivers must"),
    ],
)
def test_a_bad_row_is_refused_with_file_and_row(change: tuple[str, str], problem: str) -> None:
    files = dict(read_matrix_files(matrix_dir(), label="matrix"))
    files["matrix/ngc.toml"] = ROW.replace(*change)
    report = check_files(files)
    assert not report.ok
    assert any(p.startswith("matrix/ngc.toml: image[1]") and problem in p for p in report.problems)


def test_matrix_check_counts_the_table() -> None:
    code = CliRunner().invoke(cli, ["matrix", "check"])
    assert code.exit_code == 0, code.stderr
    shipped = load_matrix_from(None)
    files = len(list(matrix_dir().glob("*.toml")))
    assert f", {len(shipped.ngc_images)} ngc_images, " in code.stdout
    assert code.stdout.endswith(f" python_builds ({files} files)\n")


def test_an_overlay_row_replaces_the_shipped_one_and_the_cache_sees_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "ngc.toml").write_text(ROW.replace('cuda = "13.1.0"', 'cuda = "13.1.0"\nos = "x"'))
    clear_cache()
    with pytest.raises(UserError, match=r"ngc\.toml: image\[1\].*os 'x'"):
        load_matrix_from(overlay)
    # Written again with a new size: the compiled cache may not serve the old parse.
    (overlay / "ngc.toml").write_text(
        ROW.replace('cuda = "13.1.0"', 'cuda = "13.1.0"\nos = "ubuntu24.04"')
    )
    clear_cache()
    row = load_matrix_from(overlay).ngc_image(REF)
    assert row is not None and (row.os, row.source) == ("ubuntu24.04", "https://example.org/notes")
    clear_cache()


# --- lock, on the command line -----------------------------------------------------------------


def test_lock_without_an_engine_records_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envbuild.app.inputs
    import envbuild.engine.registry

    digest = "sha256:" + "b" * 64
    monkeypatch.setattr(
        envbuild.engine.registry, "registry_digest", lambda ref, timeout=5.0: digest
    )
    monkeypatch.setattr(envbuild.app.inputs, "make_engine", lambda **kw: Unreachable())
    image = tmp_path / "ngc"
    image.mkdir()
    (image / "envbuild.toml").write_text(
        f'[image]\nbase = "{REF}"\n\n[framework]\nrequirement = "torch"\n\n'
        '[targets]\ngpus = ["H100"]\ndriver = "580.95.05"\n'
    )
    result = CliRunner().invoke(cli, ["lock", str(image)])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (
        f"wrote {image}/envbuild.lock: torch 2.10.0a0+b4e4ee81d3 (base), CUDA 13.1, "
        "Python 3.12, 0 packages\n"
        f"  base: {REF}\n"
        "  driver: >= 580 on every host ([targets] driver 580.95.05 meets it)\n"
    )
    assert result.stderr == (
        f"warning: {REF}: facts from the matrix row matrix/ngc.toml: image[1] ({REF}) "
        f"({ROW_SOURCE}), not probed: the engine does not answer (cannot reach the Docker "
        "engine at unix:///nowhere.sock)\n"
    )
    lock = loads((image / "envbuild.lock").read_text())
    assert lock.base_digest == digest and lock.base_facts is not None
    assert lock.base_facts.source == f"ngc:{REF}" and lock.base_facts.python_path == ""
    assert dict(lock.row_fingerprints).keys() == {"cuda:13.1.0", f"ngc:{REF}"}
    fresh = CliRunner().invoke(cli, ["lock", "--check", str(image)])
    assert (fresh.exit_code, fresh.stdout) == (
        0,
        f"{image}/envbuild.lock: fresh (torch 2.10.0a0+b4e4ee81d3 (base), 0 packages)\n",
    )
    text = render_dockerfile(lock, options=RenderOptions())
    assert f"FROM {REF}@{digest}\n" in text
    assert 'exec %s "$@"\\n\' python3 > /opt/envbuild/bin/python' in text


def test_lock_without_a_driver_says_the_floor_on_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver is the first thing to check on a host (nanotron's default lock needed >= 580
    and said so only in the lock's notes)."""
    import envbuild.app.inputs
    import envbuild.engine.registry

    monkeypatch.setattr(envbuild.engine.registry, "registry_digest", lambda ref, timeout=5.0: None)
    monkeypatch.setattr(envbuild.app.inputs, "make_engine", lambda **kw: Unreachable())
    image = tmp_path / "ngc"
    image.mkdir()
    (image / "envbuild.toml").write_text(
        f'[image]\nbase = "{REF}"\n\n[framework]\nrequirement = "torch"\n'
    )
    result = CliRunner().invoke(cli, ["lock", str(image)])
    assert result.exit_code == 0, result.stderr
    assert (
        "  driver: >= 590.44.01 on every host (no [targets] driver given: name the oldest driver of "
        "your hosts there, and the lock picks a stack that runs on it)\n"
    ) in result.stdout


def test_a_probe_that_contradicts_the_row_is_exit_2_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envbuild.app.inputs

    facts = {**PROBE, "version": "2.9.0a0+0000000000.nv25.10", "cuda": "13.0"}
    monkeypatch.setattr(envbuild.app.inputs, "make_engine", lambda **kw: Holding(facts))
    image = tmp_path / "ngc"
    image.mkdir()
    (image / "envbuild.toml").write_text(
        f'[image]\nbase = "{REF}"\n\n[framework]\nrequirement = "torch"\n'
    )
    result = CliRunner().invoke(cli, ["lock", str(image)])
    assert result.exit_code == 2
    assert (
        f"the base {REF} does not hold what matrix/ngc.toml: image[1] ({REF}) says: torch: "
        "2.10.0a0+b4e4ee81d3 in the row, 2.9.0a0+0000000000.nv25.10 in the image"
    ) in result.stderr
    assert ROW_SOURCE in result.stderr
    assert not (image / "envbuild.lock").exists()


def test_row_disagreements_compare_on_what_both_print() -> None:
    row = MATRIX.ngc_image(REF)
    assert row is not None
    row = dataclasses.replace(row, cudnn="9.17.0.29", os="ubuntu24.04")
    facts = fb.facts_from_row(row)
    same = dataclasses.replace(
        facts, framework_version="2.10.0a0+b4e4ee81d3.nv25.12", cuda="13.1", cudnn="9.17.0"
    )
    assert fb.row_disagreements(row, same) == []
    other = dataclasses.replace(same, framework_version="2.10.0a0+ffffffffff", os="ubuntu22.04")
    assert fb.row_disagreements(row, other) == [
        "torch: 2.10.0a0+b4e4ee81d3 in the row, 2.10.0a0+ffffffffff in the image",
        "OS: ubuntu24.04 in the row, ubuntu22.04 in the image",
    ]
    cpu = dataclasses.replace(same, cuda=None)
    assert fb.row_disagreements(row, cpu) == ["CUDA: 13.1.0 in the row, none in the image"]


def test_row_driver_floor_min_cc_and_forward_compat() -> None:
    row = MATRIX.ngc_image(REF)
    assert row is not None
    row = dataclasses.replace(row, driver="595", compat_drivers=("580.65.06",), min_cc="8.0")
    facts = fb.facts_from_row(row)
    ok = Request(framework="torch", base=REF, targets=Targets(gpus=("H100",), driver="595.10"))
    assert fb.stack_for_base(ok, facts, MATRIX, row).floors is not None
    low = dataclasses.replace(ok, targets=Targets(gpus=("T4", "H100"), driver="580.95.05"))
    with pytest.raises(UnsatisfiableError) as info:
        fb.stack_for_base(dataclasses.replace(low, compat="strict"), facts, MATRIX, row)
    reasons = info.value.fields["reasons"]
    assert reasons[0] == f"{REF} needs driver >= 595 (CUDA 13.1.0); targets.driver is 580.95.05"
    assert f"{REF} supports compute capability 8.0 and later" in reasons[1]
    assert "allow 580.65.06 or later R580 on data-center GPUs" in reasons[2]


def test_row_driver_floor_holds_under_minor_version_compat_too() -> None:
    """CUDA 13's minor-version floor (580) does not lower a floor the release notes set: their
    only way below it is the data-center forward-compat branches."""
    row = MATRIX.ngc_image(REF)
    assert row is not None
    row = dataclasses.replace(row, driver="595")
    facts = fb.facts_from_row(row)
    low = Request(framework="torch", base=REF, targets=Targets(gpus=("H100",), driver="580.95.05"))
    assert low.compat == "minor"
    with pytest.raises(UnsatisfiableError) as info:
        fb.stack_for_base(low, facts, MATRIX, row)
    assert "needs driver >= 595" in info.value.fields["reasons"][0]


def test_a_digest_reference_is_never_stood_in_for_by_its_tags_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`name:tag@sha256:...` pulls the digest and ignores the tag: the tag's row says nothing
    about that image, so without a probe the lock refuses (exit 2) instead of guessing."""
    import envbuild.app.inputs

    monkeypatch.setattr(envbuild.app.inputs, "make_engine", lambda **kw: Unreachable())
    ref = f"{REF}@sha256:" + "c" * 64
    image = tmp_path / "ngc"
    image.mkdir()
    (image / "envbuild.toml").write_text(
        f'[image]\nbase = "{ref}"\n\n[framework]\nrequirement = "torch"\n'
    )
    result = CliRunner().invoke(cli, ["lock", str(image)])
    assert result.exit_code == 2, result.output
    assert f"{ref} names a digest, so the matrix row of its tag ({ROW_SOURCE})" in result.stderr
    assert f"docker pull {ref}" in result.stderr
    assert not (image / "envbuild.lock").exists()

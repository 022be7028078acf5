"""What a new user and a CI job meet first: typos, `--json` on the error path, `| head`.

Each test is a mistake found by walking README.md on a fresh clone (the UX pass): it used to
print nothing parseable, a wrong example, a traceback-like "internal error", or silently drop
input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.main import EXIT_BROKEN_PIPE, cli
from envbuild.core.errors import UserError
from envbuild.core.versions import parse_version
from envbuild.matrix import load_matrix
from envbuild.resolver import parse_gpu

ROOT = Path(__file__).resolve().parents[3]
HOSTS = ROOT / "tests" / "fixtures" / "hosts"
EXAMPLE = ROOT / "images" / "torch-train"
RESOLVE_H100 = ("resolve", "--gpu", "H100", "--driver", "570.124.06")


def _one_json_object(stdout: str) -> dict[str, object]:
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, stdout
    doc = json.loads(lines[0])
    assert isinstance(doc, dict)
    return doc


def test_closed_stdout_is_not_reported_as_a_bug() -> None:
    """`envbuild resolve ... | head -1`: the reader is gone before envbuild writes. That used to
    end as exit 70 "internal error: BrokenPipeError ... this is a bug in envbuild"."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has already gone: the first write fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from envbuild.cli.main import main; main()", *RESOLVE_H100],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_BROKEN_PIPE, proc.stderr
    assert "internal error" not in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("resolve", "--gpuu", "H100", "--json"),
        ("lock", "--json"),  # missing DIR
        ("validate", "--hosts", "/nonexistent/hosts.json", "--json"),
        ("resolve", "--flavour", "tiny", "--json"),
    ],
)
def test_usage_errors_under_json_print_one_error_object(args: tuple[str, ...]) -> None:
    res = CliRunner().invoke(cli, list(args), prog_name="envbuild")
    assert res.exit_code == 2
    doc = _one_json_object(res.stdout)
    assert doc["ok"] is False and doc["error"] == "UsageError"
    assert doc["message"] and f"envbuild {args[0]} --help" in str(doc["hint"])


def test_usage_errors_without_json_keep_clicks_usage_text() -> None:
    res = CliRunner().invoke(cli, ["resolve", "--gpuu", "H100"])
    assert res.exit_code == 2
    assert res.stdout == ""
    assert "No such option '--gpuu'" in res.stderr and "Usage:" in res.stderr


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [(["reslove"], "'resolve'"), (["valdiate"], "'validate'"), (["matrix", "chek"], "'check'")],
)
def test_mistyped_command_names_the_closest(args: list[str], suggestion: str) -> None:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2
    assert f"No such command {args[-1]!r}. Did you mean {suggestion}?" in res.output


def test_render_json_carries_the_same_dockerfile() -> None:
    plain = CliRunner().invoke(cli, ["render", str(EXAMPLE)])
    assert plain.exit_code == 0, plain.output
    res = CliRunner().invoke(cli, ["render", str(EXAMPLE), "--json"])
    assert res.exit_code == 0, res.output
    doc = _one_json_object(res.stdout)
    assert doc["ok"] is True and doc["output"] is None and doc["context"] is None
    assert str(doc["dockerfile"]).rstrip("\n") == plain.stdout.rstrip("\n")


def test_render_json_error_path(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "envbuild.toml").write_text('[framework]\nrequirement = "torch"\n')
    res = CliRunner().invoke(cli, ["render", str(tmp_path / "img"), "--json"])
    assert res.exit_code == 1  # no lock yet: a "no", with the command to run
    doc = _one_json_object(res.stdout)
    assert doc["ok"] is False and doc["hint"] == f"envbuild lock {tmp_path / 'img'}"


def test_repeated_hosts_is_refused_not_silently_the_last_one() -> None:
    """Click keeps only the last value of a repeated single option: the fleet view showed one
    host out of three with exit 1 and no word about the others."""
    two = str(HOSTS / "mismatch.json")
    res = CliRunner().invoke(
        cli,
        ["validate", "--json", "--hosts", str(HOSTS / "old-driver.json"), "--hosts", two],
    )
    assert res.exit_code == 2
    doc = _one_json_object(res.stdout)
    assert "--hosts takes one file; got 2" in str(doc["message"])
    assert "old-driver.json" in str(doc["hint"]) and "mismatch.json" in str(doc["hint"])


@pytest.mark.parametrize(
    ("text", "suggested"),
    [("4090", "RTX 4090"), ("A6000", "RTX A6000"), ("sm90", "sm_90"), ("RTX5090x", "RTX 5090")],
)
def test_unknown_gpu_suggests_but_never_picks(text: str, suggested: str) -> None:
    matrix = load_matrix()
    with pytest.raises(UserError) as info:
        parse_gpu(matrix, text)
    assert f"did you mean {suggested!r}" in info.value.hint
    assert suggested in info.value.fields["suggestions"]
    assert info.value.exit_code == 2


def test_unknown_gpu_without_a_close_name_says_what_to_give() -> None:
    with pytest.raises(UserError) as info:
        parse_gpu(load_matrix(), "bogus")
    assert "did you mean" not in info.value.hint
    assert "compute capability" in info.value.hint and "sm_XX" in info.value.hint


@pytest.mark.parametrize("text", ["r535", "R535"])
def test_driver_branch_written_with_r_gets_the_number(text: str) -> None:
    with pytest.raises(UserError) as info:
        parse_version(text, what="driver version")
    assert "without the r: 535" in info.value.hint


def test_driver_hint_does_not_offer_a_cuda_version_as_example() -> None:
    with pytest.raises(UserError) as info:
        parse_version("abc", what="driver version")
    assert "12.8" not in info.value.hint and "570.124.06" in info.value.hint


def test_require_cuda_failure_counts_brand_clauses_instead_of_listing_them() -> None:
    from envbuild.lock.format import loads

    lock_dir = ROOT / "images" / "jax-train"
    lock = loads((lock_dir / "envbuild.lock").read_text(encoding="utf-8"))
    brands = [p for p in lock.stack.base_image.require_cuda.split() if p.startswith("brand=")]
    if len(brands) <= 2:
        pytest.skip("the jax-train lock's base image carries no brand= clauses now")
    res = CliRunner().invoke(
        cli,
        ["validate", "--hosts", str(HOSTS / "old-driver.json"), "--lock", str(lock_dir), "--json"],
    )
    assert res.exit_code == 1
    doc = _one_json_object(res.stdout)
    results = doc["results"]
    assert isinstance(results, list)
    details = [c["detail"] for r in results for c in r["failed"] if c["check"] == "require-cuda"]
    assert details, doc
    assert f"none of the {len(brands)} brand= forward-compat clauses matches" in details[0]
    assert "brand=grid," not in details[0]


def test_request_driver_branch_with_r_names_the_number(tmp_path: Path) -> None:
    (tmp_path / "envbuild.toml").write_text(
        '[framework]\nrequirement = "torch"\n[targets]\ngpus = ["H100"]\ndriver = "r550"\n'
    )
    res = CliRunner().invoke(cli, ["lock", str(tmp_path), "--json"])
    assert res.exit_code == 2
    doc = _one_json_object(res.stdout)
    assert doc["error"] == "RequestError"
    assert 'write the branch without the r ("550")' in str(doc["hint"])

"""`envbuild matrix check`: exit 0 with a summary, 1 with "file: row: problem" lines, 2 for
unreadable or invalid files, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.main import cli
from envbuild.core.resources import matrix_dir


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    dest = tmp_path / "matrix"
    shutil.copytree(matrix_dir(), dest)
    return dest


def run(folder: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        cli, ["matrix", "check", *args], env={"ENVBUILD_MATRIX_DIR": str(folder)}
    )
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_shipped_matrix_passes_with_a_one_line_summary(folder: Path) -> None:
    code, out, _ = run(folder)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("matrix ok: ")
    assert f"({len(list(folder.glob('*.toml')))} files)" in lines[0]


def test_json_report(folder: Path) -> None:
    code, out, _ = run(folder, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["ok"] is True and data["problems"] == []
    assert data["counts"]["builds"] > 0
    assert data["files"] == sorted(f"matrix/{p.name}" for p in folder.glob("*.toml"))


def test_a_problem_exits_1_with_file_and_row(folder: Path) -> None:
    path = folder / "gpus.toml"
    path.write_text(path.read_text().replace('sm = "sm_90"', 'sm = "sm_90"\nspeed = "fast"', 1))
    code, out, _ = run(folder)
    assert code == 1
    assert any(
        line.startswith("matrix/gpus.toml: arch[") and line.endswith("(sm_90): unknown key 'speed'")
        for line in out.splitlines()
    )
    assert out.splitlines()[-1].startswith("matrix 1 problems: ")
    code, out, _ = run(folder, "--json")
    assert code == 1
    assert json.loads(out)["ok"] is False


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda p: p.write_bytes(p.read_bytes() + b"\n# caf\xe9\n"), "not UTF-8"),
        (lambda p: p.write_text(p.read_text()[: len(p.read_text()) // 2]), "not valid TOML"),
    ],
    ids=["non-utf8", "truncated"],
)
def test_unreadable_file_exits_2_cleanly(folder: Path, damage: object, expected: str) -> None:
    damage(folder / "torch.toml")  # type: ignore[operator]
    code, _, err = run(folder)
    assert code == 2
    assert err.startswith(f"error: matrix/torch.toml: {expected}")
    assert "next: " in err


def test_overlay_option_and_missing_overlay(folder: Path, tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "os_images.toml").write_text(
        'schema_version = 1\n\n[[os]]\nos = "ubuntu22.04"\nimage = "registry.internal/ubuntu:22.04"\n'
        'python = "3.10"\npython_packages = ["python3", "python3-venv"]\n'
        'source = "our mirror of ubuntu:22.04 (test)"\n'
    )
    code, out, _ = run(folder, "--overlay", str(overlay))
    assert code == 0
    assert out.strip().endswith("files + 1 overlay files)")
    code, _, err = run(folder, "--overlay", str(tmp_path / "missing"))
    assert code == 2
    assert "does not exist" in err


def test_matrix_help_lists_its_subcommands() -> None:
    result = CliRunner().invoke(cli, ["matrix", "--help"])
    assert result.exit_code == 0
    assert "  check " in result.output and "  refresh " in result.output

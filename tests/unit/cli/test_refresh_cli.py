"""`envbuild matrix refresh` end to end without a network: PyPI answers from the recorded
fixtures (wheels are served as zips holding the recorded METADATA, read by byte ranges); the
PyTorch index and Docker Hub are unreachable, as they are from here."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.app import matrix as matrix_use_case
from envbuild.cli.main import cli
from envbuild.core.errors import SourceUnreachableError
from envbuild.matrix import collect, read_matrix_files
from envbuild.matrix.refresh import RefreshResult, pypi
from tests.unit.matrix.test_refresh_pypi import FakeSession

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "refresh"
DOWN = ("https://download.pytorch.org", "https://hub.docker.com")

TORCH_TOML = """\
# torch: hand-written rows (kept byte for byte by refresh)
schema_version = 1
framework = "torch"

[[release]]
version = "2.7.0"
python = ">=3.9,<3.14"
source = "https://pypi.org/simple/torch/"
"""


def recorded_pypi() -> FakeSession:
    pages: dict[str, tuple[str, bytes]] = {}
    blobs: dict[str, bytes] = {}
    for path in FIX.glob("simple-*.json"):
        project = path.name.removeprefix("simple-").removesuffix(".json")
        body = path.read_bytes()
        pages[f"https://pypi.org/simple/{project}/"] = (pypi.PEP691_JSON, body)
        for f in json.loads(body)["files"]:
            meta = FIX / f"metadata-{f['filename']}.txt"
            if meta.exists():
                dist = "-".join(f["filename"].split("-")[:2])
                buf = io.BytesIO()
                with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
                    zf.writestr(f"{dist}/__init__.py", "")
                    zf.writestr(f"{dist}.dist-info/METADATA", meta.read_text())
                blobs[f["url"]] = buf.getvalue()
    return FakeSession(pages=pages, blobs=blobs, down=DOWN)


@pytest.fixture
def matrix_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "matrix"
    folder.mkdir()
    (folder / "torch.toml").write_text(TORCH_TOML)
    monkeypatch.setenv("ENVBUILD_MATRIX_DIR", str(folder))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    session = recorded_pypi()
    monkeypatch.setattr(pypi, "make_session", lambda **_kw: session)
    return folder


def refresh(
    *, dry_run: bool = False, sources: tuple[str, ...] = ("pypi", "pytorch-index", "registry")
) -> RefreshResult:
    return matrix_use_case.refresh_matrix(
        sources=sources, frameworks=("torch",), dry_run=dry_run, today="2026-11-30"
    )


def test_dry_run_writes_nothing_and_reports(matrix_dir: Path) -> None:
    result = refresh(dry_run=True)
    assert (matrix_dir / "torch.toml").read_text() == TORCH_TOML
    assert result.written == () and result.dry_run
    assert [r.version for r in result.plan.new_releases] == ["2.7.1", "2.15.0"]
    assert result.sources_ok == ("pypi",)
    assert [s for s, _ in result.sources_failed] == ["pytorch-index", "registry"]


def test_refresh_appends_rows_and_keeps_the_file(matrix_dir: Path) -> None:
    result = refresh()
    text = (matrix_dir / "torch.toml").read_text()
    assert result.written == (str(matrix_dir / "torch.toml"),)
    assert text.startswith(TORCH_TOML)
    matrix, problems, _ = collect(read_matrix_files(matrix_dir, label="matrix"))
    assert {r.version for r in matrix.releases} == {"2.7.0", "2.7.1", "2.15.0"}
    assert all(r.seen == "2026-11-30" for r in matrix.releases if r.version != "2.7.0")
    assert not [p for p in problems if "release[" in p]
    # Builds are derived but not written (archs unknown); the matrix keeps resolving without them.
    assert matrix.builds == () and result.plan.pending_builds
    # A second run finds nothing new and leaves the file alone.
    again = refresh()
    assert again.written == () and again.plan.new_releases == ()
    assert (matrix_dir / "torch.toml").read_text() == text


def test_no_source_reachable_is_exit_3(matrix_dir: Path) -> None:
    with pytest.raises(SourceUnreachableError) as exc:
        refresh(sources=("pytorch-index", "registry"))
    assert exc.value.exit_code == 3 and "no source could be read" in exc.value.message
    assert (matrix_dir / "torch.toml").read_text() == TORCH_TOML


def test_cli_summary_and_warnings(matrix_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["matrix", "refresh", "--framework", "torch", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "new releases (appended): 2" in result.stdout
    assert "dry run: nothing written" in result.stdout
    assert "warning: pytorch-index skipped" in result.stderr
    assert (matrix_dir / "torch.toml").read_text() == TORCH_TOML


def test_cli_json(matrix_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["matrix", "refresh", "--framework", "torch", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ok"] and out["written"] == [str(matrix_dir / "torch.toml")]
    assert [r["version"] for r in out["new_releases"]] == ["2.7.1", "2.15.0"]
    assert {s["source"] for s in out["sources_failed"]} == {"pytorch-index", "registry"}


def test_cli_unreachable_is_exit_3_without_traceback(matrix_dir: Path) -> None:
    result = CliRunner().invoke(
        cli, ["matrix", "refresh", "--source", "registry", "--source", "pytorch-index"]
    )
    assert result.exit_code == 3
    assert "error: no source could be read" in result.stderr
    assert "next: " in result.stderr and "Traceback" not in result.output

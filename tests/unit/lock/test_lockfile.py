"""envbuild.lock: golden bytes, round trip, freshness, atomic and concurrent writing.

The matrix rows, the stack and the Python pins are fixed here (the pins are uv's real output,
recorded in tests/fixtures/pydeps/), so these tests need no network and do not move when the
shipped matrix or the resolver change.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from envbuild.app import inputs
from envbuild.app import lock as lock_use_case
from envbuild.build import buildlog
from envbuild.core import fsio
from envbuild.core.errors import LockEditedError, LockError, MatrixError, PinError, StaleLockError
from envbuild.core.models import BaseImage, Floors, FrameworkPick, Stack
from envbuild.lock import format as lockfile
from envbuild.lock.pins import RunResult
from envbuild.matrix import (
    Arch,
    CudaImage,
    CudaRelease,
    FrameworkBuild,
    FrameworkRelease,
    LibRelease,
    Matrix,
    OsImage,
)
from envbuild.request.parse import parse_request

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "pydeps"
GOLDEN = FIXTURES / "golden-demo.envbuild.lock"
TORCH_PYLOCK = FIXTURES / "uv-torch-2.10.0-py312-x86_64.pylock.toml"
REPO = Path(__file__).resolve().parents[3]

DEMO_REQUEST = """\
[image]
python = "3.12"
os = "ubuntu24.04"

[framework]
requirement = "torch>=2.8,<2.11"
cuda = "12.8.*"

[packages]
requirements = ["numpy<3"]

[targets]
gpus = ["H100", "L4"]
driver = "570.124.06"
"""

SRC = "tests/unit/lock/test_lockfile.py (fixed rows)"


def demo_matrix(*, cudnn_source: str = SRC) -> Matrix:
    return Matrix(
        cuda=(CudaRelease("12.8.1", "570.124.06", "525.60.13", source=SRC),),
        archs=(
            Arch("8.9", "sm_89", "Ada", ("L4",), "11.8", None, source=SRC),
            Arch("9.0", "sm_90", "Hopper", ("H100",), "11.8", None, source=SRC),
        ),
        releases=(FrameworkRelease("torch", "2.10.0", ">=3.10", source=SRC),),
        builds=(
            FrameworkBuild(
                "torch",
                "==2.10.*",
                "cu128",
                "12.8.1",
                "9.10.2",
                "2.27.5",
                ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"),
                "torch=={version}",
                None,
                True,
                source=SRC,
            ),
        ),
        libs=(LibRelease("cudnn", "9.10.2", ">=12.0,<13", source=cudnn_source),),
        cuda_images=(
            CudaImage(
                "12.8.1",
                ("ubuntu24.04",),
                ("base",),
                None,
                "cuda>=12.8 brand=tesla,driver>=470,driver<471",
                source=SRC,
            ),
        ),
        os_images=(OsImage("ubuntu24.04", "ubuntu:24.04", "3.12", ("python3",), source=SRC),),
    )


ROWS = (
    "arch:sm_89",
    "arch:sm_90",
    "build:torch:==2.10.*:cu128",
    "cuda:12.8.1",
    "cudnn:9.10.2",
    "image:nvidia/cuda:12.8.1",
    "release:torch:2.10.0",
)


def demo_stack(version: str = "2.10.0") -> Stack:
    return Stack(
        framework=FrameworkPick("torch", version, "cu128", f"torch=={version}"),
        cuda="12.8.1",
        cudnn="9.10.2",
        nccl="2.27.5",
        python="3.12",
        os="ubuntu24.04",
        flavour="base",
        base_image=BaseImage(
            "nvidia/cuda:12.8.1-base-ubuntu24.04", "base", "ubuntu24.04", None, "cuda>=12.0"
        ),
        archs=("sm_100", "sm_120", "sm_80", "sm_86", "sm_89", "sm_90"),
        target_archs=("sm_89", "sm_90"),
        floors=Floors("570.124.06", "525.60.13", "minor_compat"),
        notes=("auto flavour: base (CUDA libraries come from pip wheels)",),
        rows=ROWS,
    )


class FakeUv:
    """Replays uv's recorded PEP 751 output; remembers the calls and the preferences file."""

    def __init__(self, fixture: Path = TORCH_PYLOCK, delay: float = 0.0, stderr: str = "") -> None:
        self.text = fixture.read_text()
        self.stderr = stderr
        self.calls: list[list[str]] = []
        self.preferences: list[str | None] = []
        self.delay = delay

    def __call__(self, argv: Any, cwd: Path, env: Any) -> RunResult:
        self.calls.append(list(argv))
        prefs = cwd / "pylock.toml"
        self.preferences.append(prefs.read_text() if prefs.exists() else None)
        if self.delay:
            time.sleep(self.delay)
        prefs.write_text(self.text)
        return RunResult(0, "", self.stderr)


def install_fakes(
    monkeypatch: pytest.MonkeyPatch,
    *,
    matrix: Matrix | None = None,
    stack: Stack | None = None,
    uv: FakeUv | None = None,
) -> FakeUv:
    """Fixed matrix, resolver answer, uv output and an unreachable registry."""
    import envbuild.engine.registry
    import envbuild.lock.pins
    import envbuild.matrix
    import envbuild.resolver

    fixed_matrix = matrix or demo_matrix()
    fixed_stack = stack or demo_stack()
    fake = uv or FakeUv()
    monkeypatch.setattr(envbuild.matrix, "load_matrix_from", lambda overlay: fixed_matrix)
    monkeypatch.setattr(envbuild.resolver, "resolve", lambda req, m, hosts=(), **kw: fixed_stack)
    monkeypatch.setattr(envbuild.lock.pins, "run_subprocess", fake)
    monkeypatch.setattr(envbuild.lock.pins, "find_uv", lambda: "uv")
    monkeypatch.setattr(envbuild.engine.registry, "registry_digest", lambda ref, timeout=5.0: None)
    return fake


def make_image(root: Path, text: str = DEMO_REQUEST, name: str = "demo") -> Path:
    d = root / "images" / name
    d.mkdir(parents=True)
    (d / "envbuild.toml").write_text(text)
    return d


# --- golden --------------------------------------------------------------------------------------


def test_golden_lock_is_byte_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    outcome = lock_use_case.lock_image(image)
    text = (image / "envbuild.lock").read_text()
    assert outcome.status == "written"
    assert text == outcome.text
    if os.environ.get("ENVBUILD_REGEN_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    # Pinned: a change to the request canonicalisation or the hash recipe must be deliberate
    # (last changed when the fixed rows' source named this file at its new path).
    assert outcome.lock.input_hash == (
        "sha256:9811757664ba9a7bd5f7c268d413b2d4334f96bf5b26e32ead1b37a475d5b1de"
    )


def test_golden_header_and_shape() -> None:
    text = GOLDEN.read_text()
    lines = text.splitlines()
    assert lines[0] == (
        "# Generated by envbuild; do not edit. Regenerate with: envbuild lock images/demo"
    )
    lock = lockfile.loads(text)
    names = [p.name for p in lock.packages]
    assert names == sorted(names)
    assert all(list(p.hashes) == sorted(p.hashes) for p in lock.packages)
    assert lock.base_digest is None and "pinned = false" in text
    # cuDNN/NCCL come from the wheels torch pins, not the matrix's shorter "9.10.2".
    by_name = {p.name: p.version for p in lock.packages}
    assert lock.stack.cudnn == by_name["nvidia-cudnn-cu12"]
    assert lock.stack.nccl == by_name["nvidia-nccl-cu12"]
    assert lock.stack.floors is not None and lock.stack.floors.relied_on == "minor_compat"


@pytest.mark.parametrize(
    ("git_at", "folder", "command"),
    [
        # A project's own envbuild.toml at the root of its clone (nanoGPT, litgpt): "." there.
        ("proj", "proj", "envbuild lock ."),
        # The images/<name> layout of a repository of images.
        ("repo", "repo/images/torch-train", "envbuild lock images/torch-train"),
        ("repo", "repo/a/b/c", "envbuild lock a/b/c"),
        # Outside any repository: <parent>/<folder>, as before.
        (None, "x/images/demo", "envbuild lock images/demo"),
    ],
)
def test_regenerate_command_is_typed_at_the_repository_root(
    tmp_path: Path, git_at: str | None, folder: str, command: str
) -> None:
    (tmp_path / folder).mkdir(parents=True)
    if git_at is not None:
        (tmp_path / git_at / ".git").mkdir(exist_ok=True)
    assert lockfile.regenerate_command(tmp_path / folder) == command
    # The same bytes from wherever it runs (a relative path is resolved first).
    assert lockfile.regenerate_command(tmp_path / folder / ".") == command


def test_regenerate_command_takes_a_git_file_as_a_root(tmp_path: Path) -> None:
    """A worktree or submodule has a `.git` file, not a folder."""
    (tmp_path / "wt" / "images" / "a").mkdir(parents=True)
    (tmp_path / "wt" / ".git").write_text("gitdir: /elsewhere/.git/worktrees/wt\n")
    assert lockfile.regenerate_command(tmp_path / "wt" / "images" / "a") == "envbuild lock images/a"


def test_uvs_warning_about_a_locked_package_is_a_lock_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = "warning: The package `transformer-engine==0.0.0` does not have an extra named `pytorch`"
    install_fakes(monkeypatch, uv=FakeUv(stderr=f"Resolved 3 packages\n{said}\n"))
    outcome = lock_use_case.lock_image(make_image(tmp_path))
    assert "uv: " + said.removeprefix("warning: ") in outcome.warnings


def test_relock_same_inputs_is_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    first = lock_use_case.lock_image(image)
    mtime = (image / "envbuild.lock").stat().st_mtime_ns
    second = lock_use_case.lock_image(image)
    assert second.status == "unchanged"
    assert second.text == first.text
    assert (image / "envbuild.lock").stat().st_mtime_ns == mtime


def test_roundtrip_dumps_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    outcome = lock_use_case.lock_image(image)
    again = lockfile.loads(outcome.text)
    assert again == outcome.lock
    assert lockfile.dumps(again, command="envbuild lock images/demo") == outcome.text


def test_cpu_stack_has_no_floors_or_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = dataclasses.replace(
        demo_stack(),
        cuda=None,
        cudnn=None,
        nccl=None,
        floors=None,
        flavour="cpu",
        archs=(),
        target_archs=(),
        base_image=BaseImage("debian:bookworm-slim", "cpu", "debian12"),
    )
    install_fakes(monkeypatch, stack=cpu)
    image = make_image(tmp_path, '[image]\ndevice = "cpu"\n[framework]\nrequirement = "torch"\n')
    outcome = lock_use_case.lock_image(image)
    assert "[stack.floors]" not in outcome.text
    assert "cuda =" not in outcome.text.split("[base_image]")[0]
    assert lockfile.loads(outcome.text) == outcome.lock


# --- previous picks -----------------------------------------------------------------------------


def test_relock_passes_previous_picks_as_preferences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install_fakes(monkeypatch)
    image = make_image(tmp_path)
    lock_use_case.lock_image(image)
    assert fake.preferences[0] is None
    lock_use_case.lock_image(image)
    prefs = fake.preferences[1]
    assert prefs is not None and 'name = "numpy"' in prefs
    lock_use_case.lock_image(image, upgrade_packages=["NumPy"])
    assert 'name = "numpy"' not in (fake.preferences[2] or "")
    assert fake.calls[2][fake.calls[2].index("--upgrade-package") + 1] == "numpy"
    lock_use_case.lock_image(image, upgrade=True)
    assert fake.preferences[3] is None


def test_relock_keeps_locked_framework_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envbuild.resolver

    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    lock_use_case.lock_image(image)
    seen: list[str] = []

    def newest(req: Any, m: Any, hosts: Any = (), **kw: Any) -> Stack:
        seen.append(req.framework)
        pinned = req.framework.partition("==")[2]
        return demo_stack(pinned or "2.10.1")

    monkeypatch.setattr(envbuild.resolver, "resolve", newest)
    lock_use_case.lock_image(image)
    assert seen == ["torch==2.10.0"]
    seen.clear()
    lock_use_case.lock_image(image, upgrade=True)
    assert seen == ["torch>=2.8,<2.11"]  # the request as written


def test_matrix_disagreement_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = dataclasses.replace(demo_stack(), cudnn="9.8.0")
    install_fakes(monkeypatch, stack=wrong)
    outcome = lock_use_case.lock_image(make_image(tmp_path))
    assert any("cudnn: the matrix says 9.8.0" in w for w in outcome.warnings)
    assert outcome.lock.stack.cudnn == "9.10.2.21"


def test_framework_missing_from_pins_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fakes(monkeypatch, uv=FakeUv(FIXTURES / "uv-jinja2-py312-x86_64.pylock.toml"))
    with pytest.raises(PinError, match="do not contain torch"):
        lock_use_case.lock_image(make_image(tmp_path))


def test_other_cuda_major_from_the_index_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What happened with a cu126 pick whose index order let PyPI's torch (cu130) win.
    install_fakes(monkeypatch, uv=FakeUv(FIXTURES / "uv-torch-2.14.1-py311-aarch64.pylock.toml"))
    image = make_image(tmp_path)
    with pytest.raises(MatrixError) as err:
        lock_use_case.lock_image(image)
    assert "depend on CUDA 13.0.3.0 libraries" in err.value.message
    assert not (image / "envbuild.lock").exists()


def _off_pypi() -> Stack:
    return dataclasses.replace(
        demo_stack(),
        framework=FrameworkPick(
            "torch", "2.10.0", "cu128", "torch==2.10.0", "https://download.pytorch.org/whl/cu128"
        ),
    )


def test_wheelhouse_stands_in_for_the_framework_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    house = tmp_path / "wheels"
    house.mkdir()
    (house / "torch-2.10.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"")
    uv = FakeUv()
    # uv's answer when the wheelhouse has the wheel: a file:// URL for torch.
    head, sep, tail = uv.text.partition('name = "torch"')
    uv.text = head + sep + re.sub(r'url = "[^"]*"', f'url = "file://{house}/t.whl"', tail, count=1)
    fake = install_fakes(monkeypatch, stack=_off_pypi(), uv=uv)
    text = DEMO_REQUEST + f'\n[indexes]\nfind_links = ["{house}"]\n'
    outcome = lock_use_case.lock_image(make_image(tmp_path, text))
    argv = fake.calls[0]
    assert "https://download.pytorch.org/whl/cu128" not in argv
    assert argv[argv.index("--find-links") + 1] == str(house)
    assert outcome.lock.indexes.find_links == ()  # local folders are read at lock time only
    assert any("local wheelhouse" in w for w in outcome.warnings)
    torch = next(p for p in outcome.lock.packages if p.name == "torch")
    assert torch.source == str(house)


def test_framework_index_goes_first_among_extra_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install_fakes(monkeypatch, stack=_off_pypi())
    with pytest.raises(PinError, match="not from the index of the cu128 variant"):
        lock_use_case.lock_image(make_image(tmp_path))
    argv = fake.calls[0]
    # uv prefers --extra-index-url over --index-url: the variant's index must be an extra one.
    assert argv[argv.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cu128"
    assert argv[argv.index("--index-url") + 1] == "https://pypi.org/simple"


def test_reuploaded_files_are_named_as_such() -> None:
    from envbuild.core.models import LockedPackage

    old = [LockedPackage("torch", "2.10.0", ("sha256:" + "a" * 64,), "https://pypi.org/simple")]
    new = [LockedPackage("torch", "2.10.0", ("sha256:" + "b" * 64,), "https://pypi.org/simple")]
    (msg,) = lock_use_case.reuploaded(old, new)
    assert "re-uploaded" in msg and "PyTorch index" in msg
    assert lock_use_case.reuploaded(old, old) == []
    text = buildlog.hash_mismatch_message("torch", "2.10.0", old[0].hashes, new[0].hashes[0])
    assert "re-uploaded" in text and "altered" in text


# --- freshness ---------------------------------------------------------------------------------


def _locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    lock_use_case.lock_image(image)
    return image


def test_check_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = _locked(tmp_path, monkeypatch)
    outcome = lock_use_case.check_image(image)
    assert outcome.status == "fresh"


def test_check_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    with pytest.raises(StaleLockError) as err:
        lock_use_case.check_image(image)
    assert err.value.exit_code == 1
    assert err.value.hint == f"envbuild lock {image}"


def test_check_edited_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = _locked(tmp_path, monkeypatch)
    path = image / "envbuild.lock"
    text = path.read_text()
    numpy = next(p for p in lockfile.loads(text).packages if p.name == "numpy")
    old = f'name = "numpy"\nversion = "{numpy.version}"'
    assert old in text
    path.write_text(text.replace(old, 'name = "numpy"\nversion = "1.0.0"'))
    with pytest.raises(LockEditedError) as err:
        lock_use_case.check_image(image)
    assert err.value.exit_code == 1
    assert "edited by hand" in err.value.message
    assert err.value.hint == f"envbuild lock {image}"


def test_check_stale_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = _locked(tmp_path, monkeypatch)
    req = image / "envbuild.toml"
    req.write_text(req.read_text().replace('"numpy<3"', '"numpy<2.4"'))
    with pytest.raises(StaleLockError) as err:
        lock_use_case.check_image(image)
    assert "envbuild.toml changed" in err.value.message
    assert err.value.hint == f"envbuild lock {image}"


def test_check_changed_matrix_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = _locked(tmp_path, monkeypatch)
    install_fakes(monkeypatch, matrix=demo_matrix(cudnn_source="a corrected source"))
    with pytest.raises(StaleLockError) as err:
        lock_use_case.check_image(image)
    assert "matrix row cudnn:9.10.2 changed" in err.value.message


def test_check_ignores_rows_the_stack_did_not_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = _locked(tmp_path, monkeypatch)
    m = demo_matrix()
    extra = CudaRelease("13.0.2", "580.95.05", "580.65.06", source=SRC)
    install_fakes(monkeypatch, matrix=dataclasses.replace(m, cuda=(*m.cuda, extra)))
    assert lock_use_case.check_image(image).status == "fresh"


def test_check_removed_matrix_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = _locked(tmp_path, monkeypatch)
    install_fakes(monkeypatch, matrix=dataclasses.replace(demo_matrix(), libs=()))
    with pytest.raises(StaleLockError, match=r"matrix row cudnn:9\.10\.2 is gone"):
        lock_use_case.check_image(image)


def test_newer_schema_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = _locked(tmp_path, monkeypatch)
    path = image / "envbuild.lock"
    path.write_text(path.read_text().replace("schema_version = 1", "schema_version = 99"))
    with pytest.raises(LockError) as err:
        lock_use_case.check_image(image)
    assert err.value.exit_code == 2
    assert "upgrade envbuild" in err.value.hint


def test_load_fresh_returns_request_and_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = _locked(tmp_path, monkeypatch)
    request, lock = inputs.load_fresh(image)
    assert request == parse_request(DEMO_REQUEST.encode(), path="x", default_name="demo")
    assert lock.name == "demo" and lock.stack.framework.version == "2.10.0"


def test_load_fresh_text_gives_the_bytes_it_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = _locked(tmp_path, monkeypatch)
    request, lock, text = inputs.load_fresh_text(image)
    assert text == (image / lockfile.LOCK_FILE).read_text(encoding="utf-8")
    assert lockfile.loads(text) == lock
    assert (request, lock) == inputs.load_fresh(image)


def test_write_atomic_takes_bytes_and_creates_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "ctx.tar"
    fsio.write_atomic(path, b"\x00\xffbinary")
    assert path.read_bytes() == b"\x00\xffbinary"
    assert path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["ctx.tar"]


def test_input_hash_covers_only_used_rows() -> None:
    req = parse_request(DEMO_REQUEST.encode(), path="x", default_name="demo")
    fps = demo_matrix().fingerprints()
    base = lockfile.input_hash(req, lockfile.row_fingerprints(ROWS, fps))
    more = dict(fps, **{"cuda:13.0.2": "f" * 64})
    assert lockfile.input_hash(req, lockfile.row_fingerprints(ROWS, more)) == base
    changed = dict(fps, **{"cuda:12.8.1": "0" * 64})
    assert lockfile.input_hash(req, lockfile.row_fingerprints(ROWS, changed)) != base


# --- atomic and concurrent writing --------------------------------------------------------------

_SLOW_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from envbuild.core import fsio
    real_fsync = os.fsync
    def slow_fsync(fd):
        Path(sys.argv[2]).write_text("in fsync")
        time.sleep(60)
    os.fsync = slow_fsync
    fsio.write_atomic(Path(sys.argv[1]), "NEW CONTENT " * 10000)
    """
)


def test_interrupted_write_leaves_old_lock_intact(tmp_path: Path) -> None:
    path = tmp_path / "envbuild.lock"
    path.write_text("OLD LOCK\n")
    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(path), str(marker)], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert child.poll() is None, "the writer exited before fsync"
            assert time.monotonic() < deadline, "the writer never reached fsync"
            time.sleep(0.02)
        # Mid-write: the new bytes are in a temp file beside the lock, not in the lock.
        temps = [p for p in tmp_path.iterdir() if p.name.startswith(".envbuild.lock.")]
        assert temps and temps[0].stat().st_size > 0
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    assert path.read_text() == "OLD LOCK\n"


_LOCK_RUN = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import pytest
    from envbuild.app import lock as lock_use_case
    from tests.unit.lock.test_lockfile import FakeUv, install_fakes
    mp = pytest.MonkeyPatch()
    install_fakes(mp, uv=FakeUv(delay=0.2))
    print(lock_use_case.lock_image(Path(sys.argv[1])).status)
    """
)


def test_concurrent_lock_runs_end_with_one_valid_lock(tmp_path: Path) -> None:
    image = make_image(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _LOCK_RUN, str(image)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], results
    statuses = sorted(out.strip() for out, _ in results)
    assert statuses.count("written") == 1, statuses
    text = (image / "envbuild.lock").read_text()
    assert text == GOLDEN.read_text()
    lockfile.loads(text)  # verifies the content hash
    leftovers = [p.name for p in image.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_write_atomic_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    fsio.write_atomic(path, "one")
    fsio.write_atomic(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]

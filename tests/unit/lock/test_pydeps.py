"""Delegated Python pinning: uv's command line, its recorded PEP 751 output, pip's report,
failure messages, and a few live runs against PyPI (marked network)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from envbuild.core.errors import PinError, UnsatisfiableError
from envbuild.core.models import LockedPackage
from envbuild.cuda.wheels import cuda_libs
from envbuild.lock import pins as pydeps
from envbuild.lock.pins import PinRequest, RunResult

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "pydeps"
TORCH_210 = FIXTURES / "uv-torch-2.10.0-py312-x86_64.pylock.toml"
TORCH_2141_ARM = FIXTURES / "uv-torch-2.14.1-py311-aarch64.pylock.toml"
PIP_REPORT = FIXTURES / "pip-report-jinja2-py312-x86_64.json"


def _req(**kw: Any) -> PinRequest:
    base: dict[str, Any] = {"requirements": ("torch==2.10.0", "numpy<3"), "python": "3.12"}
    base.update(kw)
    return PinRequest(**base)


def test_uv_argv_targets_the_image_not_this_machine() -> None:
    argv = pydeps.uv_argv(["uv"], _req(platform="aarch64", upgrade_packages=("numpy",)))
    joined = " ".join(argv)
    assert joined.startswith("uv pip compile requirements.in --format pylock.toml")
    assert "--python-version 3.12" in joined
    assert "--python-platform aarch64-manylinux_2_28" in joined
    assert "--generate-hashes" in argv and "--no-config" in argv
    assert "--only-binary :all:" in joined
    assert "--index-url https://pypi.org/simple" in joined
    assert "--upgrade-package numpy" in joined
    assert "--offline" not in argv
    assert "--offline" in pydeps.uv_argv(["uv"], _req(offline=True))


def test_parse_recorded_uv_output_torch_cu128() -> None:
    pkgs = pydeps.parse_pylock(TORCH_210.read_text(), _req())
    names = [p.name for p in pkgs]
    assert names == sorted(names)
    by = {p.name: p for p in pkgs}
    assert by["torch"].version == "2.10.0"
    # Only the files for cp312 / manylinux x86_64 are in uv's output, one wheel each here.
    assert by["torch"].hashes and all(h.startswith("sha256:") for h in by["torch"].hashes)
    assert all(p.source == "https://pypi.org/simple" for p in pkgs)
    libs = cuda_libs(pkgs)
    assert libs.cudnn == by["nvidia-cudnn-cu12"].version
    assert libs.nccl == by["nvidia-nccl-cu12"].version
    assert libs.cuda_runtime == by["nvidia-cuda-runtime-cu12"].version
    assert libs.cuda_toolkit is None


def test_parse_recorded_uv_output_torch_cu130_aarch64() -> None:
    # torch >= 2.11 pins the cuda-toolkit[...] meta-package (its PyPI Requires-Dist) and its
    # aarch64 PyPI wheel is CUDA-enabled.
    pkgs = pydeps.parse_pylock(TORCH_2141_ARM.read_text(), _req(python="3.11", platform="aarch64"))
    by = {p.name: p for p in pkgs}
    libs = cuda_libs(pkgs)
    assert libs.cuda_toolkit == by["cuda-toolkit"].version
    assert libs.cudnn == by["nvidia-cudnn-cu13"].version
    assert libs.nccl == by["nvidia-nccl-cu13"].version


def test_parse_skips_packages_whose_marker_excludes_the_target() -> None:
    text = (
        'lock-version = "1.0"\n'
        '[[packages]]\nname = "a"\nversion = "1"\nmarker = "sys_platform == \'win32\'"\n'
        'wheels = [{ url = "https://files.pythonhosted.org/a-1-py3-none-any.whl", '
        'hashes = { sha256 = "' + "1" * 64 + '" } }]\n'
        '[[packages]]\nname = "B_c"\nversion = "2"\n'
        'sdist = { url = "https://files.pythonhosted.org/b_c-2.tar.gz", '
        'hashes = { sha256 = "' + "2" * 64 + '" } }\n'
    )
    (pkg,) = pydeps.parse_pylock(text, _req())
    # Only an sdist: marked so (the builder stage compiles it; envbuild/app/lock_source.py).
    assert pkg == LockedPackage(
        "b-c", "2", ("sha256:" + "2" * 64,), "https://pypi.org/simple", sdist=True
    )


def test_source_of_maps_files_to_their_index() -> None:
    req = _req(
        index_url="https://download.pytorch.org/whl/cu126",
        extra_index_urls=("https://pypi.org/simple/",),
        find_links=("/srv/wheels",),
    )
    assert (
        pydeps.source_of("https://download.pytorch.org/whl/cu126/torch-2.7.1.whl", req)
        == "https://download.pytorch.org/whl/cu126"
    )
    assert (
        pydeps.source_of("https://files.pythonhosted.org/packages/x/numpy.whl", req)
        == "https://pypi.org/simple"
    )
    assert pydeps.source_of("file:///srv/wheels/mine-1-py3-none-any.whl", req) == "/srv/wheels"


def test_parse_recorded_pip_report() -> None:
    pkgs = pydeps.parse_pip_report(PIP_REPORT.read_text(), _req())
    assert [p.name for p in pkgs] == ["jinja2", "markupsafe"]
    assert all(len(p.hashes) == 1 and p.hashes[0].startswith("sha256:") for p in pkgs)


class Fake:
    def __init__(self, result: RunResult, output: str | None = None) -> None:
        self.result = result
        self.output = output
        self.argv: list[str] = []
        self.env: dict[str, str] = {}
        self.prefs: str | None = None

    def __call__(self, argv: Any, cwd: Path, env: Any) -> RunResult:
        self.argv = list(argv)
        self.env = dict(env)
        p = cwd / "pylock.toml"
        self.prefs = p.read_text() if p.exists() else None
        self.requirements = (cwd / "requirements.in").read_text()
        if self.output is not None:
            p.write_text(self.output)
        return self.result


def test_pin_writes_preferences_and_isolates_index_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///somewhere")
    monkeypatch.setenv("UV_INDEX_URL", "https://evil.example/simple")
    monkeypatch.setenv("UV_CACHE_DIR", "/tmp/uvcache")
    fake = Fake(RunResult(0, "", ""), TORCH_210.read_text())
    prev = (LockedPackage("numpy", "2.0.0", (), "https://pypi.org/simple"),)
    result = pydeps.pin(_req(preferences=prev), runner=fake, tool="uv")
    assert result.tool == "uv" and any(p.name == "torch" for p in result.packages)
    assert fake.requirements == "torch==2.10.0\nnumpy<3\n"
    assert fake.prefs is not None and 'name = "numpy"\nversion = "2.0.0"' in fake.prefs
    assert "PIP_EXTRA_INDEX_URL" not in fake.env and "UV_INDEX_URL" not in fake.env
    assert fake.env["UV_CACHE_DIR"] == "/tmp/uvcache"
    assert fake.env["UV_PYTHON_DOWNLOADS"] == "never"
    # uv is handed this interpreter (it builds nothing) instead of searching PATH for one.
    assert fake.argv[-2:] == ["--python", sys.executable]


def test_uv_is_told_only_a_plain_cpython(monkeypatch: pytest.MonkeyPatch) -> None:
    import sysconfig

    assert pydeps.plain_cpython() == sys.executable  # this test's CPython 3.11
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: 1)  # a free-threaded build
    assert pydeps.plain_cpython() is None


def test_the_peer_command_names_no_interpreter() -> None:
    """What a user types by hand: `uv pip compile` as it comes, uv finds its own Python."""
    assert "--python" not in pydeps.uv_argv(["uv"], _req())
    assert pydeps.uv_argv(["uv"], _req(), interpreter="/py")[-2:] == ["--python", "/py"]


RECORDED_UV_ERRORS = [
    (
        "error: No solution found when resolving dependencies:\n  cause: Because "
        "somepkg was not found in the cache and you require somepkg==1.0, we can conclude "
        "that your requirements are unsatisfiable.\n\nhint: Packages were unavailable because "
        "the network was disabled. When the network is disabled, registry packages may only "
        "be read from the cache.",
        PinError,
        "without --offline",
    ),
    (
        "error: No solution found when resolving dependencies:\n  cause: you require "
        "numpy<1 and numpy>2, which are incompatible",
        UnsatisfiableError,
        "loosen",
    ),
    (
        "error: Request failed after 3 retries in 7.0s\n  cause: Failed to fetch: "
        "https://download.pytorch.org/whl/cu126/torch/\n  cause: dns error",
        PinError,
        "check the network",
    ),
    (
        "error: Failed to download `torch==2.7.1`\n  Caused by: Hash mismatch for "
        "`torch==2.7.1`\n\nExpected:\n  sha256:aaaa\n\nComputed:\n  sha256:bbbb",
        PinError,
        "re-uploaded",
    ),
]


@pytest.mark.parametrize(("stderr", "kind", "hint"), RECORDED_UV_ERRORS)
def test_uv_failures_are_typed(stderr: str, kind: type[Exception], hint: str) -> None:
    fake = Fake(RunResult(1, "", stderr))
    with pytest.raises(kind) as err:
        pydeps.pin(_req(offline=True), runner=fake, tool="uv")
    assert hint in getattr(err.value, "hint", "")


def test_pip_fallback_runs_dry_run_report(monkeypatch: pytest.MonkeyPatch) -> None:
    report = PIP_REPORT.read_text()

    def runner(argv: Any, cwd: Path, env: Any) -> RunResult:
        assert "--dry-run" in argv and "--report" in argv
        assert argv[argv.index("--platform") + 1] == "manylinux_2_28_x86_64"
        assert env["PIP_CONFIG_FILE"] == os.devnull
        (cwd / argv[argv.index("--report") + 1]).write_text(report)
        return RunResult(0, "", "")

    result = pydeps.pin(_req(requirements=("jinja2==3.1.6",)), runner=runner, tool="pip")
    assert result.tool == "pip"
    assert [p.name for p in result.packages] == ["jinja2", "markupsafe"]
    with pytest.raises(PinError, match="--offline needs uv"):
        pydeps.pin(_req(offline=True), runner=runner, tool="pip")


def test_tool_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pydeps, "find_uv", lambda: None)
    assert pydeps.select_tool()[0] == "pip"
    with pytest.raises(PinError, match="uv was asked for"):
        pydeps.select_tool("uv")
    monkeypatch.setattr(pydeps, "_has_pip", lambda: False)
    with pytest.raises(PinError) as err:
        pydeps.select_tool()
    assert "pip install uv" in err.value.hint
    monkeypatch.setattr(pydeps, "find_uv", lambda: "/x/uv")
    assert pydeps.select_tool() == ("uv", ["/x/uv"])


def test_same_release() -> None:
    assert pydeps.same_release("9.10.2", "9.10.2.21")
    assert not pydeps.same_release("9.8.0", "9.10.2.21")


@pytest.mark.network
def test_live_uv_pins_a_small_set() -> None:
    result = pydeps.pin(PinRequest(requirements=("jinja2==3.1.6",), python="3.12"), tool="uv")
    by = {p.name: p for p in result.packages}
    assert by["jinja2"].version == "3.1.6"
    assert "markupsafe" in by and by["markupsafe"].hashes


@pytest.mark.network
def test_live_pip_fallback_pins_a_small_set() -> None:
    result = pydeps.pin(PinRequest(requirements=("jinja2==3.1.6",), python="3.12"), tool="pip")
    assert {p.name for p in result.packages} == {"jinja2", "markupsafe"}


@pytest.mark.network
def test_live_uv_keeps_a_preference() -> None:
    prev = (LockedPackage("markupsafe", "3.0.2", (), "https://pypi.org/simple"),)
    req = PinRequest(requirements=("jinja2==3.1.6",), python="3.12", preferences=prev)
    by = {p.name: p for p in pydeps.pin(req, tool="uv").packages}
    assert by["markupsafe"].version == "3.0.2"
    up = PinRequest(
        requirements=("jinja2==3.1.6",),
        python="3.12",
        preferences=prev,
        upgrade_packages=("markupsafe",),
    )
    assert {p.name: p for p in pydeps.pin(up, tool="uv").packages}["markupsafe"].version != "3.0.2"


def test_a_free_threaded_python_is_a_version_for_uv_and_an_abi_for_pip() -> None:
    """uv 0.13.9 refuses `--python-version 3.14t` ("found `t`"): it gets 3.14 and reads the
    cp314t ABI from its interpreter; pip takes the ABI as `--abi cp314t`."""
    argv = pydeps.uv_argv(["uv"], _req(python="3.14t"), interpreter="/py/python3.14t")
    assert argv[argv.index("--python-version") + 1] == "3.14"
    assert argv[-2:] == ["--python", "/py/python3.14t"]
    pip = pydeps.pip_argv(["pip"], _req(python="3.14t"), "report.json")
    assert pip[pip.index("--python-version") + 1] == "3.14"
    assert pip[pip.index("--abi") + 1] == "cp314t"


FAKE_UV = """#!/bin/sh
# `uv python find`: the path in FAKE_FOUND, else uv's answer when it finds none.
if [ "$1 $2" = "python find" ]; then
  [ -n "$FAKE_FOUND" ] && { echo "$FAKE_FOUND"; exit 0; }
  echo "error: No interpreter found for Python 3.14+freethreaded" >&2; exit 2
fi
exit 99
"""


def _no_free_threaded_python(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No python3.14t on PATH, and a uv whose `python find` finds none (a stand-in: the real
    one would also look through this machine's own uv-managed Pythons)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ENVBUILD_PYDEPS", raising=False)
    monkeypatch.delenv("FAKE_FOUND", raising=False)
    uv = tmp_path / "uv"
    uv.write_text(FAKE_UV)
    uv.chmod(0o755)
    monkeypatch.setenv("ENVBUILD_UV", str(uv))


def test_without_a_free_threaded_python_pip_pins_with_its_abi_option(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """uv needs a python3.14t to read the cp314t ABI from; pip takes `--abi cp314t`, so a
    machine without one still locks (the reply's `tool` says pip, `lock` prints it)."""
    _no_free_threaded_python(monkeypatch, tmp_path)
    fake = Fake(RunResult(0, "", ""))

    def report(argv: Any, cwd: Path, env: Any) -> RunResult:
        (cwd / "report.json").write_text(PIP_REPORT.read_text())
        return fake(argv, cwd, env)

    result = pydeps.pin(_req(python="3.14t"), runner=report)
    assert result.tool == "pip" and [p.name for p in result.packages] == ["jinja2", "markupsafe"]
    assert fake.argv[1:4] == ["-m", "pip", "install"]
    assert fake.argv[fake.argv.index("--abi") + 1] == "cp314t"


@pytest.mark.parametrize(
    ("kw", "env", "says"),
    [
        ({"offline": True}, None, "cannot do this lock (--offline)"),
        ({"source_packages": ("flash-attn",)}, None, "cannot do this lock (source packages)"),
        ({}, "uv", "unset ENVBUILD_PYDEPS=uv"),
    ],
)
def test_a_free_threaded_lock_pip_cannot_do_is_refused_with_a_next_step(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    kw: dict[str, Any],
    env: str | None,
    says: str,
) -> None:
    _no_free_threaded_python(monkeypatch, tmp_path)
    if env:
        monkeypatch.setenv("ENVBUILD_PYDEPS", env)
    fake = Fake(RunResult(0, "", ""))
    with pytest.raises(PinError, match=r"python3\.14t is\s+not on PATH") as err:
        pydeps.pin(_req(python="3.14t", **kw), runner=fake)
    assert says in err.value.message + err.value.hint
    assert "uv python install 3.14t" in err.value.hint
    assert fake.argv == []  # nothing ran


def test_a_free_threaded_python_uv_manages_is_found_off_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`uv python install 3.14t` puts it in uv's data folder: `uv python find` finds it."""
    _no_free_threaded_python(monkeypatch, tmp_path)
    managed = tmp_path / "uv-python" / "cpython-3.14.7+freethreaded" / "bin" / "python3.14t"
    managed.parent.mkdir(parents=True)
    managed.write_text("")
    monkeypatch.setenv("FAKE_FOUND", str(managed))
    fake = Fake(RunResult(0, "", ""), TORCH_210.read_text())
    assert pydeps.pin(_req(python="3.14t"), runner=fake).tool == "uv"
    assert fake.argv[-2:] == ["--python", str(managed)]
    monkeypatch.setenv("FAKE_FOUND", str(tmp_path / "gone" / "python3.14t"))
    assert pydeps.free_threaded_cpython("3.14t", [str(tmp_path / "uv")]) is None


def test_uv_python_find_is_asked_as_the_real_uv_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same call with envbuild's own uv, for a Python this machine has (its venv's): the
    flags are ones uv 0.13.9 accepts, and the path it prints is taken."""
    uv = pydeps.find_uv()
    if uv is None:
        pytest.skip("no uv beside this Python")
    monkeypatch.setenv("PATH", "/nonexistent")
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = pydeps.free_threaded_cpython(minor, [uv])
    assert found is not None and os.path.isfile(found)


def test_a_free_threaded_python_on_path_is_the_one_uv_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_free_threaded_python(monkeypatch, tmp_path)
    found = tmp_path / "python3.14t"
    found.write_text("#!/bin/sh\n")
    found.chmod(0o755)
    assert pydeps.free_threaded_cpython("3.14t") == str(found)
    fake = Fake(RunResult(0, "", ""), TORCH_210.read_text())
    assert pydeps.pin(_req(python="3.14t"), runner=fake, tool="uv").tool == "uv"
    assert fake.argv[-2:] == ["--python", str(found)]


# Wheel names of torch 2.10.0's dependencies on PyPI (Simple API, 2026-12-03): pip's
# `--platform` must cover each, or pip finds "no matching distribution".
_TORCH_DEPENDENCY_WHEELS = (
    "nvidia_cuda_nvrtc_cu12-12.8.93-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
    "nvidia_cusparselt_cu12-0.7.1-py3-none-manylinux2014_x86_64.whl",
    "nvidia_cublas_cu12-12.8.4.1-py3-none-manylinux_2_27_x86_64.whl",
    "torch-2.10.0-3-cp314-cp314t-manylinux_2_28_x86_64.whl",
    "nvidia_cuda_nvrtc_cu12-12.8.93-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
)


@pytest.mark.parametrize("wheel", _TORCH_DEPENDENCY_WHEELS)
def test_pips_platforms_take_every_manylinux_tag_the_image_does(wheel: str) -> None:
    from packaging.utils import parse_wheel_filename

    tags = parse_wheel_filename(wheel)[3]
    arch = "aarch64" if wheel.endswith("aarch64.whl") else "x86_64"
    platforms = pydeps.pip_platforms(arch)
    assert any(t.platform in platforms for t in tags)
    assert platforms[0] == f"manylinux_2_28_{arch}"
    argv = pydeps.pip_argv(["pip"], _req(platform=arch), "report.json")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"] == platforms


def test_pips_platforms_stop_at_each_architectures_first_manylinux() -> None:
    assert pydeps.pip_platforms("x86_64")[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]
    arm = pydeps.pip_platforms("aarch64")
    assert arm[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert not any("2_28_x86" in t for t in arm)


@pytest.mark.network
def test_live_pip_pins_free_threaded_wheels_without_a_free_threaded_python(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The pin is the cp314t wheel itself: its sha256 is the one PyPI lists for it."""
    import requests

    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    req = PinRequest(requirements=("markupsafe==3.0.4",), python="3.14t")
    result = pydeps.pin(req)
    assert result.tool == "pip"
    page = requests.get(
        "https://pypi.org/simple/markupsafe/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
        timeout=30,
    ).json()
    wanted = {
        f["hashes"]["sha256"]
        for f in page["files"]
        if f["filename"].startswith("markupsafe-3.0.4-cp314-cp314t-") and "x86_64" in f["filename"]
    }
    assert {h.removeprefix("sha256:") for h in result.packages[0].hashes} <= wanted
    assert result.packages[0].hashes

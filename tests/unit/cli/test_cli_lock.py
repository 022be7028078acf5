"""`envbuild lock` on the command line: output, exit codes, and that bad input writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.main import cli
from tests.unit.lock.test_lockfile import GOLDEN, install_fakes, make_image


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_lock_then_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    code, out, err = run("lock", str(image))
    assert code == 0, err
    assert out.splitlines()[0] == (
        f"wrote {image}/envbuild.lock: torch 2.10.0 (cu128), CUDA 12.8.1, Python 3.12, "
        "29 packages pinned by uv"
    )
    assert "warning: base image nvidia/cuda:12.8.1-base-ubuntu24.04: no registry reachable" in err
    assert (image / "envbuild.lock").read_text() == GOLDEN.read_text()

    code, out, _ = run("lock", str(image))
    assert code == 0 and out.startswith(f"unchanged {image}/envbuild.lock")

    code, out, _ = run("lock", "--check", str(image))
    assert (code, out) == (0, f"{image}/envbuild.lock: fresh (torch 2.10.0 (cu128), 29 packages)\n")


def test_check_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    code, out, _ = run("lock", "--check", "--json", str(image))
    assert code == 1
    doc = json.loads(out)
    assert doc["ok"] is False and doc["error"] == "StaleLockError"
    assert doc["hint"] == f"envbuild lock {image}"
    run("lock", str(image))
    code, out, _ = run("lock", "--check", "--json", str(image))
    doc = json.loads(out)
    assert code == 0 and doc["status"] == "fresh" and doc["framework"]["version"] == "2.10.0"


def test_check_stale_prints_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    run("lock", str(image))
    req = image / "envbuild.toml"
    req.write_text(req.read_text().replace('driver = "570.124.06"', 'driver = "575.51.03"'))
    code, _, err = run("lock", "--check", str(image))
    assert code == 1
    assert f"error: {image}/envbuild.lock is stale: {image}/envbuild.toml changed" in err
    assert f"  next: envbuild lock {image}" in err


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe[\x00f\x00",  # UTF-16 with a BOM
        b"\x89PNG\r\n\x1a\n\x00\x00",  # garbage
        b'[framework]\nrequirement = "torch"\nbogus = 1\n',  # unknown key
        b'[framework]\nrequirement = "torch"\n[image]\ndevice = "cpu"\nflavour = "devel"\n',
    ],
)
def test_bad_request_exits_2_and_leaves_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    install_fakes(monkeypatch)
    image = make_image(tmp_path)
    run("lock", str(image))
    before = (image / "envbuild.lock").read_bytes()
    (image / "envbuild.toml").write_bytes(content)
    for args in (("lock", str(image)), ("lock", "--check", str(image))):
        code, out, err = run(*args)
        assert code == 2, (args, out, err)
        assert err.startswith(f"error: {image}/envbuild.toml")
        assert "Traceback" not in out + err
        assert "  next: " in err
    assert (image / "envbuild.lock").read_bytes() == before


def test_check_refuses_upgrade_flags(tmp_path: Path) -> None:
    code, _, err = run("lock", "--check", "--upgrade", str(tmp_path))
    assert code == 2 and "cannot be combined" in err


def test_missing_folder_is_exit_2(tmp_path: Path) -> None:
    code, _, err = run("lock", str(tmp_path / "nope"))
    assert code == 2 and "no such image folder" in err


@pytest.mark.network
@pytest.mark.parametrize("name", ["torch-slim", "torch-train"])
def test_live_relock_of_an_example_is_byte_identical(tmp_path: Path, name: str) -> None:
    # Real matrix, resolver and uv against PyPI: the committed lock's picks are kept, so
    # re-locking a fresh copy must give the same bytes (no timestamps, sorted, stable).
    import shutil

    src = Path(__file__).resolve().parents[3] / "images" / name
    dst = tmp_path / "images" / name
    dst.mkdir(parents=True)
    for f in ("envbuild.toml", "envbuild.lock"):
        shutil.copy(src / f, dst / f)
    code, out, err = run("lock", str(dst))
    assert code == 0, err
    assert out.startswith(f"unchanged {dst}/envbuild.lock"), out + err
    assert (dst / "envbuild.lock").read_bytes() == (src / "envbuild.lock").read_bytes()


@pytest.mark.network
def test_live_lock_steps_down_from_a_series_the_requirements_exclude(tmp_path: Path) -> None:
    """tests/fixtures/projects/jax-numpy-pin (maxtext's numpy<2.2): the newest jax the matrix
    picks for an H100 on 570 needs numpy>=2.2, so lock takes an older series and says so."""
    import shutil

    src = Path(__file__).resolve().parents[3] / "tests/fixtures/projects/jax-numpy-pin"
    dst = tmp_path / "proj"
    shutil.copytree(src, dst)
    (dst / "envbuild.toml").write_text(
        '[framework]\nrequirement = "jax"\n\n[packages]\nfiles = ["requirements.txt"]\n\n'
        '[targets]\ngpus = ["H100"]\ndriver = "570.124.06"\n'
    )
    code, _, err = run("lock", str(dst))
    assert code == 0, err
    assert "warning: left out jax " in err and "it conflicts with the requirements" in err
    text = (dst / "envbuild.lock").read_text()
    numpy = text.split('name = "numpy"\nversion = "', 1)[1].split('"', 1)[0]
    assert tuple(int(x) for x in numpy.split(".")[:2]) < (2, 2)


def test_built_from_source_names_the_base_nvcc_on_a_framework_base() -> None:
    """A framework base compiles with its own nvcc (no separate devel builder image is locked)."""
    from envbuild.cli.commands.lock import _built_from_source
    from tests.golden import fixtures

    lock = fixtures.framework_ext_lock()
    assert lock.stack.base_image.builder is None
    assert [s["toolchain"] for s in _built_from_source(lock)] == [f"nvcc of {fixtures.NGC_REF}"]


# --- the framework's own index does not answer ------------------------------------------------

CU126 = "https://download.pytorch.org/whl/cu126"
FALLBACK_LINE = (
    "download.pytorch.org/whl/cu126 does not answer: locked torch 2.10.0 cu128 from PyPI, the "
    "newest build there that fits; the best fit is torch 2.14.1 cu126 ([indexes] "
    'framework_index = "index" requires it)'
)


def _index_and_pypi_stacks(monkeypatch: pytest.MonkeyPatch) -> list[frozenset[str]]:
    """The resolver's answer: torch 2.14.1 cu126 from the PyTorch index while it is not known
    to be down, the fake uv's torch 2.10.0 cu128 from PyPI once it is (as the shipped matrix
    answers for H100 + L4 on 570.124.06: tests/unit/resolver/test_ways_out.py)."""
    import dataclasses

    import envbuild.resolver
    from envbuild.core.models import FrameworkPick
    from tests.unit.lock.test_lockfile import demo_stack

    pypi = demo_stack()
    best = dataclasses.replace(
        pypi, framework=FrameworkPick("torch", "2.14.1", "cu126", "torch==2.14.1", CU126, False)
    )
    calls: list[frozenset[str]] = []

    def resolve(
        req: object,
        m: object,
        hosts: object = (),
        *,
        unreachable: frozenset[str] = frozenset(),
        words: str = "flags",
    ) -> object:
        calls.append(frozenset(unreachable))
        # A kept pick (the framework pinned to 2.10.0) is the PyPI build, as in the matrix.
        kept = "==2.10.0" in getattr(req, "framework", "")
        return pypi if kept or CU126 in calls[-1] else best

    monkeypatch.setattr(envbuild.resolver, "resolve", resolve)
    return calls


def test_lock_falls_back_to_pypi_when_the_framework_index_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envbuild.lock.reach

    install_fakes(monkeypatch)
    calls = _index_and_pypi_stacks(monkeypatch)
    asked: list[str] = []

    def answers(url: str) -> bool:
        asked.append(url)
        return False

    monkeypatch.setattr(envbuild.lock.reach, "index_answers", answers)
    image = make_image(tmp_path)
    code, out, err = run("lock", str(image))
    assert code == 0, err
    assert "torch 2.10.0 (cu128)" in out.splitlines()[0]
    assert err.count(FALLBACK_LINE) == 1 and asked == [CU126]
    assert calls == [frozenset(), frozenset({CU126})]
    text = (image / "envbuild.lock").read_text()
    assert FALLBACK_LINE.replace('"', '\\"') in text  # recorded in [stack] notes
    code, out, _ = run("lock", "--check", str(image))  # offline: nothing is probed
    assert code == 0 and "fresh" in out and asked == [CU126]
    # A re-lock keeps the PyPI pick and its line: the same bytes, nothing probed again.
    monkeypatch.setattr(envbuild.lock.reach, "index_answers", lambda url: pytest.fail("probed"))
    code, out, err = run("lock", str(image))
    assert code == 0 and out.startswith("unchanged"), err
    assert FALLBACK_LINE not in err


@pytest.mark.parametrize("policy", ["pypi", "index"])
def test_lock_probes_nothing_unless_the_policy_is_auto(
    policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envbuild.lock.reach
    from tests.unit.lock.test_lockfile import DEMO_REQUEST

    install_fakes(monkeypatch)  # the resolver answers 2.10.0 cu128 from PyPI
    monkeypatch.setattr(envbuild.lock.reach, "index_answers", lambda url: pytest.fail("probed"))
    image = make_image(tmp_path, DEMO_REQUEST + f'\n[indexes]\nframework_index = "{policy}"\n')
    code, _, err = run("lock", str(image))
    assert code == 0, err


def test_a_bad_framework_index_exits_2(tmp_path: Path) -> None:
    from tests.unit.lock.test_lockfile import DEMO_REQUEST

    image = make_image(tmp_path, DEMO_REQUEST + '\n[indexes]\nframework_index = "PyPI"\n')
    code, _, err = run("lock", str(image))
    assert code == 2
    assert "[indexes] framework_index: 'PyPI' is not one of auto, pypi, index" in err
    assert not (image / "envbuild.lock").exists()


def test_reach_says_when_no_build_from_an_answering_index_fits() -> None:
    import dataclasses

    from envbuild.app.lock_reach import Reach
    from envbuild.core.errors import UnsatisfiableError
    from envbuild.core.models import FrameworkPick
    from envbuild.request.parse import request_from_flags
    from tests.unit.lock.test_lockfile import demo_stack

    best = dataclasses.replace(
        demo_stack(),
        framework=FrameworkPick("torch", "2.14.1", "cu126", "torch==2.14.1", CU126, False),
    )

    def resolve_with(req: object, gone: frozenset[str]) -> object:
        if gone:
            raise UnsatisfiableError("nothing fits", hint="try: once it answers")
        return best

    reach = Reach(answers=lambda url: False)
    with pytest.raises(UnsatisfiableError) as caught:
        reach.resolve(request_from_flags(gpus=("H100",)), resolve_with)  # type: ignore[arg-type]
    assert caught.value.message.startswith("download.pytorch.org/whl/cu126 does not answer")
    assert "the best fit is torch 2.14.1 cu126" in caught.value.hint
    offline = Reach(offline=True, answers=lambda url: pytest.fail("probed"))
    assert offline.resolve(request_from_flags(), resolve_with) is best  # type: ignore[arg-type]


def test_a_wheel_folder_that_holds_the_framework_stands_in_for_its_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # images/torch-cpu and the writes-cwd fixture take torch's CPU wheel from a local
    # find_links folder where the PyTorch index does not answer: no probe, no fallback.
    import envbuild.lock.reach
    from tests.unit.lock.test_lockfile import DEMO_REQUEST

    install_fakes(monkeypatch)
    calls = _index_and_pypi_stacks(monkeypatch)
    monkeypatch.setattr(envbuild.lock.reach, "index_answers", lambda url: pytest.fail("probed"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.14.1+cu126-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"")
    image = make_image(tmp_path, DEMO_REQUEST + f'\n[indexes]\nfind_links = ["{wheels}"]\n')
    _, _, err = run("lock", str(image))  # what the fake uv then pins is not this test's
    assert calls == [frozenset()], err  # the best stack, resolved once, nothing probed
    assert FALLBACK_LINE not in err


def test_reach_takes_the_newest_build_a_wheel_folder_holds_when_the_index_is_down() -> None:
    # torch's CPU builds live only on download.pytorch.org/whl/cpu; /opt/wheels holds 2.13.0.
    import dataclasses

    from envbuild.app.lock_reach import Reach
    from envbuild.core.models import FrameworkPick, Request, Stack
    from envbuild.request.parse import request_from_flags
    from tests.unit.lock.test_lockfile import demo_stack

    cpu = "https://download.pytorch.org/whl/cpu"

    def stack(version: str) -> Stack:
        pick = FrameworkPick("torch", version, "cpu", f"torch=={version}", cpu, False)
        return dataclasses.replace(demo_stack(), framework=pick)

    asked: list[str] = []

    def resolve_with(req: Request, gone: frozenset[str]) -> Stack:
        asked.append(req.framework)
        return stack("2.13.0" if "==2.13.0" in asked[-1] else "2.15.0")

    reach = Reach(
        answers=lambda url: False,
        local=lambda s: s.framework.version == "2.13.0",
        held=lambda name: ["2.13.0"] if name == "torch" else [],
    )
    got = reach.resolve(request_from_flags(), resolve_with)
    assert got.framework.version == "2.13.0"
    assert asked == ["torch", "torch==2.13.0"]
    assert reach.line == (
        "download.pytorch.org/whl/cpu does not answer: locked torch 2.13.0 cpu from a local "
        "find_links folder, the newest build there that fits; the best fit is torch 2.15.0 cpu "
        '([indexes] framework_index = "index" requires it)'
    )

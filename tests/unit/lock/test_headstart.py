"""envbuild/lock/headstart.py: the kept command starts at once and its result is taken only when
the command the lock then builds is the same one.

"uv" here is a real child process (this interpreter running a short script that writes the
output file uv would and exits with a chosen code); the fallback runner records its calls.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from envbuild.lock import headstart
from envbuild.lock.pins import Runner, RunResult
from envbuild.lock.uvenv import isolated_env

# The stand-in for uv: writes pylock.toml from requirements.in (so the output shows which input
# it read), prints a line on each stream and exits with the code its `--upgrade-package exit-N`
# names. Its arguments are uv's as envbuild writes them: the head start starts nothing else.
SCRIPT = (
    "import sys, pathlib; req = pathlib.Path('requirements.in').read_text(); "
    "pathlib.Path('pylock.toml').write_text('pinned ' + req); "
    "print('out'); print('err', file=sys.stderr); "
    "sys.exit(int(sys.argv[sys.argv.index('--upgrade-package') + 1][len('exit-'):]))"
)
FILES = {"requirements.in": "torch==2.13.0\n"}
UV = ""
"""The stand-in's path (the `cache` fixture writes it)."""


class Fallback:
    """The runner used when the started command is not taken: records its calls."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> RunResult:
        self.calls.append(list(argv))
        (cwd / "pylock.toml").write_text("from the fallback\n")
        return RunResult(0, "", "")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(folder))
    monkeypatch.delenv(headstart.DISABLE_ENV, raising=False)
    # The head start runs only the uv the lock would use: the stand-in, made the lock's uv.
    uv = tmp_path / "uv"
    uv.write_text(f"#!{sys.executable}\n{SCRIPT}\n")
    uv.chmod(0o755)
    monkeypatch.setenv("ENVBUILD_UV", str(uv))
    monkeypatch.setitem(globals(), "UV", str(uv))
    return folder


def _image(tmp_path: Path) -> Path:
    image = tmp_path / "image"
    image.mkdir()
    (image / "envbuild.toml").write_text('[framework]\nrequirement = "torch"\n')
    return image


def _argv(code: int = 0, *extra: str) -> list[str]:
    return [UV, "pip", "compile", "requirements.in", "--upgrade-package", f"exit-{code}", *extra]


def _run_once(
    image: Path, work: Path, argv: Sequence[str], files: Mapping[str, str], fallback: Runner
) -> tuple[headstart.HeadStart, RunResult]:
    """One lock's worth: begin, the lock's uv call from `work`, a clean exit."""
    work.mkdir(exist_ok=True)
    for name, text in files.items():
        (work / name).write_text(text)
    with headstart.begin(image, ["upgrade=False"]) as ahead:
        result = ahead.runner(fallback)(argv, work, isolated_env(os.environ))
    return ahead, result


def test_the_kept_command_starts_at_once_and_its_result_is_taken(
    tmp_path: Path, cache: Path
) -> None:
    image, fallback = _image(tmp_path), Fallback()
    first, _ = _run_once(image, tmp_path / "w1", _argv(), FILES, fallback)
    assert first.started == [] and not first.used  # nothing kept yet: the fallback ran
    assert len(fallback.calls) == 1

    with headstart.begin(image, ["upgrade=False"]) as ahead:
        (started,) = ahead.started  # running before the lock built its command
        assert started is not None
        running = started.work
        work = tmp_path / "w2"
        work.mkdir()
        (work / "requirements.in").write_text(FILES["requirements.in"])
        result = ahead.runner(fallback)(_argv(), work, isolated_env(os.environ))
    assert ahead.used
    assert len(fallback.calls) == 1  # not run again
    assert (result.returncode, result.stdout, result.stderr) == (0, "out\n", "err\n")
    assert (work / "pylock.toml").read_text() == "pinned torch==2.13.0\n"
    assert not os.path.exists(running)  # its own folder is gone


def test_a_different_command_kills_the_started_one_and_runs_its_own(
    tmp_path: Path, cache: Path
) -> None:
    image, fallback = _image(tmp_path), Fallback()
    _run_once(image, tmp_path / "w1", _argv(0, "--offline"), FILES, fallback)
    ahead, _ = _run_once(image, tmp_path / "w2", _argv(0), FILES, fallback)
    assert not ahead.used and len(fallback.calls) == 2
    assert (tmp_path / "w2" / "pylock.toml").read_text() == "from the fallback\n"


def test_a_different_input_file_is_a_different_command(tmp_path: Path, cache: Path) -> None:
    image, fallback = _image(tmp_path), Fallback()
    _run_once(image, tmp_path / "w1", _argv(), FILES, fallback)
    ahead, _ = _run_once(
        image, tmp_path / "w2", _argv(), {"requirements.in": "torch==2.12.0\n"}, fallback
    )
    assert not ahead.used and len(fallback.calls) == 2


def test_the_working_folder_is_written_generically(tmp_path: Path, cache: Path) -> None:
    """uv's folder differs every run: argv naming it (a links page) still matches."""
    image, fallback = _image(tmp_path), Fallback()
    for n in (1, 2):
        work = tmp_path / f"w{n}"
        ahead, _ = _run_once(
            image, work, [*_argv(), "--find-links", str(work / "page.html")], FILES, fallback
        )
    assert ahead.used and len(fallback.calls) == 1


def test_a_wheel_changed_since_the_start_is_not_taken(tmp_path: Path, cache: Path) -> None:
    """uv may have read the old file: its hash would be remembered for the new one."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / "torch-2.13.0-py3-none-any.whl"
    wheel.write_bytes(b"old")
    image, fallback = _image(tmp_path), Fallback()
    argv = [*_argv(), "--find-links", str(wheels)]
    _run_once(image, tmp_path / "w1", argv, FILES, fallback)
    real_start = headstart.Started

    def start_then_replace(*args: object) -> headstart.Started:
        started = real_start(*args)  # type: ignore[arg-type]
        wheel.write_bytes(b"newer")  # another size: another identity
        return started

    (tmp_path / "w2").mkdir()
    (tmp_path / "w2" / "requirements.in").write_text(FILES["requirements.in"])
    with headstart.begin(image, ["upgrade=False"], start=start_then_replace) as ahead:
        assert ahead.started != []
        ahead.runner(fallback)(argv, tmp_path / "w2", isolated_env(os.environ))
    assert not ahead.used and len(fallback.calls) == 2


def test_an_edited_image_folder_starts_nothing(tmp_path: Path, cache: Path) -> None:
    image, fallback = _image(tmp_path), Fallback()
    _run_once(image, tmp_path / "w1", _argv(), FILES, fallback)
    (image / "envbuild.toml").write_text('[framework]\nrequirement = "torch==2.12.*"\n')
    with headstart.begin(image, ["upgrade=False"]) as ahead:
        assert ahead.started == []
    with headstart.begin(image, ["upgrade=True"]) as ahead:  # other flags: another record
        assert ahead.started == []


def _records(cache: Path) -> list[Path]:
    return sorted((cache / headstart.FOLDER).glob("*.json"))


def test_a_failing_command_is_taken_too_and_nothing_is_kept_from_a_failed_lock(
    tmp_path: Path, cache: Path
) -> None:
    """uv's "no wheel" answer is a lock's first round when a package comes from its sdist:
    a failure is a result like any other. A lock that fails keeps nothing."""
    image, fallback = _image(tmp_path), Fallback()
    _run_once(image, tmp_path / "w1", _argv(1), FILES, fallback)
    ahead, result = _run_once(image, tmp_path / "w2", _argv(1), FILES, fallback)
    assert ahead.used and len(fallback.calls) == 1
    assert (result.returncode, result.stderr) == (1, "err\n")

    (tmp_path / "other").mkdir()
    other = _image(tmp_path / "other")
    (tmp_path / "w3").mkdir()
    (tmp_path / "w3" / "requirements.in").write_text(FILES["requirements.in"])
    with pytest.raises(RuntimeError), headstart.begin(other, ["upgrade=False"]) as ahead:
        ahead.runner(Fallback())(_argv(), tmp_path / "w3", isolated_env(os.environ))
        raise RuntimeError("the lock failed after uv")
    assert len(_records(cache)) == 1  # only the first folder's


def test_a_record_that_is_not_the_users_own_or_not_a_record_starts_nothing(
    tmp_path: Path, cache: Path
) -> None:
    image, fallback = _image(tmp_path), Fallback()
    _run_once(image, tmp_path / "w1", _argv(), FILES, fallback)
    (record,) = _records(cache)
    os.chmod(record, 0o666)  # others could write the command it runs
    with headstart.begin(image, ["upgrade=False"]) as ahead:
        assert ahead.started == []
    for text in ("{not json", json.dumps({"format": 1, "argv": "uv"}), "[]"):
        record.write_text(text)
        os.chmod(record, 0o600)
        with headstart.begin(image, ["upgrade=False"]) as ahead:
            assert ahead.started == []


def test_a_command_that_cannot_start_leaves_nothing_behind(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, fallback = _image(tmp_path), Fallback()
    missing = [str(tmp_path / "no-such-uv"), "pip", "compile"]
    _run_once(image, tmp_path / "w1", missing, FILES, fallback)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    with headstart.begin(image, ["upgrade=False"]) as ahead:
        assert ahead.started == []
    assert list((tmp_path / "tmp").iterdir()) == []


def test_switched_off_by_the_environment(tmp_path: Path, cache: Path) -> None:
    image, fallback = _image(tmp_path), Fallback()
    _run_once(image, tmp_path / "w1", _argv(), FILES, fallback)
    with headstart.begin(image, ["upgrade=False"], environ={headstart.DISABLE_ENV: "1"}) as ahead:
        assert ahead.started == []


def _lock_with(
    image: Path, work: Path, argvs: Sequence[list[str]], fallback: Runner
) -> headstart.HeadStart:
    """One lock that runs uv once per argv, each from its own folder."""
    with headstart.begin(image, ["upgrade=False"]) as ahead:
        run = ahead.runner(fallback)
        for n, argv in enumerate(argvs):
            folder = work / str(n)
            folder.mkdir(parents=True)
            (folder / "requirements.in").write_text(FILES["requirements.in"])
            run(argv, folder, isolated_env(os.environ))
    return ahead


def test_every_command_of_a_lock_starts_ahead_and_is_taken_in_its_turn(
    tmp_path: Path, cache: Path
) -> None:
    """A lock with a source package runs uv several times: all start at once."""
    image, fallback = _image(tmp_path), Fallback()
    rounds = [_argv(1), _argv(0, "--no-binary", "x"), _argv(0, "--constraint", "constraints.txt")]
    first = _lock_with(image, tmp_path / "l1", rounds, fallback)
    assert first.taken == 0 and len(fallback.calls) == 3
    again = _lock_with(image, tmp_path / "l2", rounds, fallback)
    assert again.taken == 3 and len(fallback.calls) == 3


def test_once_a_command_differs_the_rest_started_ahead_are_killed(
    tmp_path: Path, cache: Path
) -> None:
    image, fallback = _image(tmp_path), Fallback()
    rounds = [_argv(0), _argv(0, "--no-binary", "x"), _argv(0, "--constraint", "constraints.txt")]
    _lock_with(image, tmp_path / "l1", rounds, fallback)
    with headstart.begin(image, ["upgrade=False"]) as ahead:
        started = list(ahead.started)
        assert all(s is not None for s in started)
        run = ahead.runner(fallback)
        for n, argv in enumerate([rounds[0], _argv(0, "--no-binary", "y"), rounds[2]]):
            folder = tmp_path / "l2" / str(n)
            folder.mkdir(parents=True)
            (folder / "requirements.in").write_text(FILES["requirements.in"])
            run(argv, folder, isolated_env(os.environ))
            if n == 1:  # the second differs: it and the third are gone
                assert all(s is not None and s.proc is not None for s in started)
                assert [s.proc.poll() is not None for s in started[1:]] == [True, True]  # type: ignore[union-attr]
                assert not any(os.path.exists(s.work) for s in started)  # type: ignore[union-attr]
    assert ahead.taken == 1 and len(fallback.calls) == 3 + 2


def test_a_wheel_behind_a_links_page_changed_since_the_start_is_not_taken(
    tmp_path: Path, cache: Path
) -> None:
    """The page envbuild writes for uv names the wheels by file:// URL: those files are
    watched too, not just folders."""
    wheel = tmp_path / "wheels" / "torch-2.13.0+cpu-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"old")
    page = '<a href="file://' + str(wheel).replace("+", "%2B") + '">w</a>\n'
    files = {**FILES, "find-links-0.html": page}
    image, fallback = _image(tmp_path), Fallback()

    def lock(n: int) -> headstart.HeadStart:
        work = tmp_path / f"w{n}"
        return _run_once(
            image,
            work,
            [*_argv(), "--find-links", str(work / "find-links-0.html")],
            files,
            fallback,
        )[0]

    lock(1)
    assert lock(2).used  # unchanged: taken
    real_start = headstart.Started

    def start_then_replace(*args: object) -> headstart.Started:
        started = real_start(*args)  # type: ignore[arg-type]
        wheel.write_bytes(b"newer")
        return started

    work = tmp_path / "w3"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    argv = [*_argv(), "--find-links", str(work / "find-links-0.html")]
    with headstart.begin(image, ["upgrade=False"], start=start_then_replace) as ahead:
        ahead.runner(fallback)(argv, work, isolated_env(os.environ))
    assert not ahead.used


def test_inputs_are_compared_byte_for_byte(tmp_path: Path, cache: Path) -> None:
    """CRLF against LF is another file; a literal `{work}` in an argument is just text."""
    image, fallback = _image(tmp_path), Fallback()
    _run_once(image, tmp_path / "w1", _argv(), {"requirements.in": "torch\r\n"}, fallback)
    ahead, _ = _run_once(image, tmp_path / "w2", _argv(), {"requirements.in": "torch\n"}, fallback)
    assert not ahead.used
    odd = [*_argv(), "--find-links", "/data/{work}/wheels"]
    _run_once(image, tmp_path / "w3", odd, FILES, fallback)
    ahead, _ = _run_once(image, tmp_path / "w4", odd, FILES, fallback)
    assert ahead.used  # the same text both times, never replaced by uv's folder

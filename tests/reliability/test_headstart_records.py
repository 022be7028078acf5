"""No code from records (docs/reliability.md, "Round 3"): the lock's head start
(envbuild/lock/headstart.py) runs only the uv this run would use, the same file it recorded,
whatever a kept record in the user cache says."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from envbuild.lock import headstart
from tests.reliability.helpers import copy_example, run
from tests.reliability.hostile import fake_uv, uv_calls


def _started_ahead(call: dict[str, object]) -> bool:
    return Path(str(call["cwd"])).parent.name.startswith("envbuild-headstart-")


def _locked_twice(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """torch-train locked twice with the stand-in for uv: the record of the second is kept,
    and a third lock would start it ahead."""
    image = copy_example(tmp_path, "torch-train")
    (image / "envbuild.lock").unlink(missing_ok=True)
    env = {
        **fake_uv(tmp_path / "uv"),
        "ENVBUILD_CACHE_DIR": str(tmp_path / "cache"),
        headstart.DISABLE_ENV: "",
    }
    for _ in range(2):
        assert run("lock", "--offline", str(image), env=env).code == 0
    return image, env


def _record(tmp_path: Path) -> Path:
    [path] = (tmp_path / "cache").rglob("headstart/*.json")
    return path


def _planted(tmp_path: Path, marker: Path) -> Path:
    """A program that leaves `marker` behind when anything runs it."""
    evil = tmp_path / "evil"
    evil.write_text(f"#!{sys.executable}\nopen({str(marker)!r}, 'w').write('ran')\n")
    evil.chmod(0o755)
    return evil


def _swap_strings(value: object, old: str, new: str) -> object:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_swap_strings(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _swap_strings(v, old, new) for k, v in value.items()}
    return value


def test_a_record_naming_another_program_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept record is edited (by anyone who can write the user's cache) to name another
    program where it named uv: the head start asks to start nothing, and the lock runs uv."""
    image, env = _locked_twice(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    options = headstart.lock_options(False, True, (), os.environ)
    asked: list[list[str]] = []

    def start(argv: Sequence[str], *rest: object) -> headstart.Started:
        asked.append(list(argv))
        raise OSError("recorded, not started")

    headstart.begin(image, options, start=start)
    assert [argv[0] for argv in asked] == [env["ENVBUILD_UV"]]  # the record as kept: uv

    marker = tmp_path / "ran"
    evil = _planted(tmp_path, marker)
    path = _record(tmp_path)
    assert env["ENVBUILD_UV"] in path.read_text()
    record = json.loads(path.read_text())
    path.write_text(json.dumps(_swap_strings(record, env["ENVBUILD_UV"], str(evil))))
    os.chmod(path, 0o600)
    asked.clear()
    headstart.begin(image, options, start=start)
    assert asked == []
    assert run("lock", "--offline", str(image), env=env).code == 0
    assert not marker.exists(), "a program named by a record was run"
    calls = uv_calls(tmp_path / "uv")
    assert len(calls) == 3 and not _started_ahead(calls[2])


def test_a_record_whose_program_was_replaced_is_not_started_ahead(tmp_path: Path) -> None:
    """The uv at the recorded path is another file now (same path, new identity): nothing
    starts before the lock has chosen its uv; the lock runs the uv it finds, as without a head
    start."""
    image, env = _locked_twice(tmp_path)
    uv = Path(env["ENVBUILD_UV"])
    text = uv.read_text()
    uv.unlink()
    uv.write_text(text + "\n# another build of uv\n")
    uv.chmod(0o755)
    assert run("lock", "--offline", str(image), env=env).code == 0
    calls = uv_calls(tmp_path / "uv")
    assert len(calls) == 3 and not _started_ahead(calls[2])
    # The next lock records the new file, and the one after takes its head start again.
    for _ in range(2):
        assert run("lock", "--offline", str(image), env=env).code == 0
    assert _started_ahead(uv_calls(tmp_path / "uv")[-1])


def test_a_record_of_another_uv_is_not_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment now picks another uv (ENVBUILD_UV elsewhere): the recorded one is not
    the uv this run uses, so it is not started."""
    image, env = _locked_twice(tmp_path)
    other = fake_uv(tmp_path / "uv2")
    for name, value in {**env, **other}.items():
        monkeypatch.setenv(name, value)
    asked: list[Sequence[str]] = []

    def start(argv: Sequence[str], *rest: object) -> headstart.Started:
        asked.append(argv)
        raise OSError("recorded, not started")

    headstart.begin(image, headstart.lock_options(False, True, (), os.environ), start=start)
    assert asked == []
    assert run("lock", "--offline", str(image), env={**env, **other}).code == 0
    assert len(uv_calls(tmp_path / "uv")) == 2  # the recorded uv did not run
    [call] = uv_calls(tmp_path / "uv2")
    assert not _started_ahead(call)


def _edited_record(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = _record(tmp_path)
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))
    os.chmod(path, 0o600)


@pytest.mark.parametrize(
    "edit",
    [
        # uv runs the interpreter `--python` names to read its tags.
        lambda r: r["calls"][0]["args"].extend(["--python", "/tmp/evil-python"]),
        # An option uv would take from a config file of the record's own.
        lambda r: r["calls"][0]["args"].extend(["--config-file", "evil.toml"]),
        lambda r: r["calls"][0]["files"].update(
            {"uv-dependency-metadata.toml": "[pip]\npython = '/tmp/evil'\n"}
        ),
        # An editable install of a folder anywhere is built (its setup.py runs).
        lambda r: r["calls"][0]["files"].update({"requirements.in": "-e /tmp/evil-project\n"}),
        lambda r: r["calls"][0]["files"].update({"evil.toml": "x"}),
        lambda r: r["calls"][0]["args"].insert(0, "run"),
    ],
    ids=["python", "config-file", "config-content", "option-line", "file-name", "subcommand"],
)
def test_a_record_whose_arguments_choose_a_program_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Callable[[dict[str, Any]], None]
) -> None:
    """The uv is this run's, but the record's arguments or files are not what envbuild
    writes for it: nothing is started from them."""
    image, env = _locked_twice(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    asked: list[Sequence[str]] = []

    def start(argv: Sequence[str], *rest: object) -> headstart.Started:
        asked.append(argv)
        raise OSError("recorded, not started")

    options = headstart.lock_options(False, True, (), os.environ)
    headstart.begin(image, options, start=start)
    assert len(asked) == 1  # the record as kept starts
    asked.clear()
    _edited_record(tmp_path, edit)
    headstart.begin(image, options, start=start)
    assert asked == []


def test_the_shape_is_what_envbuild_writes_for_uv() -> None:
    """`headstart.envbuild_shaped` accepts every command `lock.pins` builds (it names the
    same options and files without importing that module)."""
    import sys

    from envbuild.lock import pins

    metadata = (
        pins.DependencyMetadata(
            "flash-attn", "2.8.3", ("torch", 'einops; python_version >= "3.9"')
        ),
        pins.DependencyMetadata("x", None, ()),
    )
    requests = [
        pins.PinRequest(requirements=("torch",), python="3.12"),
        pins.PinRequest(
            requirements=("torch==2.10.0", "numpy<3"),
            python="3.11",
            platform="aarch64",
            index_url="https://download.pytorch.org/whl/cu128",
            extra_index_urls=("https://pypi.org/simple",),
            find_links=("/opt/wheels", "\0work\0/find-links-0.html"),
            upgrade_packages=("numpy",),
            offline=True,
            constraints=("torch==2.10.0",),
            source_packages=("flash-attn",),
            dependency_metadata=metadata,
        ),
    ]
    for req in requests:
        for interpreter in (None, sys.executable):
            argv = pins.uv_argv(["uv"], req, interpreter=interpreter)
            files = {
                "requirements.in": "\n".join(req.requirements) + "\n",
                pins.CONSTRAINTS_FILE: "\n".join(req.constraints) + "\n",
                pins.DEPENDENCY_METADATA_FILE: pins.dependency_metadata_text(metadata),
                pins.PREFERENCES_FILE: 'lock-version = "1.0"\n',
                "find-links-0.html": '<a href="file:///opt/wheels/x.whl">x</a>\n',
            }
            assert headstart.envbuild_shaped(argv[1:], files), argv

"""Schema versions: a lock written by a newer envbuild is refused by this one everywhere, `lock`
included (with or without --upgrade): never parsed as if it were this version's, never silently
rewritten in the older format. The way out names both directions: upgrade envbuild, or remove
the lock deliberately to go back. (poetry's Locker and uv refuse a newer lock version the same
way.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envbuild.core.models import LOCK_SCHEMA_VERSION
from tests.reliability.helpers import assert_clear_error, copy_example, reseal, run
from tests.reliability.hostile import assert_one_json, fake_uv, uv_calls


def _newer(image: Path, *, sealed: bool = True) -> bytes:
    lock = image / "envbuild.lock"
    text = re.sub(
        r"^schema_version = \d+$",
        f"schema_version = {LOCK_SCHEMA_VERSION + 1}",
        lock.read_text(),
        count=1,
        flags=re.MULTILINE,
    )
    # A newer envbuild may add tables this one does not know.
    text += '\n[provenance]\nbuilder = "envbuild 9"\n'
    lock.write_text(reseal(text) if sealed else text)
    return lock.read_bytes()


@pytest.mark.parametrize("sealed", [True, False])
@pytest.mark.parametrize(
    "args",
    [("lock", "--offline"), ("lock", "--offline", "--upgrade"), ("lock", "--check"), ("render",)],
)
def test_a_newer_lock_is_refused_and_left_alone(
    tmp_path: Path, args: tuple[str, ...], sealed: bool
) -> None:
    image = copy_example(tmp_path, "torch-train")
    before = _newer(image, sealed=sealed)
    env = fake_uv(tmp_path / "uv")
    out = run(*args, str(image), env=env)
    assert_clear_error(out, 2, names="newer")
    assert "upgrade envbuild" in out.err, out.err
    assert (image / "envbuild.lock").read_bytes() == before
    assert uv_calls(tmp_path / "uv") == []
    doc = assert_one_json(run(*args, "--json", str(image), env=env))
    assert doc["fields"]["schema_version"] == LOCK_SCHEMA_VERSION + 1, doc


def test_a_newer_lock_is_refused_by_validate_and_doctor(tmp_path: Path) -> None:
    from tests.reliability.helpers import REPO

    image = copy_example(tmp_path, "torch-train")
    _newer(image)
    facts = str(REPO / "tests/fixtures/hosts/h200-healthy.json")
    out = run("validate", str(image), env={"ENVBUILD_HOST_FACTS": facts})
    assert_clear_error(out, 2, names="newer")


@pytest.mark.parametrize("value", ['"1"', "1.0", "-1", "0", "true"])
def test_a_schema_version_that_is_not_a_known_integer(tmp_path: Path, value: str) -> None:
    image = copy_example(tmp_path, "torch-train")
    lock = image / "envbuild.lock"
    lock.write_text(
        reseal(
            re.sub(
                r"^schema_version = \d+$",
                f"schema_version = {value}",
                lock.read_text(),
                count=1,
                flags=re.MULTILINE,
            )
        )
    )
    before = lock.read_bytes()
    for args in (("lock", "--check"), ("render",)):
        out = run(*args, str(image))
        assert_clear_error(out, 2, names="schema_version")
    assert lock.read_bytes() == before
    # Not a newer lock: `lock` (the command those errors name) regenerates it, and says that
    # nothing of the unreadable lock was kept.
    out = run("lock", "--offline", str(image), env=fake_uv(tmp_path / "uv"))
    assert out.code == 0, out.text
    assert "not kept" in out.err, out.err
    assert run("lock", "--check", str(image)).code == 0

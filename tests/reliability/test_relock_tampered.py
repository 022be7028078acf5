"""Re-locking after tampering: the command `lock --check` names for a hand-edited lock must
undo the edit, not adopt it; and a re-lock says which earlier picks it kept.

`envbuild lock` runs for real against the shipped matrix; uv is replaced by a stand-in that
replays uv's recorded output and, like uv, keeps the versions it is given as preferences
(tests/reliability/hostile.py), so an edited pin that reached uv would come back in the lock.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.reliability.helpers import assert_clear_error, copy_example, run
from tests.reliability.hostile import fake_uv, uv_calls

EXAMPLE = "torch-train"
FORGED_DIGEST = "sha256:" + "e" * 64


def _tamper(lock: Path) -> None:
    """The edit of the report: numpy's version changed and a digest pinned by hand."""
    text = lock.read_text()
    old = 'name = "numpy"\nversion = "'
    at = text.index(old) + len(old)
    text = text[:at] + "2.1.0" + text[text.index('"', at) :]
    text = text.replace("pinned = false", f'digest = "{FORGED_DIGEST}"\npinned = true', 1)
    lock.write_text(text)


def _numpy_version(lock_text: str) -> str:
    at = lock_text.index('name = "numpy"\nversion = "') + len('name = "numpy"\nversion = "')
    return lock_text[at : lock_text.index('"', at)]


def test_relock_after_a_hand_edit_drops_the_edit(tmp_path: Path) -> None:
    image = copy_example(tmp_path, EXAMPLE)
    lock = image / "envbuild.lock"
    assert "pinned = false" in lock.read_text()  # the example's base digest is not pinned
    _tamper(lock)
    env = fake_uv(tmp_path / "uv")

    check = run("lock", "--check", str(image), env=env)
    assert_clear_error(check, 1, names="edited by hand")

    relock = run("lock", "--offline", str(image), env=env)
    assert relock.code == 0, relock.text
    # Said plainly, and the edit is not blamed on the index.
    assert "edited by hand" in relock.err, relock.text
    assert "not kept" in relock.err, relock.text
    assert "re-upload" not in relock.text, relock.text
    # The edited pin never reached uv as a preference, and nothing of the edit survives.
    (call,) = uv_calls(tmp_path / "uv")
    assert call["preferences"] is None or "2.1.0" not in call["preferences"], call
    text = lock.read_text()
    assert _numpy_version(text) == "2.5.5"
    assert FORGED_DIGEST not in text
    assert "pinned = false" in text

    fresh = run("lock", "--check", str(image), env=env)
    assert fresh.code == 0, fresh.text
    rendered = run("render", str(image))
    assert rendered.code == 0, rendered.text
    assert FORGED_DIGEST not in rendered.out


def test_relock_after_a_hand_edit_json_names_it(tmp_path: Path) -> None:
    image = copy_example(tmp_path, EXAMPLE)
    _tamper(image / "envbuild.lock")
    out = run("lock", "--offline", "--json", str(image), env=fake_uv(tmp_path / "uv"))
    assert out.code == 0, out.text
    doc = json.loads(out.out)
    assert any("edited by hand" in w for w in doc["warnings"]), doc["warnings"]
    assert not any("re-upload" in w for w in doc["warnings"]), doc["warnings"]


def test_relock_of_a_resealed_lock_says_what_it_kept(tmp_path: Path) -> None:
    """A lock whose hash was recomputed after the edit passes the body check: nothing tells it
    from a real lock, so its picks are kept, and the re-lock says which and how to drop them."""
    from tests.reliability.helpers import reseal

    image = copy_example(tmp_path, EXAMPLE)
    lock = image / "envbuild.lock"
    _tamper(lock)
    lock.write_text(reseal(lock.read_text()))
    out = run("lock", "--offline", str(image), env=fake_uv(tmp_path / "uv"))
    assert out.code == 0, out.text
    assert "kept" in out.err and "--upgrade" in out.err, out.text


def test_a_copied_folder_says_which_picks_it_kept(tmp_path: Path) -> None:
    """The new-user case: a folder copied with its lock keeps the old picks; the re-lock names
    them and the command that would give newer ones, instead of saying nothing."""
    image = copy_example(tmp_path, EXAMPLE)
    copy = image.parent / "my-train"
    image.rename(copy)
    out = run("lock", "--offline", str(copy), env=fake_uv(tmp_path / "uv"))
    assert out.code == 0, out.text
    assert "kept" in out.err, out.text
    assert "torch 2.10.0" in out.err, out.text
    assert f"envbuild lock --upgrade {copy}" in out.err, out.text


def test_relock_with_upgrade_says_nothing_was_kept(tmp_path: Path) -> None:
    image = copy_example(tmp_path, EXAMPLE)
    out = run("lock", "--offline", "--upgrade", str(image), env=fake_uv(tmp_path / "uv"))
    assert out.code == 0, out.text
    assert "kept" not in out.err, out.text
    (call,) = uv_calls(tmp_path / "uv")
    assert call["preferences"] is None

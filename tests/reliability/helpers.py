"""Shared pieces of the reliability tests: one CLI runner that fails loudly on a traceback or
an internal error (exit 70), and throwaway copies of the shipped example image folders."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from envbuild.cli import EXIT_INTERNAL, cli

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
MATRIX = REPO / "matrix"
# The examples whose committed lock is fresh against the shipped matrix (jax-train may lag
# behind a matrix refresh; these tests need a fresh lock to start from).
FRESH_EXAMPLES = ("torch-cpu", "torch-slim", "torch-train", "fleet", "tf-train")


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run(*args: str, env: dict[str, str] | None = None) -> Outcome:
    """Run `envbuild ARGS` in-process; a traceback or exit 70 fails the test at once."""
    result = CliRunner().invoke(cli, list(args), env=env)
    # CliRunner swallows exceptions into result.exception: an uncaught one is a bug.
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"envbuild {' '.join(args)} raised {result.exception!r}")
    out = Outcome(result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in out.text, out.text
    assert out.code != EXIT_INTERNAL, out.text
    assert "internal error" not in out.err, out.err
    return out


def assert_clear_error(out: Outcome, *codes: int, names: str | None = None) -> None:
    """One `error: ...` line and its `next: ...` step on stderr, with an allowed exit code."""
    assert out.code in codes, out.text
    assert out.err.startswith("error: "), out.text
    assert "\n  next: " in out.err, out.text
    if names is not None:
        assert names in out.err, (names, out.err)


def copy_example(root: Path, name: str) -> Path:
    """images/NAME copied to ROOT/images/NAME (request, lock and any Dockerfile.j2)."""
    dst = root / "images" / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in (IMAGES / name).iterdir():
        if f.is_file():
            shutil.copy(f, dst / f.name)
    return dst


_CONTENT_LINE = re.compile(r'^content_hash = "sha256:[0-9a-f]{64}"\n', re.MULTILINE)


def reseal(lock_text: str) -> str:
    """Recompute a lock's content_hash after an edit: a forged lock that passes the hash check,
    so what is behind it (the parser) is exercised too."""
    from envbuild.lockfile import _content_hash

    m = _CONTENT_LINE.search(lock_text)
    assert m is not None
    rest = lock_text[: m.start()] + lock_text[m.end() :]
    return rest[: m.start()] + f'content_hash = "{_content_hash(rest)}"\n' + rest[m.start() :]

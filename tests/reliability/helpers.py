"""Shared pieces of the reliability tests: one CLI runner that fails loudly on a traceback or
an internal error (exit 70), and throwaway copies of the shipped example image folders."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from envbuild.cli.main import EXIT_INTERNAL, cli

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
    args: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return self.out + self.err


def run(*args: str, env: dict[str, str] | None = None) -> Outcome:
    """Run `envbuild ARGS` in-process; a traceback or exit 70 fails the test at once."""
    result = CliRunner().invoke(cli, list(args), env=env)
    # CliRunner swallows exceptions into result.exception: an uncaught one is a bug.
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"envbuild {' '.join(args)} raised {result.exception!r}")
    out = Outcome(result.exit_code, result.stdout, result.stderr, args)
    assert "Traceback" not in out.text, out.text
    assert out.code != EXIT_INTERNAL, out.text
    assert "internal error" not in out.err, out.err
    return out


def assert_clear_error(out: Outcome, *codes: int, names: str | None = None) -> None:
    """One `error: ...` line and its `next: ...` step on stderr, with an allowed exit code."""
    assert out.code in codes, out.text
    lines = out.err.splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    # Exactly one error; `envbuild image` may print build progress above it, nothing else.
    assert len(errors) == 1, out.text
    assert errors[0] == 0 or "image" in out.args, out.text
    assert lines[errors[0] + 1 : errors[0] + 2] != [] and lines[errors[0] + 1].startswith(
        "  next: "
    ), out.text
    assert len(lines[errors[0]]) < 1000, "a value echoed whole is not a clear message"
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
    from envbuild.lock.format import _content_hash

    m = _CONTENT_LINE.search(lock_text)
    assert m is not None
    rest = lock_text[: m.start()] + lock_text[m.end() :]
    return rest[: m.start()] + f'content_hash = "{_content_hash(rest)}"\n' + rest[m.start() :]


# --- a tiny real image for the engine tests ----------------------------------------------------

E2E_BASE = "envbuild-e2e/base:bookworm"  # made by tests/e2e.sh (debootstrap, no registry)
PROBE = "envbuild-probe"
PROBE_VERSION = "1.0"


def probe_wheel(folder: Path) -> tuple[Path, str]:
    """A small pure-Python wheel written by hand (no build backend, no network); its sha256."""
    import base64
    import hashlib
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    mod = PROBE.replace("-", "_")
    info = f"{mod}-{PROBE_VERSION}.dist-info"
    files = {
        f"{mod}/__init__.py": b'"""envbuild reliability probe."""\n',
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: {PROBE_VERSION}\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{mod}-{PROBE_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


# The user template of the probe image: the built-in template, minus the apt step (the local
# base already has python3 and python3-venv, and no network is needed), with pip kept off every
# index so that only the wheelhouse (--find-links) can answer.
PROBE_TEMPLATE = """{% extends envbuild_template %}
{% block system %}
ENV PIP_NO_INDEX=1
EXTRA_SYSTEM
{% endblock %}
{% block payload %}
PAYLOAD
{% endblock %}
"""


def probe_image(
    root: Path,
    *,
    sha256: str,
    system: str = "",
    payload: str = "{{ super() }}",
    example: str = "torch-cpu",
) -> Path:
    """A copy of images/EXAMPLE whose lock pins only the probe wheel (with `sha256`), no
    installer, and whose
    Dockerfile.j2 is PROBE_TEMPLATE. The lock stays fresh: its input hash covers the request and
    the matrix rows, not the pins; dumps() writes a matching content hash."""
    import dataclasses

    from envbuild.core.models import LockedPackage
    from envbuild.lock import format as lockfile

    image = copy_example(root, example)
    lock = lockfile.loads((image / "envbuild.lock").read_text())
    pin = LockedPackage(PROBE, PROBE_VERSION, (f"sha256:{sha256}",), "https://pypi.org/simple")
    # No installer pin either: the wheelhouse holds only the probe wheel, so the build takes
    # the pip path (a lock without [[installer]], as before uv was pinned).
    lock = dataclasses.replace(lock, packages=(pin,), installer=())
    text = lockfile.dumps(lock, command=lockfile.regenerate_command(image))
    (image / "envbuild.lock").write_text(text)
    (image / "Dockerfile.j2").write_text(
        PROBE_TEMPLATE.replace("EXTRA_SYSTEM", system).replace("PAYLOAD", payload)
    )
    return image


def docker_ok() -> bool:
    import subprocess

    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if done.returncode != 0:
        return False
    return (
        subprocess.run(["docker", "image", "inspect", E2E_BASE], capture_output=True).returncode
        == 0
    )


def containers() -> set[str]:
    """Every container on the engine (`docker ps -a -q`), to compare before and after."""
    import subprocess

    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--no-trunc"], capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def ours(ids: set[str], marker: str) -> list[str]:
    """Those of IDS whose labels or command mention MARKER (other users share this engine)."""
    import json
    import subprocess

    if not ids:
        return []
    out = subprocess.run(
        ["docker", "inspect", *sorted(ids)], capture_output=True, text=True, check=False
    )
    found = []
    for c in json.loads(out.stdout or "[]"):
        if marker in json.dumps(c.get("Config", {})):
            found.append(c["Id"])
    return found


def image_exists(ref: str) -> bool:
    import subprocess

    return subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode == 0


def build(image: Path, wheels: Path, tag: str, *extra: str) -> tuple[Outcome, set[str]]:
    """`envbuild image` on IMAGE (the e2e base, the wheelhouse); returns the outcome and the containers it left (all users)."""
    before = containers()
    out = run(
        "image",
        str(image),
        "--base-image",
        E2E_BASE,
        "--find-links",
        str(wheels),
        "--tag",
        tag,
        *extra,
    )
    return out, containers() - before

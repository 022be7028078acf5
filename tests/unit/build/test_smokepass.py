"""An image id that passed its smoke test on this host is not tested again (envbuild.build.passes,
build_and_verify's `passes`): the output says when and where it passed, the tag is the one
that pass gave, and `--resmoke`, another host key or an unreadable record runs the test."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from envbuild.build import passes as smokepass
from envbuild.build.pipeline import REPORT_LABEL, ImageOutcome, build_and_verify
from envbuild.cli.commands.image import _print_outcome
from envbuild.engine.protocol import BuildResult, ProgressFn
from tests.unit.build.test_build import OK_RUN, lines, make_job, passing
from tests.unit.fakes import FakeEngine

CANDIDATE = "sha256:" + "c" * 64


@dataclass
class CachingEngine(FakeEngine):
    """A warm engine: every build of the same context gives the same candidate id, and
    tagging it with the same labels gives the same image id (as Docker's layer cache does)."""

    def build(
        self,
        *,
        context: Mapping[str, bytes],
        labels: Mapping[str, str],
        progress: ProgressFn,
        pull: bool = False,
        platform: str | None = None,
        build_args: Mapping[str, str] | None = None,
    ) -> BuildResult:
        self.calls.append(("build", dict(labels)))
        self.images[CANDIDATE] = dict(labels)
        return BuildResult(image_id=CANDIDATE, builder="fake builder")

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        return self.tags.get(ref, ref), None

    def tag(self, image_id: str, ref: str, *, labels: Mapping[str, str]) -> str:
        self.calls.append(("tag", (image_id, ref, dict(labels))))
        new = "sha256:" + str(abs(hash(json.dumps(dict(labels), sort_keys=True)))).zfill(64)
        self.images[new] = {**self.images[image_id], **labels}
        self.tags[ref] = new
        return new


def _store(tmp_path: Path, key: str = "host-a", *, reuse: bool = True) -> smokepass.FileStore:
    where = f"host {key}, fake engine"
    return smokepass.FileStore(key, where, reuse=reuse, path=tmp_path / "passes.json")


def _image(engine: CachingEngine, store: smokepass.FileStore) -> tuple[list[str], ImageOutcome]:
    seen, progress = lines()
    out = build_and_verify(engine, make_job(), judge=passing, progress=progress, passes=store)
    return seen, out


def test_a_second_build_of_a_passed_image_is_not_tested_again(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _seen, first = _image(engine, _store(tmp_path))
    assert engine.names().count("run") == 1
    seen, second = _image(engine, _store(tmp_path))
    assert engine.names().count("run") == 1  # not run again
    doc, before = second.to_json(), first.to_json()
    assert doc["image_id"] == before["image_id"]  # the same label: the same tagged image
    assert doc["smoke_s"] == 0.0
    assert doc["smoke"]["checks"] == before["smoke"]["checks"]
    reused = doc["smoke_reused"]
    assert reused["where"] == "host host-a, fake engine"
    assert reused["passed_at"].endswith("Z")
    assert before["smoke_reused"] is None
    assert any("not run again (--resmoke runs it)" in line for line in seen)
    assert doc["device"] == "cuda"
    labels = engine.image_labels(doc["tag"])
    assert json.loads(labels[REPORT_LABEL])["ok"] is True


def test_resmoke_runs_it_and_records_the_new_pass(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _image(engine, _store(tmp_path))
    _seen, out = _image(engine, _store(tmp_path, reuse=False))
    assert engine.names().count("run") == 2
    assert out.to_json()["smoke_reused"] is None
    _image(engine, _store(tmp_path))
    assert engine.names().count("run") == 2


def test_another_host_key_runs_it(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _image(engine, _store(tmp_path, "host-a"))
    _image(engine, _store(tmp_path, "host-b"))
    assert engine.names().count("run") == 2


def test_an_unreadable_record_file_runs_it(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _image(engine, _store(tmp_path))
    (tmp_path / "passes.json").write_text("{not json")
    _image(engine, _store(tmp_path))
    assert engine.names().count("run") == 2
    stored = json.loads((tmp_path / "passes.json").read_text())
    assert [k.split("/")[0] for k in stored["passes"]] == ["host-a"]


def test_the_host_key_covers_engine_gpus_and_settings() -> None:
    base = {
        "engine": "docker",
        "address": "unix:///var/run/docker.sock",
        "server": ("Docker", "20.10.24"),
        "local": False,
        "settings": {"allow_cpu": True},
    }
    key, where = smokepass.host_key(**base)  # type: ignore[arg-type]
    assert key == smokepass.host_key(**base)[0]  # type: ignore[arg-type]
    assert "Docker 20.10.24 at unix:///var/run/docker.sock" in where
    for change in (
        {"server": ("Docker", "24.0.7")},
        {"address": "tcp://gpu-host:2376"},
        {"settings": {"allow_cpu": False}},
    ):
        assert smokepass.host_key(**{**base, **change})[0] != key  # type: ignore[arg-type]


def test_the_output_says_when_and_where_it_passed(capsys: pytest.CaptureFixture[str]) -> None:
    doc = {
        "tag": "envbuild/demo:1",
        "image_id": "sha256:1",
        "smoke": {},
        "device": "cpu",
        "build_s": 0.4,
        "smoke_s": 0.0,
        "smoke_reused": {"passed_at": "2026-12-01T16:00:00Z", "where": "host a, Docker"},
        "base_image_replaced": False,
        "base_image": "debian:bookworm-slim",
        "labels": ["envbuild.lock"],
    }
    _print_outcome(doc)
    out = capsys.readouterr().out
    assert (
        "  smoke:  passed on cpu at 2026-12-01T16:00:00Z (host a, Docker); this image id was "
        "not tested again (--resmoke runs it) (build 0 s)\n"
    ) in out


def test_an_unchanged_context_is_neither_built_nor_tested(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    job = make_job(context_key="k1")
    seen, progress = lines()
    first = build_and_verify(engine, job, judge=passing, progress=progress, passes=_store(tmp_path))
    again = build_and_verify(engine, job, judge=passing, progress=progress, passes=_store(tmp_path))
    assert (engine.names().count("build"), engine.names().count("run")) == (1, 1)
    doc = again.to_json()
    assert doc["unchanged"] is True and first.to_json()["unchanged"] is False
    assert doc["image_id"] == first.image_id and doc["candidate_id"] == first.candidate_id
    assert doc["smoke_reused"]["where"] == "host host-a, fake engine"
    assert any(" is up to date: built from the same context" in line for line in seen)
    # Another context key, or the tag gone: built again (the pass of the id is still reused).
    build_and_verify(
        engine,
        make_job(context_key="k2"),
        judge=passing,
        progress=progress,
        passes=_store(tmp_path),
    )
    engine.tags.clear()
    build_and_verify(engine, job, judge=passing, progress=progress, passes=_store(tmp_path))
    assert (engine.names().count("build"), engine.names().count("run")) == (3, 1)
    # --resmoke: built and tested.
    build_and_verify(
        engine, job, judge=passing, progress=progress, passes=_store(tmp_path, reuse=False)
    )
    assert (engine.names().count("build"), engine.names().count("run")) == (4, 2)

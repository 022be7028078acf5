"""Section 10 of `make bench`: time to a new checked tag after one source line of a project
changed. `envbuild image images/torch-project` (torch CPU from the local wheel folder, its own
smoke command `python -m torch_project.train --steps 5`) beside `peer/torch-project.Dockerfile`
(dependencies first, the source COPYed after them) built with `docker build` (classic) and
checked with a `docker run` of the same training command. Both are built once on a fresh base
(untimed: the starting point), then each sample appends a different comment line to
src/torch_project/train.py in both copies and times each side to its new image, interleaved.

`python -m benchmarks.code_change` runs it alone and writes results/code-change.json and
results/code-change.md; `python -m benchmarks.run --report-only` takes the JSON into RESULTS.md.
Settings: BENCH_CHANGE_REPEAT (default 3), BENCH_BASE, BENCH_WHEELS, BENCH_CA_CERT,
BENCH_CONTEXT, BENCH_KEEP_IMAGES=1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.build import _Builds, _fresh_base, _phase_note
from benchmarks.common import (
    ENVBUILD,
    RESULTS_DIR,
    ROOT,
    Row,
    Section,
    _checked,
    _log,
    _run,
    _timed,
    row,
)
from benchmarks.cuda_image import markdown, read_alone, requirements_from_lock
from benchmarks.layers import _history_ids, _image_size

TITLE = "10. Code change (images/torch-project: one source line, to a new checked tag)"
PEER_DOCKERFILE = ROOT / "benchmarks" / "peer" / "torch-project.Dockerfile"
PEER_NAME = "hand-written Dockerfile (source COPYed after the pip layer) + `docker run` of the training command"
CHECK = ["python", "-m", "torch_project.train", "--steps", "5"]
SOURCE = Path("src") / "torch_project" / "train.py"


class _ProjectBuilds(_Builds):
    def peer_argv(self, base: str) -> list[str]:
        return ["docker", "build", "-t", self.tags[2], "--build-arg", f"BASE={base}", str(self.ctx)]

    def peer_run(self, base: str) -> subprocess.CompletedProcess[str]:
        built = _checked(self.peer_argv(base), env=self.peer_env)
        _checked(["docker", "run", "--rm", self.tags[2], *CHECK])
        return built

    def edit(self, k: int) -> None:
        """The same one-line change in both copies of the source."""
        for src in (self.image_dir / SOURCE, self.ctx / "project" / SOURCE):
            with src.open("a") as f:
                f.write(f"# benchmark edit {k}\n")


def _prepare(tmp: Path, tags: tuple[str, str, str], wheels: Path, ca_cert: Path) -> _ProjectBuilds:
    from envbuild.lock import format as lockfile

    image_dir = tmp / "torch-project"
    shutil.copytree(ROOT / "images" / "torch-project", image_dir)
    lock_text = (image_dir / "envbuild.lock").read_text()
    lock = lockfile.loads(lock_text)
    cmd = [ENVBUILD, "image", str(image_dir), "--base-image", tags[0], "--tag", tags[1]]
    cmd += ["--find-links", str(wheels), "--ca-cert", str(ca_cert), "--json"]
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(tmp / "envbuild-cache")}
    ctx = tmp / "peer"
    ctx.mkdir()
    shutil.copy(PEER_DOCKERFILE, ctx / "Dockerfile")
    shutil.copy(ca_cert, ctx / "ca.crt")
    shutil.copytree(wheels, ctx / "wheels")
    (ctx / "requirements.txt").write_text(requirements_from_lock(lock_text))
    (ctx / "project").mkdir()
    shutil.copy(image_dir / "pyproject.toml", ctx / "project" / "pyproject.toml")
    shutil.copytree(image_dir / "src", ctx / "project" / "src")
    return _ProjectBuilds(image_dir, ctx, tags, lock.stack.framework.version, cmd, env)


def bench_code_change(repeat: int, base_image: str, wheels: Path, ca_cert: Path) -> Section:
    if _run(["docker", "info"]).returncode != 0:
        return {"title": TITLE, "skipped": "no Docker engine answers on this machine"}
    if _image_size(base_image) is None:
        return {"title": TITLE, "skipped": f"{base_image} is missing (bash tests/e2e.sh prepare)"}
    nonce = f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{os.getpid()}"
    tags = (
        f"envbuild-bench/project-base:{nonce}",
        f"envbuild-bench/torch-project:{nonce}",
        f"envbuild-bench/torch-project-peer:{nonce}",
    )
    rows: list[Row] = []
    notes: list[str] = []
    out: Section = {"title": TITLE, "rows": rows, "notes": notes}
    left: list[str] = []  # the images each edit's tag moved off
    try:
        with tempfile.TemporaryDirectory(prefix="envbuild-bench-change-") as tmp:
            builds = _prepare(Path(tmp), tags, wheels, ca_cert)
            _fresh_base(base_image, tags[0], nonce)
            _log("code change: first build of both (untimed)")
            builds.envbuild_image("cold")
            builds.peer_run(tags[0])
            samples: dict[str, list[float]] = {"e": [], "p": []}
            steps: list[str] = []
            for k in range(repeat):
                builds.edit(k)
                order = ("e", "p") if k % 2 == 0 else ("p", "e")
                for who in order:
                    _log(f"code change: {who} ({k + 1} of {repeat})")
                    tag = tags[1] if who == "e" else tags[2]
                    before = _history_ids(tag)
                    if who == "e":
                        samples[who].append(_timed(lambda: builds.envbuild_image("late")))
                    else:
                        samples[who].append(_timed(lambda: builds.peer_run(tags[0])))
                    after = _history_ids(tag)
                    if before and after and before[-1][0] != after[-1][0]:
                        left.append(before[-1][0])
                    new = sum(1 for a, b in zip(before, after, strict=False) if a[0] != b[0])
                    new += abs(len(after) - len(before))
                    steps.append(f"{who}: {new} of {len(after)} steps rebuilt")
            rows.append(
                row(
                    "code change: one source line, to a new checked image",
                    samples["e"],
                    samples["p"],
                    peer_name=PEER_NAME,
                    note=_phase_note(builds.phases["late"]),
                    goal=0.5,
                )
            )
            late = builds.phases["late"]
            alone = sum(
                1 for p in late if (p.get("smoke_reused") or {}).get("scope") == "environment"
            )
            notes.append(
                f"{repeat} edits, each a new comment line appended to {SOURCE} in both copies, "
                "who goes first alternating, on a base of this run already built once by both "
                "(untimed). envbuild's time: lock check, render, build (cached up to the "
                "project's copy), the project's smoke command alone where the environment's "
                "pass of the first build is found (`smoke_reused.scope` = environment, "
                f'docs/smoke.md "Code changes": {alone} of {len(late)} samples), else the '
                "whole smoke test and the command, tag. The peer's: `docker build` (cached up "
                f"to its COPY of the source) and `docker run {' '.join(CHECK)}`. Steps rebuilt "
                f"per sample: {'; '.join(steps)}."
            )
    except Exception as err:
        out["error"] = str(err)[-3000:]
    finally:
        if os.environ.get("BENCH_KEEP_IMAGES") != "1":
            for ref in (tags[1], tags[2], *left, tags[0]):
                _run(["docker", "image", "rm", ref])
    return out


def code_change_results(results_dir: Path = RESULTS_DIR) -> Section:
    return read_alone(results_dir / "code-change.json")


def main() -> None:
    from benchmarks.run import _load, machine

    facts = machine()
    section = bench_code_change(
        int(os.environ.get("BENCH_CHANGE_REPEAT", "3")),
        os.environ.get("BENCH_BASE", "envbuild-e2e/base:bookworm"),
        Path(os.environ.get("BENCH_WHEELS", "/opt/wheels")),
        Path(os.environ.get("BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt")),
    )
    facts["load average at end"] = _load()
    section["machine"] = facts
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "code-change.json").write_text(
        json.dumps(section, indent=2, sort_keys=True) + "\n"
    )
    text = markdown(section, facts, "python -m benchmarks.code_change")
    (RESULTS_DIR / "code-change.md").write_text(text)
    print(text)
    sys.exit(1 if "error" in section else 0)


if __name__ == "__main__":
    main()

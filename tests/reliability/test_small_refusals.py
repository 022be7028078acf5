"""Small refusals (docs/reliability.md, "Round 3"): `--image` of `--k8s-job` is an image
reference; invisible and bidi control characters never reach a command or a RUN line; a
9 MB requirement gives a short message; `--context` inside the project does not copy itself
into /app."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from envbuild.request import sourcetree
from tests.reliability.helpers import REPO, assert_clear_error, copy_example, run
from tests.reliability.hostile import fake_uv

HOSTS = REPO / "tests" / "fixtures" / "hosts" / "fleet-doctor.jsonl"
LOCK_DIR = REPO / "images" / "torch-train"


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/ml/torch:1\n  securityContext: {privileged: true}",
        "registry.example.com/ml/torch:1 --privileged",
        "\u202eregistry.example.com/ml/torch:1",
        "x" * 300,
        "",
    ],
)
def test_k8s_job_image_is_an_image_reference(tmp_path: Path, image: str) -> None:
    out_file = tmp_path / "jobs.yaml"
    args = ("validate", "--hosts", str(HOSTS), "--lock", str(LOCK_DIR), "--image", image)
    out = run(*args, "--k8s-job", str(out_file))
    assert_clear_error(out, 2, names="--image")
    assert not out_file.exists()
    assert len(out.err) < 1000
    out = run(*args, "--k8s-job", str(out_file), "--json")
    assert out.code == 2 and json.loads(out.out)["ok"] is False


INVISIBLE = ["\u202e", "\u2066", "\u200b", "\u200f", "\u2060", "\ufeff", "\u00ad", "\u061c"]


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
@pytest.mark.parametrize(
    "table",
    [
        "[smoke]\ncommand = \"python -c 'print(1)' {c}# rm -rf /\"\n",
        '[smoke]\ncommand = ["python", "-m", "tr{c}ain"]\n',
        '[packages]\nrequirements = ["numpy{c}<3"]\n',
    ],
)
def test_invisible_and_bidi_characters_are_refused_in_commands(
    tmp_path: Path, char: str, table: str
) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    request = image / "envbuild.toml"
    text = request.read_text().replace("[smoke]\ntier = 1\n", "")
    request.write_text(text + "\n" + table.replace("{c}", char))
    before = (image / "envbuild.lock").read_bytes()
    out = run("lock", "--offline", str(image), env={"ENVBUILD_NO_INDEX_PROBE": "1"})
    assert_clear_error(out, 2, names=repr(char)[1:-1])
    assert (image / "envbuild.lock").read_bytes() == before


@pytest.mark.parametrize("where", ["request", "file"])
def test_a_9_mb_requirement_gives_a_short_message(tmp_path: Path, where: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    request = image / "envbuild.toml"
    huge = "numpy>=" + "1" * (9 << 20)
    if where == "request":
        request.write_text(request.read_text() + f'\n[packages]\nrequirements = ["{huge}"]\n')
    else:
        (image / "reqs.txt").write_text(huge + "\n")
        request.write_text(request.read_text() + '\n[packages]\nfiles = ["reqs.txt"]\n')
    env = {"ENVBUILD_NO_INDEX_PROBE": "1"}
    out = run("lock", "--offline", str(image), env=env)
    assert_clear_error(out, 2)
    assert len(out.text) < 2000, len(out.text)
    out = run("lock", "--offline", "--json", str(image), env=env)
    assert out.code == 2 and len(out.out) < 4000, len(out.out)


def _project_image(tmp_path: Path) -> Path:
    """torch-train with `[project] path = "."` (the image folder is the project), locked with
    the stand-in for uv."""
    image = copy_example(tmp_path, "torch-train")
    (image / "train.py").write_text("print('train')\n")
    request = image / "envbuild.toml"
    request.write_text(request.read_text() + '\n[project]\npath = "."\ninstall = false\n')
    env = {**fake_uv(tmp_path / "uv"), "ENVBUILD_NO_INDEX_PROBE": "1"}
    out = run("lock", "--offline", str(image), env=env)
    assert out.code == 0, out.text
    return image


def test_a_context_folder_inside_the_project_does_not_nest(tmp_path: Path) -> None:
    image = _project_image(tmp_path)
    context = image / "build" / "ctx"
    for _ in range(3):
        out = run("render", str(image), "--context", str(context))
        assert out.code == 0, out.text
    project_files = sorted(
        p.relative_to(context / "project").as_posix()
        for p in (context / "project").rglob("*")
        if p.is_file()
    )
    assert project_files == ["train.py"], project_files
    # Elsewhere in the project than its default-ignored build/: the same.
    other = image / "contexts" / "one"
    for _ in range(2):
        assert run("render", str(image), "--context", str(other)).code == 0
    assert not (other / "project" / "contexts").exists()
    assert not (other / "project" / "build").exists()
    left = sourcetree.survey(image, ())
    assert "contexts/one/" in {e.path for e in left.left_out}


def test_a_context_tar_inside_the_project_does_not_nest(tmp_path: Path) -> None:
    image = _project_image(tmp_path)
    tar_path = image / "ctx.tar"
    for _ in range(2):
        out = run("render", str(image), "--context", str(tar_path))
        assert out.code == 0, out.text
    with tarfile.open(fileobj=io.BytesIO(tar_path.read_bytes())) as tar:
        names = tar.getnames()
    assert "project/train.py" in names
    assert "project/ctx.tar" not in names, names

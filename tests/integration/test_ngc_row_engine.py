"""A framework base with a matrix/ngc.toml row, against the real engine. The CPU torch base
of test_framework_base_engine.py, tagged under an overlay row's name, stands in for an NGC
image: the engine has it, so `lock` probes it and the probe must agree with the row (it
does not: the row says CUDA 13.1.0). A row whose image the engine lacks is recorded without
pulling anything.

Slow on a fresh engine (the base is built once, ~3 minutes): marked e2e.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.app.lock import lock_image
from envbuild.engine.docker import DockerEngine
from envbuild.matrix import clear_cache
from envbuild.resolver.base import ProbeError
from tests.integration.test_framework_base_engine import torch_base  # noqa: F401 (fixture)

pytestmark = [pytest.mark.engine, pytest.mark.e2e]

STANDIN = "envbuild-it/ngc-standin:25.12-py3"
ABSENT = "envbuild-it/ngc-absent:25.12-py3"
ROWS = """schema_version = 1
{rows}"""
ROW = """
[[image]]
image = "{image}"
release = "25.12"
framework = "torch"
framework_version = "2.13.0"
cuda = "13.1.0"
python = "3.11"
source = "https://example.org/standin-notes"
"""


@pytest.fixture
def overlay(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "overlay"
    folder.mkdir()
    rows = "".join(ROW.format(image=image) for image in (STANDIN, ABSENT))
    (folder / "ngc.toml").write_text(ROWS.format(rows=rows))
    clear_cache()
    yield folder
    clear_cache()


def _image_dir(root: Path, base: str) -> Path:
    folder = root / "ngc-base"
    folder.mkdir()
    (folder / "envbuild.toml").write_text(
        f'[image]\nbase = "{base}"\n\n[framework]\nrequirement = "torch"\n'
    )
    return folder


def test_the_probe_runs_and_a_disagreement_names_row_and_image(
    engine: DockerEngine,
    torch_base: str,  # noqa: F811 (the fixture imported above)
    overlay: Path,
    tmp_path: Path,
) -> None:
    image_id, _ = engine.image_ids(torch_base)
    engine.tag(image_id, STANDIN, labels={})
    try:
        folder = _image_dir(tmp_path, STANDIN)
        with pytest.raises(ProbeError) as info:
            lock_image(folder, engine=engine, matrix_overlay=overlay, offline=True)
        assert info.value.exit_code == 2
        # torch 2.13.0+cpu is the row's 2.13.0 (no local label in the row); CUDA is not.
        assert info.value.message == (
            f"the base {STANDIN} does not hold what {overlay}/ngc.toml: image[1] ({STANDIN}) "
            "says: CUDA: 13.1.0 in the row, none in the image"
        )
        assert "https://example.org/standin-notes" in info.value.hint
        assert not (folder / "envbuild.lock").exists()
        assert engine.containers("envbuild.role=base-probe") == []
    finally:
        engine.remove_image(STANDIN)


def test_an_image_the_engine_lacks_is_not_pulled_the_row_stands_in(
    engine: DockerEngine, overlay: Path, tmp_path: Path
) -> None:
    assert not engine.image_exists(ABSENT)
    folder = _image_dir(tmp_path, ABSENT)
    outcome = lock_image(folder, engine=engine, matrix_overlay=overlay, offline=True)
    facts = outcome.lock.base_facts
    assert facts is not None and facts.source == f"ngc:{ABSENT}"
    assert (outcome.lock.stack.framework.version, outcome.lock.stack.cuda) == ("2.13.0", "13.1")
    assert "not probed: the engine does not have it" in outcome.warnings[0]
    assert "https://example.org/standin-notes" in outcome.warnings[0]
    assert not engine.image_exists(ABSENT)

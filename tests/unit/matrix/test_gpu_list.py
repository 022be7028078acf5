"""NVIDIA's compute-capability list: the snapshot, its generated rows, and every name on it
resolving (envbuild/matrix/refresh/gpu_list.py, matrix/gpu_list.toml)."""

from __future__ import annotations

import pytest

from envbuild.core.errors import MatrixError, UserError
from envbuild.core.resources import matrix_dir
from envbuild.core.values import gpu_name_words
from envbuild.matrix import check_matrix, load_matrix
from envbuild.matrix.refresh import gpu_list
from envbuild.resolver import parse_gpu

SNAPSHOT = (matrix_dir() / gpu_list.SNAPSHOT).read_text(encoding="utf-8")
NAMES = gpu_list.parse_snapshot(SNAPSHOT)


def test_the_shipped_list_is_what_the_generator_makes_of_the_snapshot() -> None:
    shipped = (matrix_dir() / gpu_list.OUTPUT).read_text(encoding="utf-8")
    assert shipped == gpu_list.render(NAMES), "run `python -m envbuild.matrix.refresh.gpu_list`"


def test_every_row_carries_its_page_and_the_matrix_agrees_with_it() -> None:
    matrix = load_matrix()
    assert len(matrix.listed_gpus) == len(NAMES)
    assert all("https://developer.nvidia.com/" in row.source for row in matrix.listed_gpus)
    assert {row.confidence for row in matrix.listed_gpus} == {"high", "medium"}
    assert check_matrix(matrix) == []


@pytest.mark.parametrize("spelling", ["{name}", "NVIDIA {name}", "{name} Laptop GPU"])
def test_every_listed_gpu_resolves_to_its_compute_capability(spelling: str) -> None:
    """The whole list, as the page, NVML ("NVIDIA ...") and laptops ("... Laptop GPU") spell it:
    a listed GPU is its row's cc, or, where the matrix has no such architecture, a refusal
    that names that cc; never another GPU's."""
    matrix = load_matrix()
    buildable = {a.cc for a in matrix.archs}
    for row in matrix.listed_gpus:
        text = spelling.format(name=row.name)
        if row.cc in buildable:
            assert parse_gpu(matrix, text).cc == row.cc, text
        else:
            with pytest.raises(UserError, match=rf"compute capability {row.cc}\b"):
                parse_gpu(matrix, text)


@pytest.mark.parametrize(
    ("nvml", "cc"),
    [
        ("Quadro RTX 8000", "7.5"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("NVIDIA RTX 4000 Ada Generation", "8.9"),
        ("Tesla V100-SXM2-16GB", "7.0"),
        ("NVIDIA GeForce RTX 3080 Ti Laptop GPU", "8.6"),
        ("NVIDIA GeForce GTX 1650 Ti with Max-Q Design", "7.5"),
        ("NVIDIA TITAN Xp", "6.1"),
        ("Quadro T2000", "7.5"),
        ("Quadro T1000 with Max-Q Design", "7.5"),
        ("Quadro P520", "6.1"),
    ],
)
def test_nvml_spellings_with_more_words_take_the_longest_listed_name(nvml: str, cc: str) -> None:
    assert parse_gpu(load_matrix(), nvml).cc == cc


def test_brand_words_and_punctuation_do_not_change_a_name() -> None:
    assert gpu_name_words("NVIDIA GeForce RTX 3090") == ("rtx", "3090")
    assert gpu_name_words("NVIDIA A100-SXM4-80GB") == ("a100", "sxm4", "80gb")
    assert gpu_name_words("NVIDIA GB10 (DGX Spark)") == ("gb10", "dgx", "spark")
    assert gpu_name_words("Quadro RTX 6000") == ("quadro", "rtx", "6000")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("== u\nsource: s\nconfidence: high\n7.5 | laptop | X\n", "segment 'laptop'"),
        ("7.5 | mobile | X\n", "before its section's source"),
        (
            "== u\nsource: s\nconfidence: high\n7.5 | mobile | X\n7.5 | mobile | NVIDIA X\n",
            "line 4",
        ),
        ("== u\nsource: s\nconfidence: high\n7.5 mobile X\n", "not '<cc> | <segment> | <name>'"),
    ],
)
def test_a_bad_snapshot_line_is_refused_with_its_line(text: str, problem: str) -> None:
    with pytest.raises(MatrixError, match="nvidia_cuda_gpus") as info:
        gpu_list.parse_snapshot(text)
    assert problem in str(info.value)


def test_a_name_on_two_architectures_is_a_matrix_problem() -> None:
    matrix = load_matrix()
    quadro = next(r for r in matrix.listed_gpus if r.name == "Quadro RTX 8000")
    wrong = type(quadro)(**{**quadro.__dict__, "name": "H100", "cc": "7.5"})
    bad = type(matrix)(**{**matrix.__dict__, "listed_gpus": (*matrix.listed_gpus, wrong)})
    assert any("'H100' is compute capability 9.0 in gpus.toml" in p for p in check_matrix(bad))

"""A request that names the same GPU many times (a fleet's inventory pasted in) resolves as
the request that names it once: each name is read once (envbuild/resolver/prepare.py)."""

from __future__ import annotations

import pytest

from envbuild.core.errors import UserError
from envbuild.core.models import Request, Targets
from envbuild.matrix import load_matrix
from envbuild.resolver import resolve


def _resolve(*gpus: str) -> object:
    req = Request(framework="torch", targets=Targets(gpus=gpus, driver="570.124.06"))
    return resolve(req, load_matrix())


def test_repeated_names_give_the_answer_of_each_name_once() -> None:
    once = _resolve("H100", "L4")
    assert _resolve("H100", "L4 ", "H100", " H100", *["L4"] * 50) == once
    assert _resolve("H100", "L4") != _resolve("H100")  # the names do decide the answer


def test_the_first_unknown_name_is_the_one_named() -> None:
    with pytest.raises(UserError, match="'H1OO'"):
        _resolve("H100", "H1OO", "L4", "H1OO", "Z9")

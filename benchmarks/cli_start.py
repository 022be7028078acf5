"""Section 1 of `make bench`: how long `envbuild --help` and `envbuild resolve --json ...` take
from exec to exit, beside a process of the same interpreter that only imports click."""

from __future__ import annotations

import sys
from collections.abc import Callable

from benchmarks.common import ENVBUILD, ROOT, Section, _checked, interleaved, row

RESOLVE_ARGS = ("--gpu", "H100", "--gpu", "L4", "--driver", "570.124.06")


def _prepare_cli() -> None:
    """The state an installed envbuild runs in: its modules byte-compiled (pip does that at
    install; an editable checkout under PYTHONDONTWRITEBYTECODE=1 would recompile every module
    in every process, which click, installed by pip, never does) and its user cache filled
    (the compiled matrix: the warm-up round fills it)."""
    import compileall

    compileall.compile_dir(str(ROOT / "envbuild"), quiet=1)


def bench_cli_start(repeat: int) -> Section:
    def cmd(argv: list[str]) -> Callable[[], object]:
        return lambda: _checked(argv)

    _prepare_cli()
    s = interleaved(
        {
            "python": cmd([sys.executable, "-c", "pass"]),
            "click": cmd([sys.executable, "-c", "import click"]),
            "help": cmd([ENVBUILD, "--help"]),
            "resolve": cmd([ENVBUILD, "resolve", "--json", *RESOLVE_ARGS]),
        },
        repeat,
    )
    peer = "a process that only imports click (`python -c 'import click'`)"
    return {
        "title": "1. CLI start (vs a process that only imports click, same interpreter)",
        "rows": [
            row("`envbuild --help`", s["help"], s["click"], peer_name=peer, goal=1.2),
            row(
                f"`envbuild resolve --json {' '.join(RESOLVE_ARGS)}`",
                s["resolve"],
                s["click"],
                peer_name=peer,
                goal=2.5,
            ),
            row("`python -c pass` (interpreter start, for scale)", s["python"]),
        ],
        "notes": [
            "Wall time of the whole process, from exec to exit; the click floor is the same "
            "interpreter and venv importing click and nothing else.",
            "envbuild's modules are byte-compiled first (as a pip install leaves them) and the "
            "user cache is warm (one untimed round): the compiled matrix "
            "(`envbuild/matrix/load.py`, rebuilt when a matrix file or overlay changes). "
            "Nothing else is tuned for start-up (docs/caches.md).",
        ],
    }

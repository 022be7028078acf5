"""NVIDIA's compute-capability list -> `matrix/gpu_list.toml` (pure, plus a `main` that reads
and writes the two files).

The input is a transcription of https://developer.nvidia.com/cuda-gpus and
https://developer.nvidia.com/cuda-legacy-gpus kept under `matrix/evidence/` (the pages are
HTML built by script and change layout; a reviewed text snapshot is what can be diffed). Its
format is described at the top of the snapshot itself: sections `== <url>` with `source:`,
`confidence:` and `read:` lines, then `<cc> | <segment> | <name>` lines. The output has one
`[[gpu]]` row per name, each with its section's source, so the resolver knows every listed
GPU by name. Regenerate after editing the snapshot:

    python -m envbuild.matrix.refresh.gpu_list

(`tests/unit/matrix/test_gpu_list.py` fails while the two files disagree.)
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from envbuild.core.errors import MatrixError
from envbuild.core.resources import matrix_dir
from envbuild.core.values import gpu_name_words
from envbuild.matrix.rows import CONFIDENCES, GPU_SEGMENTS

SNAPSHOT = "evidence/nvidia_cuda_gpus_2026-12-02.txt"
"""The snapshot, relative to the matrix folder."""
OUTPUT = "gpu_list.toml"

_FIELD_RE = re.compile(r"^(source|confidence|read):\s*(.*?)\s*$")
_LINE_RE = re.compile(r"^(\d{1,2}\.\d)\s*\|\s*([a-z]+)\s*\|\s*(\S.*?)\s*$")


@dataclass(frozen=True)
class ListedName:
    cc: str
    segment: str
    name: str
    source: str
    confidence: str


def parse_snapshot(text: str) -> list[ListedName]:
    """The snapshot's GPU lines, in file order. A malformed line, an unknown segment or a name
    listed twice is a MatrixError naming the line."""
    out: list[ListedName] = []
    seen: dict[tuple[str, ...], int] = {}
    source = confidence = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("== "):
            source = confidence = ""
            continue
        field = _FIELD_RE.match(line)
        if field is not None:
            if field.group(1) == "source":
                source = field.group(2)
            elif field.group(1) == "confidence":
                confidence = field.group(2)
            continue
        m = _LINE_RE.match(line)
        if m is None:
            raise _problem(number, f"not '<cc> | <segment> | <name>': {line!r}")
        cc, segment, name = m.group(1), m.group(2), m.group(3).rstrip("*").strip()
        if segment not in GPU_SEGMENTS:
            raise _problem(number, f"segment {segment!r} is not one of {', '.join(GPU_SEGMENTS)}")
        if not source or confidence not in CONFIDENCES:
            raise _problem(number, "a GPU line before its section's source and confidence")
        words = gpu_name_words(name)
        if words in seen:
            raise _problem(number, f"{name!r} is already on line {seen[words]}")
        seen[words] = number
        out.append(ListedName(cc, segment, name, source, confidence))
    return out


def _problem(number: int, what: str) -> MatrixError:
    return MatrixError(
        f"{SNAPSHOT}:{number}: {what}",
        hint="fix the snapshot (its format is described at its top) and run "
        "`python -m envbuild.matrix.refresh.gpu_list` again",
    )


def render(names: list[ListedName]) -> str:
    """matrix/gpu_list.toml's text: a header, then one [[gpu]] row per name, in snapshot order.
    Strings are JSON-quoted, which TOML reads as basic strings (ASCII names and sources)."""
    lines = [
        "# Every GPU on NVIDIA's compute-capability list, by name. GENERATED: do not edit; edit",
        f"# matrix/{SNAPSHOT} and run `python -m envbuild.matrix.refresh.gpu_list`.",
        "# Schema: matrix/README.md (gpu_list.toml). The resolver matches these names like the",
        "# [[arch]] names of gpus.toml (envbuild.core.values.gpu_name_words).",
        "",
        "schema_version = 1",
    ]
    for n in names:
        lines += [
            "",
            "[[gpu]]",
            f"name = {json.dumps(n.name)}",
            f'cc = "{n.cc}"',
            f'segment = "{n.segment}"',
            f'confidence = "{n.confidence}"',
            f"source = {json.dumps(n.source)}",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Regenerate matrix/gpu_list.toml of a matrix folder (default: this checkout's)."""
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else matrix_dir()
    text = (folder / SNAPSHOT).read_text(encoding="utf-8")
    (folder / OUTPUT).write_text(render(parse_snapshot(text)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The resolver's result as JSON and as text (pure; the CLI prints)."""

from __future__ import annotations

import re
from typing import Any

from envbuild.core.models import (
    Stack,
    Unsatisfiable,
)


def result_to_json(result: Stack | Unsatisfiable) -> dict[str, Any]:
    """The `envbuild resolve --json` object."""
    if isinstance(result, Unsatisfiable):
        return {
            "ok": False,
            "reasons": list(result.reasons),
            "alternatives": list(result.alternatives),
        }
    s = result
    floors = (
        {
            "toolkit": s.floors.toolkit,
            "minor_compat": s.floors.minor_compat,
            "relied_on": s.floors.relied_on,
            "effective": s.floors.effective,
        }
        if s.floors
        else None
    )
    return {
        "ok": True,
        "stack": {
            "framework": {
                "name": s.framework.name,
                "version": s.framework.version,
                "variant": s.framework.variant,
                "index_url": s.framework.index_url,
                "requirement": s.framework.requirement,
                "pypi_default": s.framework.pypi_default,
            },
            "cuda": s.cuda,
            "cudnn": s.cudnn,
            "nccl": s.nccl,
            "python": s.python,
            "os": s.os,
            "flavour": s.flavour,
            "base_image": s.base_image.ref,
            "builder_image": s.base_image.builder,
            "require_cuda": s.base_image.require_cuda,
            "archs": list(s.archs),
            "target_archs": list(s.target_archs),
            "driver_floor": floors,
            "rows": list(s.rows),
            "cudnn_requirement": s.cudnn_requirement,
            **({"managed_python": _managed_json(s)} if s.managed_python else {}),
        },
        "confidence": {"level": s.confidence, "because": list(s.confidence_notes)},
        "notes": list(s.notes),
    }


def _managed_json(s: Stack) -> dict[str, str]:
    m = s.managed_python
    assert m is not None
    return {
        "version": m.version,
        "uv_key": m.uv_key,
        "release": m.release,
        "url": m.url,
        "sha256": m.sha256,
        "bootstrap_python": m.bootstrap_python,
    }


def _python_line(s: Stack) -> str:
    """ "3.12 on ubuntu24.04", or where a managed Python comes from."""
    m = s.managed_python
    if m is None:
        return f"{s.python} on {s.os}"
    return (
        f"{s.python} on {s.os}: managed, python-build-standalone {m.release} "
        f"(CPython {m.version}) via the lock's uv"
    )


def _require_summary(require: str) -> str:
    """ "cuda>=12.0 (+ 36 brand= forward-compat clauses: branches 470, 535, 550)"; --json has
    the whole value."""
    first, *brands = require.split()
    branches = sorted({int(m) for b in brands for m in re.findall(r"driver>=(\d+)", b)})
    if not brands:
        return first
    return (
        f"{first} (+ {len(brands)} brand= forward-compat clauses: branches "
        + ", ".join(map(str, branches))
        + ")"
    )


def result_to_text(result: Stack | Unsatisfiable) -> list[str]:
    """A short human summary, same content as the JSON."""
    if isinstance(result, Unsatisfiable):
        out = ["nothing fits:"]
        out += [f"  - {r}" for r in result.reasons]
        if result.alternatives:
            out.append("ways out:")
            out += [f"  - {a}" for a in result.alternatives]
        return out
    s = result
    fw = s.framework
    libs = ", ".join(
        x for x in (f"cuDNN {s.cudnn}" if s.cudnn else "", f"NCCL {s.nccl}" if s.nccl else "") if x
    )
    head = f"{fw.name} {fw.version} {fw.variant}"
    if s.cuda:
        head += f" (CUDA {s.cuda}{', ' + libs if libs else ''})"
    out = [
        head,
        f"  install:      {fw.requirement}"
        + (f" --index-url {fw.index_url}" if fw.index_url else ""),
        f"  python:       {_python_line(s)}",
        f"  base image:   {s.base_image.ref} (flavour {s.flavour})",
    ]
    if s.base_image.builder:
        out.append(f"  builder:      {s.base_image.builder}")
    if s.floors:
        f = s.floors
        mvc = f", >= {f.minor_compat} with minor-version compat" if f.minor_compat else ""
        out.append(f"  driver floor: >= {f.toolkit} toolkit{mvc}; relies on {f.relied_on}")
        out.append(f"  NVIDIA_REQUIRE_CUDA: {_require_summary(s.base_image.require_cuda)}")
        out.append(f"  targets:      {' '.join(s.target_archs) or '(none given)'}")
        out.append(f"  build archs:  {' '.join(s.archs)}")
    if s.cudnn_requirement:
        out.append(f"  cuDNN pin:    {s.cudnn_requirement}")
    if s.confidence != "high":
        out.append(f"  confidence:   {s.confidence} (the matrix rows this pick rests on)")
    if s.notes:
        out.append("notes:")
        out += [f"  - {n}" for n in s.notes]
    if s.confidence_notes:
        out.append(f"confidence {s.confidence}, because:")
        out += [f"  - {n}" for n in s.confidence_notes]
    return out

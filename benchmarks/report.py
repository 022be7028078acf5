"""benchmarks/RESULTS.md from the result dict `python -m benchmarks.run` builds: the machine,
the speed goals, then each section's table, layers and notes (pure: tests feed it canned
data)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.common import Row, Section
from benchmarks.layers import _short


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if unit == "s" and v < 0.1:
            return f"{v * 1000:.3g} ms"
        text = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
        return f"{text} {unit}".strip() if unit else text
    return str(v)


def _ratio(v: Any) -> str:
    return f"{v:.2f}x" if isinstance(v, float) else ""


def _table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| measurement | envbuild | peer | peer is | envbuild / peer | n | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        unit = r.get("unit", "")
        lines.append(
            f"| {r['what']} | {_fmt(r.get('envbuild'), unit)} | {_fmt(r.get('peer'), unit)} "
            f"| {r.get('peer_name', '')} | {_ratio(r.get('ratio'))} | {r.get('n', '')} "
            f"| {_short(str(r.get('note', '')))} |"
        )
    return lines


def _smoke_lines(section: Section) -> list[str]:
    if "pending" in section:
        return [f"**{section['pending']}**", ""]
    lines = [
        "| file | framework | host GPUs | tier | verdict | checks | import | tier 1 | tier 2 "
        "| total (time to verdict) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    figs = [
        "| file | GPU | matmul | TFLOP/s | of datasheet | of baseline | copy TB/s | of datasheet "
        "| of baseline |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in section["runs"]:
        if "error" in r:
            lines.append(f"| {r['file']} | unreadable: {r['error']} |||||||||")
            continue
        verdict = "PASS" if r["ok"] else "FAIL"
        lines.append(
            f"| {r['file']} | {r['framework']} | {r['gpus']} | {r['tier']} | {verdict} on "
            f"{r['device']} | {r['checks']} | {_fmt(r['import_s'], 's')} "
            f"| {_fmt(r['tier1_s'], 's')} | {_fmt(r['tier2_s'], 's')} | {_fmt(r['total_s'], 's')} |"
        )
        for i, f in enumerate(r["figures"]):

            def pct(key: str, f: dict[str, Any] = f) -> str:
                v = f.get(key)
                return f"{v:.0%}" if isinstance(v, float) else ""

            figs.append(
                f"| {r['file']} | {f.get('index', i)} | {f.get('dtype', '')} "
                f"| {_fmt(f.get('bf16_tflops'))} | "
                f"{pct('bf16_tflops_of_datasheet')} | {pct('bf16_tflops_of_baseline')} | "
                f"{_fmt(f.get('mem_bw_tbs'))} | {pct('mem_bw_tbs_of_datasheet')} | "
                f"{pct('mem_bw_tbs_of_baseline')} |"
            )
    base = next((r["baseline"] for r in section["runs"] if r.get("baseline")), None)
    out = ["### Time to verdict", "", *lines, "", "### Throughput", "", *figs, ""]
    if base:
        out += [
            f"Reference ({base['gpu']}, matrix/baselines.toml, confidence {base['confidence']}): "
            f"datasheet {base['datasheet_bf16_tflops']} TFLOP/s dense bf16 (fp16 the same), "
            f"{base['datasheet_mem_bw_tbs']} TB/s; healthy baseline {base['bf16_tflops']} "
            f"TFLOP/s, {base['mem_bw_tbs']} TB/s.",
            "",
        ]
    return out


def _layer_lines(size: dict[str, Any], label: str) -> list[str]:
    lay = size.get("layers", {})
    lines = [f"**{label}** layers (bytes of regular files per layer):", ""]
    lines += ["| # | MB | step | largest file |", "|---|---|---|---|"]
    for layer in lay.get("layers", []):
        step = _short(str(layer["step"])).replace("|", "\\|")
        big = str(layer.get("largest", "")).replace("|", "\\|")
        lines.append(f"| {layer['index']} | {layer['bytes'] / 1e6:.1f} | `{step}` | {big} |")
    lines.append("")
    for s in lay.get("shadowed", []):
        if s["bytes"] >= 1e6:
            lines.append(
                f"- layer {s['layer']} carries {s['bytes'] / 1e6:.1f} MB that a later layer "
                f"deletes or overwrites (e.g. `{s['example']}`)"
            )
    for w in lay.get("wheels_in_layers", []):
        lines.append(f"- wheel shipped inside the image: {w}")
    for d in lay.get("duplicates", []):
        lines.append(f"- identical {d['size'] / 1e6:.1f} MB file in: {'; '.join(d['copies'])}")
    cuda = lay.get("cuda_libs_in_several_layers", [])
    lines.append(
        f"- CUDA libraries present in two or more layers: {', '.join(cuda) if cuda else 'none'}"
    )
    lines.append("")
    return lines


def _goal_lines(data: Mapping[str, Any]) -> list[str]:
    """Every row with a goal: its measured ratio beside the ratio it must stay at or under."""
    rows = [
        (section.get("title", key), r)
        for key in (
            "cli_start",
            "resolve",
            "lock",
            "build",
            "h200_build",
            "cuda_image",
            "code_change",
        )
        for section in [data.get(key) or {}]
        for r in section.get("rows", [])
        if r.get("goal") is not None
    ]
    if not rows:
        return []
    lines = [
        "## Speed goals",
        "",
        "Each goal is a ratio envbuild / peer, both measured in this run with interleaved "
        "samples (medians); the sections below have the details.",
        "",
        "| measurement | section | envbuild | peer | ratio | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for title, r in rows:
        ratio = r.get("ratio")
        # A miss says by how much: the ratio over the goal, as a share of the goal.
        met = (
            ""
            if ratio is None
            else "yes"
            if ratio <= r["goal"]
            else f"**no**, {ratio / r['goal'] - 1:.0%} over"
        )
        unit = r.get("unit", "")
        lines.append(
            f"| {r['what']} | {str(title).split(' ', 1)[0].rstrip('.')} "
            f"| {_fmt(r.get('envbuild'), unit)} | {_fmt(r.get('peer'), unit)} "
            f"| {_ratio(ratio)} | <= {r['goal']:.2f}x | {met} |"
        )
    return [*lines, ""]


def scale_lines(section: Section) -> list[str]:
    """Section 8: one table of every curve (n, seconds, the fitted exponent), then the rows."""
    lines = [
        "| curve | n | seconds | exponent b (t = a n^b) | slope, two largest n |",
        "|---|---|---|---|---|",
    ]
    for c in section.get("curves", []):
        b = c.get("exponent")
        fit = f"**{b:.2f}**" if isinstance(b, float) else "no fit (under the floor)"
        tail = c.get("tail")
        slope = f"{tail:.2f}" if isinstance(tail, float) else ""
        for i, (n, t) in enumerate(zip(c["n"], c["seconds"], strict=True)):
            first = i == 0
            lines.append(
                f"| {c['curve'] if first else ''} | {n:,} | {_fmt(t, 's')} "
                f"| {fit if first else ''} | {slope if first else ''} |"
            )
    load = section.get("load average")
    seen = (
        [
            f"Load average while this section ran: {load['start']} at its start, "
            f"{load['end']} at its end (1, 5, 15 minutes).",
            "",
        ]
        if load
        else []
    )
    return [*seen, *lines, "", *_scale_reading(section), *_table(section.get("rows", [])), ""]


def _scale_reading(section: Section) -> list[str]:
    """What the curves say, from the figures: each curve linear or not, and how much of the
    largest in-process fleet view is Python's cyclic collector."""
    out = [
        "A whole command carries a fixed start (interpreter, imports, the matrix, reading the "
        "lock: about the time of its smallest size), which flattens its fitted b; the "
        "in-process curves and the slope between the two largest sizes show the growth itself. "
        "b above 1.1 for work that is linear in n is marked **above linear**. Before "
        "d4d18d4, resolve with 1,000 target GPUs took 0.32 s in process (results/scale-1204bc6.json: every "
        "target re-split the ~330 known GPU names into words; repeated names were read again); it "
        "now reads each distinct name once with the words kept.",
        "",
    ]
    for c in section.get("curves", []):
        b, tail = c.get("exponent"), c.get("tail")
        bs = [x for x in (b, tail) if isinstance(x, float)]
        if not bs:
            continue
        verdict = "**above linear**" if max(bs) > 1.1 else "linear or better"
        fit = f"b = {b:.2f}" if isinstance(b, float) else "no fit"
        slope = f", slope of the two largest n {tail:.2f}" if isinstance(tail, float) else ""
        out.append(f"- {c['curve']}: {verdict} ({fit}{slope})")
    rows = section.get("rows", [])
    running = next((r for r in rows if "cyclic GC running" in r["what"]), None)
    if running is not None:
        n = running["what"].split("same, ", 1)[-1].split(" hosts", 1)[0]
        plain = next((r for r in rows if r["what"].endswith(f"), {n} hosts")), None)
        if plain and plain.get("envbuild") and running.get("envbuild"):
            share = 1 - plain["envbuild"] / running["envbuild"]
            out.append(
                f"- fleet view, {n} hosts: {plain['envbuild']:.2f} s with Python's cyclic "
                f"collector held off (as envbuild now runs it) against "
                f"{running['envbuild']:.2f} s with it running ({share:.0%} of that time): the "
                "collector walked the live per-host results (envbuild/core/collector.py)."
            )
    return [*out, ""]


def _load_note(machine: Mapping[str, Any]) -> list[str]:
    """A sentence when other work kept the machine busy: its timings are noisy."""
    cpus = machine.get("cpus") or 0
    loads = []
    for key in ("load average at start", "load average at end"):
        try:
            loads.append(float(str(machine.get(key, "")).split()[0]))
        except (ValueError, IndexError):
            continue
    if not cpus or not loads or max(loads) <= cpus:
        return []
    return [
        f"**The machine was loaded** (1-minute load average up to {max(loads):.1f} on "
        f"{cpus} CPUs, other work running beside the benchmark): absolute times are noisy; "
        "the ratios come from samples interleaved with the peer's, so both saw the same load.",
        "",
    ]


def write_report(data: Mapping[str, Any]) -> str:
    """RESULTS.md text from the result dict `main` builds (pure: tests feed it canned data)."""
    lines = [
        "# envbuild benchmarks",
        "",
        "Generated by `make bench` (benchmarks/run.py); raw data: benchmarks/results/latest.json. "
        "Medians over repeated runs, each beside its peer measured in the same run, samples "
        "interleaved. Ratios are envbuild / peer: below 1 envbuild is faster or smaller.",
        "",
        "## Machine",
        "",
    ]
    lines += [f"- {k}: {_fmt(v)}" for k, v in data.get("machine", {}).items()]
    settings = data.get("settings", {})
    if settings:
        lines.append("- settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    lines.append("")
    lines += _load_note(data.get("machine", {}))
    lines += _goal_lines(data)
    for key in (
        "cli_start",
        "resolve",
        "lock",
        "build",
        "smoke_h200",
        "h200_build",
        "fleet",
        "scale",
        "cuda_image",
        "code_change",
    ):
        section = data.get(key)
        if not section:
            continue
        lines += [f"## {section.get('title', key)}", ""]
        if "skipped" in section:
            lines += [f"Skipped: {section['skipped']}", ""]
            continue
        if key == "smoke_h200":
            lines += _smoke_lines(section)
        elif key == "scale" and section.get("curves"):
            lines += scale_lines(section)
        elif "pending" in section:
            lines += [f"**{section['pending']}**", ""]
        elif section.get("rows"):
            lines += [*_table(section["rows"]), ""]
        if "error" in section:
            lines += ["**FAILED:**", "", "```", str(section["error"]).strip(), "```", ""]
        for label, name in (("size_envbuild", "envbuild"), ("size_peer", "peer")):
            if label in section:
                lines += _layer_lines(section[label], name)
        lines += [f"- {n}" for n in section.get("notes", [])]
        if section.get("notes"):
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"

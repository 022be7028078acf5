"""The HTML report of a smoke run (pure): one self-contained page, no network, no script.

Inline SVG line charts of the telemetry series (`metrics.telemetry.series`: GPU util, memory
used, power against its limit, temperature, SM clock per GPU; the process's CPU use), the checks,
the readings and the memory-fit table, rendered from templates/report.html.j2 in the render
sandbox. The page layout is fixed (LAYOUT): chart i sits at `chart_box(i)` on a 1200-pixel-wide
window, which is what the headless-browser test looks at. Same input, same bytes.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envbuild.core import resources
from envbuild.render import sandbox

TEMPLATE = "report.html.j2"
HEADER_PX = 80
"""Height of the page's header block (title, verdict, one error line)."""
CHART_W, CHART_H = 560, 180
"""Each chart's SVG size in pixels."""
CELL_W, CELL_H, GAP, PAD = 580, 200, 10, 10
"""Grid cell (SVG plus caption room), gap between cells, page padding."""
PLOT = (50, 24, 545, 160)
"""The plot area inside a chart (x0, y0, x1, y1): axes labels left and below it."""
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")

CHARTS: tuple[tuple[str, str, str], ...] = (
    ("util_pct", "GPU utilisation", "%"),
    ("mem_used_mib", "GPU memory used", "MiB"),
    ("power_w", "Power (dashed: enforced limit)", "W"),
    ("temp_c", "Temperature", "C"),
    ("sm_clock_mhz", "SM clock", "MHz"),
)
"""(series field, title, unit) per GPU chart; the CPU chart comes last."""


def chart_box(index: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) in page pixels of chart `index`'s plot area (two charts a row)."""
    col, row = index % 2, index // 2
    left = PAD + col * (CELL_W + GAP)
    top = HEADER_PX + row * (CELL_H + GAP)
    return (left + PLOT[0], top + PLOT[1], left + PLOT[2], top + PLOT[3])


def nice_max(value: float) -> float:
    """The axis top: 1, 2, 2.5 or 5 times a power of ten, at or above `value` (>= 1)."""
    value = max(float(value), 1.0)
    scale = 1.0
    while scale * 10 < value:
        scale *= 10
    return next(scale * m for m in (1, 2, 2.5, 5, 10) if scale * m >= value)


def scale_points(
    t: Sequence[float],
    values: Sequence[float | None],
    *,
    t_max: float,
    y_max: float,
    box: tuple[float, float, float, float] = PLOT,
) -> list[list[tuple[float, float]]]:
    """Samples -> runs of (x, y) pixel points in `box` (y grows down); a missing value ends a
    run, so a gap in the series is a gap in the line."""
    x0, y0, x1, y1 = box
    runs: list[list[tuple[float, float]]] = [[]]
    for when, value in zip(t, values, strict=False):
        if value is None:
            if runs[-1]:
                runs.append([])
            continue
        x = x0 + (x1 - x0) * (float(when) / t_max if t_max > 0 else 0.0)
        y = y1 - (y1 - y0) * min(max(float(value) / y_max, 0.0), 1.0)
        runs[-1].append((round(x, 1), round(y, 1)))
    return [r for r in runs if r]


def points_text(run: Sequence[tuple[float, float]]) -> str:
    """An SVG `points` attribute: "x,y x,y ..." with %g numbers."""
    return " ".join(f"{x:g},{y:g}" for x, y in run)


@dataclass(frozen=True)
class Line:
    label: str
    colour: str
    runs: tuple[str, ...]
    points: int
    dashed: bool = False


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    y_max: float
    t_max: float
    lines: tuple[Line, ...]


def _numbers(values: Sequence[Any]) -> list[float | None]:
    return [
        float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None for v in values
    ]


def _line(
    label: str, colour: str, t: Sequence[float], values: Sequence[float | None], **kw: Any
) -> Line:
    runs = scale_points(t, values, t_max=kw.pop("t_max"), y_max=kw.pop("y_max"))
    return Line(label, colour, tuple(points_text(r) for r in runs), sum(map(len, runs)), **kw)


def _mapping(value: object) -> Mapping[str, Any]:
    """`value` when it is a table, else an empty one: a report comes from inside an image,
    which may hold anything; a part of the wrong type is shown as missing, never a crash."""
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def charts(series: Mapping[str, Any] | None) -> tuple[Chart, ...]:
    """The report's charts of a telemetry series (none without samples, or when its times are
    not all numbers)."""
    series = _mapping(series)
    times = _numbers(_list(series.get("t")))
    if not times or any(x is None for x in times):
        return ()
    t = [float(x) for x in times if x is not None]
    t_max = max(t[-1], 1e-9)
    gpus = [g for g in _list(series.get("gpus")) if isinstance(g, Mapping)]
    out = []
    for field, title, unit in CHARTS:
        columns = [_numbers(_list(g.get(field))) for g in gpus]
        limits = _numbers([g.get("power_limit_w") if field == "power_w" else None for g in gpus])
        top = max(
            [v for c in columns for v in c if v is not None] + [x for x in limits if x], default=0.0
        )
        y_max = 100.0 if field == "util_pct" else nice_max(top if top else 1.0)
        lines = []
        for i, (g, column) in enumerate(zip(gpus, columns, strict=True)):
            colour = COLOURS[i % len(COLOURS)]
            label = f"GPU {g.get('index', i)}"
            lines.append(_line(label, colour, t, column, t_max=t_max, y_max=y_max))
            limit = limits[i]
            if limit is not None:
                flat: list[float | None] = [limit, limit]
                lines.append(
                    _line(
                        f"{label} limit",
                        colour,
                        [0.0, t_max],
                        flat,
                        t_max=t_max,
                        y_max=y_max,
                        dashed=True,
                    )
                )
        out.append(Chart(title, unit, y_max, t_max, tuple(lines)))
    cpu = _numbers(_list(series.get("cpu_pct")))
    cpu_top = nice_max(max([v for v in cpu if v is not None] + [100.0]))
    cpu_line = _line("process", COLOURS[0], t, cpu, t_max=t_max, y_max=cpu_top)
    out.append(Chart("CPU use (100% = one core)", "%", cpu_top, t_max, (cpu_line,)))
    return tuple(out)


@functools.cache
def _environment() -> Any:
    import jinja2

    return sandbox.environment_class()(
        loader=jinja2.FileSystemLoader(str(resources.templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=True,  # report values (names, hints, stderr) are text, never markup
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _check_rows(checks: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    return [
        {
            k: str(c.get(k) if c.get(k) is not None else "")
            for k in ("tier", "name", "status", "figure", "hint")
        }
        for c in checks
        if isinstance(c, Mapping)
    ]


def _command_values(command: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The project's smoke step as the page shows it: the command, how it ended, the charts and
    readings of the watcher's series (none when it was not watched)."""
    if not isinstance(command, Mapping) or not command:
        return None
    watch = _mapping(command.get("watch"))
    telemetry = _mapping(watch.get("telemetry"))
    argv = [str(a) for a in _list(command.get("command"))]
    return {
        "shown": shlex.join(argv),
        "exit_code": command.get("exit_code"),
        "duration_s": command.get("duration_s"),
        "samples": _mapping(watch.get("peaks")).get("samples") or 0,
        "charts": charts(telemetry.get("series")),
        "readings": _check_rows(_list(watch.get("readings"))),
    }


def page(
    *,
    title: str,
    verdict: str,
    report: Mapping[str, Any] | None,
    checks: Sequence[Mapping[str, Any]] = (),
    memory_fit: Mapping[str, Any] | None = None,
    error: str = "",
    command: Mapping[str, Any] | None = None,
) -> str:
    """The HTML text. `checks` default to the report's; `memory_fit` is `MemoryFit.to_json()`;
    `error` is what stopped the run (a failed page still shows what there is); `command` is
    the project's smoke step record (`smoke_command`, with its watcher's series)."""
    report = _mapping(report)
    metrics = _mapping(report.get("metrics"))
    telemetry = _mapping(metrics.get("telemetry"))
    rows = _check_rows(checks or _list(report.get("checks")))
    values = {
        "title": title,
        "verdict": verdict,
        "error": error,
        "device": str(report.get("device") or ""),
        "charts": charts(telemetry.get("series")),
        "checks": [r for r in rows if not r["name"].startswith("reading-")],
        "readings": [r for r in rows if r["name"].startswith("reading-")],
        "memory_fit": memory_fit,
        "command": _command_values(command),
        "telemetry": {
            k: telemetry.get(k) for k in ("source", "interval_s", "samples_taken", "cost_pct")
        },
        "layout": {
            "header": HEADER_PX,
            "cell_w": CELL_W,
            "cell_h": CELL_H,
            "gap": GAP,
            "pad": PAD,
            "chart_w": CHART_W,
            "chart_h": CHART_H,
            "plot": PLOT,
        },
    }
    template = _environment().get_template(TEMPLATE)
    return sandbox.generate(template, values)

"""The HTML report in a real headless browser: Chromium draws every chart (its plot area in the
screenshot holds coloured pixels) and the DOM has the polylines with the series' point counts.
Runs where `chromium` is installed (.ci/run installs Debian's), skips elsewhere."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from envbuild.app import report as report_app
from envbuild.render import report as html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs chromium (apt-get install chromium)"
)
FIXTURE = Path(__file__).parents[1] / "fixtures/reports/torch-h100x2.json"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r) for r in rows] if bpp == 3 else [_rgb(r) for r in rows]


def _rgb(row: bytes) -> bytes:
    return bytes(b for i, b in enumerate(row) if i % 4 != 3)


def coloured(rows: list[bytes], box: tuple[int, int, int, int]) -> int:
    """Pixels in box whose channels differ (the series' colours; text, axes and paper are grey)."""
    x0, y0, x1, y1 = box
    n = 0
    for y in range(y0 + 2, y1 - 1):
        row = rows[y]
        for x in range(x0 + 2, x1 - 1):
            r, g, b = row[3 * x : 3 * x + 3]
            n += max(r, g, b) - min(r, g, b) > 60
    return n


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    report = json.loads(FIXTURE.read_text())
    out = tmp_path_factory.mktemp("report") / "smoke.html"
    fit = report_app.memory_fit(report)
    report_app.write(out, title="smoke torch-train", ok=True, report=report, fit=fit)
    return out


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=120, check=True
    )


def test_every_chart_is_drawn(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri())
    width, height, rows = decode_png(shot.read_bytes())
    assert (width, height) == (1200, 2000)
    blank_header = coloured(rows, (0, html.HEADER_PX - 8, 1200, html.HEADER_PX))
    assert blank_header == 0
    for i in range(6):
        got = coloured(rows, html.chart_box(i))
        assert got > 300, f"chart {i} at {html.chart_box(i)} has {got} coloured pixels"
    # Right of the two columns is paper: the layout is where the test thinks it is.
    assert coloured(rows, (2 * html.CELL_W + 3 * html.PAD, html.HEADER_PX, 1200, 700)) == 0


def test_dom_has_the_polylines(page: Path) -> None:
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    samples = len(json.loads(FIXTURE.read_text())["metrics"]["telemetry"]["series"]["t"])
    lines = re.findall(r'<polyline[^>]*points="([^"]*)"', dom)
    assert len(re.findall(r"<svg", dom)) == 6
    counts = sorted(len(p.split()) for p in lines)
    # 5 GPU charts x 2 GPUs with every sample, 2 power limits of 2 points, CPU without its first
    assert counts == [2, 2, samples - 1] + [samples] * 10
    assert "does not fit" in dom and "bf16-tflops" in dom

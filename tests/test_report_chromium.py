"""The report page renders in headless Chromium (Debian's ``chromium``) and is not blank."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_report_build import make_run_dir

from davinci_kernel.report.build import build_report
from davinci_kernel.report.plots import P_COLORS

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium missing: install Debian's chromium package")


def _rgb(hex_color: str) -> tuple[int, int, int]:
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))


def screenshot(page: Path, out: Path, profile: Path) -> Path:
    profile.mkdir()
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", f"--screenshot={out}",
           "--window-size=1280,2000", "--force-device-scale-factor=1", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=50)
    assert out.is_file(), f"no screenshot (rc={proc.returncode}): {proc.stderr[-2000:]}"
    return out


def test_page_renders_with_tables_and_figures(tmp_path):
    from PIL import Image

    run = tmp_path / "run"
    make_run_dir(run, seed=11)
    shot = screenshot(build_report(run), tmp_path / "shot.png", tmp_path / "profile")
    im = Image.open(shot).convert("RGB")
    assert im.size == (1280, 2000)
    hist = im.convert("L").histogram()
    ink = sum(hist[:240]) / (1280 * 2000)
    assert ink > 0.05, f"page looks blank: {ink:.1%} non-white"
    colors = im.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 200, "too few colors: figures missing?"
    # the Fast_p figure (an embedded data-URI PNG) is drawn: its bar colors are on screen
    counts = {c: n for n, c in colors}
    for hex_color in P_COLORS[:3]:
        r, g, b = _rgb(hex_color)
        near = sum(n for (cr, cg, cb), n in counts.items()
                   if abs(cr - r) + abs(cg - g) + abs(cb - b) <= 12)
        assert near > 300, f"Fast_p bars ({hex_color}) not visible in the screenshot"

"""dlaunch report: metric parsing, and the page of a real run as a real headless Chromium draws it."""

import collections
import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

from launcher.report import OUTCOME_COLOURS, PALETTE, ROOT_COLOUR, nice_ticks, parse_metrics
from tests.launching import ROOT, kill_run, latest_run, run_dlaunch, start_dlaunch, wait_until

PROGRAM = str(ROOT / "tests" / "programs" / "watch_rank.py")


def test_parse_metrics_seeds_form_and_json_lines():
    lines = [
        "epoch: 1 step: 10, loss is 2.2978780269622803",      # the seeds' LossMonitor
        "epoch: 1 step: 20, loss is 2.29",
        "epoch: 2 step: 10, loss is [1.5]",                    # printed as an array by some versions
        "epoch: 2 step: 20, loss is (Tensor(shape=[], dtype=Float32, value= 1.25),)",
        "step: 3, loss is 9",                                   # no epoch: not the form
        '{"dlaunch": "metric", "step": 7, "loss": 0.5, "lr": 0.1, "epoch": 1, "note": "x"}',
        '{"dlaunch": "metric", "loss": 0.4}',                   # no step: ignored
        '{"other": "metric", "step": 8, "loss": 0.3}',          # not tagged: ignored
        '{"dlaunch": "metric", "step": 9, "accuracy": true}',   # booleans are not numbers
        "{broken json \"dlaunch\"",
    ]
    found = parse_metrics(lines)
    assert found["loss"] == [(7.0, 0.5), (10, 2.2978780269622803), (20, 2.29), (30, 1.5), (40, 1.25)]
    assert found["lr"] == [(7.0, 0.1)]
    assert set(found) == {"loss", "lr"}
    assert parse_metrics(["epoch: 1 step: 4, loss is 1.9106841"]) == {"loss": [(4, 1.9106841)]}  # train_cifar.py


def test_nice_ticks():
    assert nice_ticks(0, 60, 8) == [0, 10, 20, 30, 40, 50, 60]
    assert nice_ticks(0.1, 2.4, 6) == [0, 0.5, 1.0, 1.5, 2.0, 2.5]
    ticks = nice_ticks(0.1, 0.1)
    assert ticks[0] < 0.1 < ticks[-1]


# --------------------------------------------------------------------------
# the page in a real browser
# --------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):  # scripts/test.sh installs it; else here
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], env=env,
                       capture_output=True, timeout=900)
        found = shutil.which("chromium")
    if not found:
        pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it)")
    return found


def screenshot(html_path, png_path, profile_dir) -> None:
    """Render the page as a user's browser would, to a 1200x1600 PNG, offline."""
    argv = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
            "--force-color-profile=srgb", f"--user-data-dir={profile_dir}", f"--screenshot={png_path}",
            "--window-size=1200,1600", f"file://{html_path}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert png_path.exists(), done.stderr[-2000:]


def read_png(path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA, non-interlaced PNG: stdlib only."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    raw = zlib.decompress(b"".join(idat))
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    prev, rows = bytearray(stride), []
    for y in range(height):
        base = y * (stride + 1)
        kind, line = raw[base], bytearray(raw[base + 1:base + 1 + stride])
        if kind == 1:      # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:    # Up
            line = bytearray((x + p) & 0xFF for x, p in zip(line, prev))
        elif kind == 3:    # Average
            for i in range(stride):
                line[i] = (line[i] + (((line[i - bpp] if i >= bpp else 0) + prev[i]) >> 1)) & 0xFF
        elif kind == 4:    # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        prev = line
        rows.append(bytes(line) if bpp == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
    return width, height, rows


def colour_pixels(rows: list[bytes], colours: list[str]) -> dict[str, list[int]]:
    """Colour -> the row index of every pixel of exactly that colour."""
    found = collections.defaultdict(list)
    for y, row in enumerate(rows):
        for colour in colours:
            needle, start = bytes.fromhex(colour.lstrip("#")), 0
            while (at := row.find(needle, start)) >= 0:
                if at % 3 == 0:
                    found[colour].append(y)
                    start = at + 3
                else:
                    start = at + 1
    return found


def test_report_of_a_restarted_run_in_headless_chromium(tmp_path):
    out = tmp_path / "runs"
    # 4 ranks print 2 epochs of losses (rank 3 as JSON lines); rank 1 fails in attempt 0, then all succeed
    result = run_dlaunch("run", PROGRAM, "--ranks", "4", "--output-dir", out, "--max-restarts", "1", "--",
                         "--steps", "30", "--epochs", "2", "--step-every", "0.02", "--json-ranks", "3",
                         "--exit", "1:3:0.8", "--fail-on-attempt", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page = tmp_path / "report.html"
    made = run_dlaunch("report", "--output-dir", out, "-o", page, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = page.read_text()

    # self-contained: nothing to fetch, no script
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    assert "http://" not in text and "https://" not in text and "<script" not in text.lower()
    assert "<link" not in text.lower() and "@import" not in text
    # timeline: 4 ranks x 2 attempts, the root cause marked; a loss line per rank and attempt
    assert text.count('class="timeline"') == 1
    assert text.count(f'fill="{ROOT_COLOUR}"') >= 2 and "root cause: exit 3" in text and "restart 1" in text
    polylines = re.findall(r'<polyline fill="none" stroke="(#[0-9a-f]{6})" ([^>]*)points="([^"]+)"', text)
    assert sorted(colour for colour, _, _ in polylines) == sorted(PALETTE[:4] * 2)
    newest = {colour: points for colour, style, points in polylines if "dasharray" not in style}
    assert all(len(points.split()) == 60 for points in newest.values())  # 2 epochs x 30 steps, every rank
    assert "loss per rank" in text and ">step<" in text and ">rank 3<" in text

    png = tmp_path / "report.png"
    screenshot(page, png, tmp_path / "chromium-profile")
    width, height, rows = read_png(png)
    assert (width, height) == (1200, 1600)
    wanted = PALETTE[:4] + [ROOT_COLOUR, OUTCOME_COLOURS["ok"][0], OUTCOME_COLOURS["stopped"][0]]
    pixels = colour_pixels(rows, wanted)
    counts = {colour: len(ys) for colour, ys in pixels.items()}
    # each rank's loss line is drawn (a legend swatch alone is 24x3 pixels), and so are the timeline's bars
    for colour in wanted:
        assert counts.get(colour, 0) > 400, counts
    # the root cause's bar and marker are in the timeline, above the loss chart
    assert max(pixels[ROOT_COLOUR]) < min(pixels[PALETTE[0]]), counts


def test_report_of_a_running_job(tmp_path):
    out = tmp_path / "runs"
    proc = start_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", out, "--run-id", "going", "--",
                         "--steps", "5", "--sleep", "20", cwd=tmp_path)
    try:
        done = lambda: all("loss is" in (out / "going" / f"rank_00{r}" / "output.log").read_text()  # noqa: E731
                           for r in (0, 1) if (out / "going" / f"rank_00{r}" / "output.log").exists())
        assert wait_until(lambda: (out / "going" / "rank_001" / "output.log").exists() and done(), timeout=30)
        made = run_dlaunch("report", out / "going", "-o", "-", cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        assert "running or ended without a summary" in made.stdout
        assert made.stdout.count(f'fill="{OUTCOME_COLOURS["running"][0]}"') == 2
        assert "<polyline" in made.stdout
        default = run_dlaunch("report", "--output-dir", out, cwd=tmp_path)
        assert default.returncode == 0 and (tmp_path / "report-going.html").exists()
    finally:
        proc.kill()
        kill_run("going")
    assert latest_run(out).name == "going"

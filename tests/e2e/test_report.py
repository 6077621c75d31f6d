"""dlaunch report: metric parsing, and the page of a real run as a real headless Chromium draws it."""

import collections
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib

import pytest

from launcher.observe.charts import OUTCOME_COLOURS, ROOT_COLOUR, colour_distance, log_ticks, nice_ticks, rank_colour
from launcher.observe.metrics import parse_metrics
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


def test_parse_metrics_accuracy_lines():
    lines = [
        "epoch: 1 step: 10, loss is 2.0",
        "epoch: 1 step: 20, loss is 1.5",
        "accuracy is 0.61",                                     # after a loss line: at its step
        "epoch: 2 step: 20, loss is 1.0",
        "epoch: 2 accuracy: 0.8300",                            # examples/train_cifar.py: at its epoch's end
        "it may cause accuracy problems",                       # prose: no number
        "val_acc: 0.2",                                         # another metric's name: not accuracy
    ]
    assert parse_metrics(lines) == {"loss": [(10, 2.0), (20, 1.5), (40, 1.0)], "accuracy": [(20, 0.61), (40, 0.83)]}
    # MindSpore's Model.eval result printed, "acc:", no loss line at all: numbered evaluations
    found = parse_metrics(["acc: 0.5", "{'accuracy': 0.91}", "== Accuracy:{'Accuracy': 0.93} ==",
                           "Top-1 accuracy = 93.5%"])
    assert found == {"accuracy": [(1, 0.5), (2, 0.91), (3, 0.93), (4, 93.5)]}
    assert found["accuracy"].axis == "evaluation"
    # after a JSON line: at its step
    assert parse_metrics(['{"dlaunch": "metric", "step": 7, "loss": 0.5}', "acc: 0.4"])["accuracy"] == [(7.0, 0.4)]


def test_nice_ticks():
    assert nice_ticks(0, 60, 8) == [0, 10, 20, 30, 40, 50, 60]
    assert nice_ticks(0.1, 2.4, 6) == [0, 0.5, 1.0, 1.5, 2.0, 2.5]
    ticks = nice_ticks(0.1, 0.1)
    assert ticks[0] < 0.1 < ticks[-1]
    # steps: whole numbers only, never 2.5 apart, one step centred
    assert nice_ticks(1, 5, 8, integer=True) == [1, 2, 3, 4, 5]
    assert nice_ticks(0, 12, 6, integer=True) == [0, 5, 10, 15]     # 2.5 apart is no step
    assert nice_ticks(7, 7, integer=True) == [6, 7, 8]
    assert all(isinstance(t, int) for t in nice_ticks(3, 1234, 8, integer=True))


def test_log_ticks():
    assert log_ticks(0.01, 2.3) == (0.01, 3.0, [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0])
    assert log_ticks(0.001, 10) == (0.001, 10.0, [0.001, 0.01, 0.1, 1.0, 10.0])
    assert log_ticks(2.25, 2.3) is None and log_ticks(0, 1) is None     # too narrow, or not all positive


def test_rank_colours_distinct():
    colours = [rank_colour(r) for r in range(64)]
    assert len(set(colours)) == 64 and rank_colour(0) != rank_colour(12)
    assert min(colour_distance(a, b) for i, a in enumerate(colours) for b in colours[i + 1:]) > 10
    assert min(colour_distance(a, b) for i, a in enumerate(colours[:16]) for b in colours[i + 1:16]) > 25
    assert all(colour_distance(c, bar) > 12 for c in colours for bar, _ in OUTCOME_COLOURS.values())


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


def screenshot(html_path, png_path, profile_dir, height=1600) -> None:
    """Render the page as a user's browser would, to a 1200 pixels wide PNG, offline."""
    argv = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
            "--force-color-profile=srgb", f"--user-data-dir={profile_dir}", f"--screenshot={png_path}",
            f"--window-size=1200,{height}", f"file://{html_path}"]
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
    assert text.count(f'fill="{ROOT_COLOUR}"') >= 2 and "restart 1" in text
    assert re.search(r'class="(?:root|inbar)"[^>]*>(?:root cause: |rank 1: )?exit 3<', text)   # wherever it fits
    # what ran, with which settings; every log a link
    assert f"{sys.executable} {PROGRAM} --steps 30 --epochs 2" in text and "restarts allowed" in text
    run_dir = latest_run(out)
    for rank in range(4):
        for log in ("output.log", "output.1.log"):
            assert f'href="file://{run_dir}/rank_00{rank}/{log}"' in text
    polylines = re.findall(r'<polyline fill="none" stroke="(#[0-9a-f]{6})" ([^>]*)points="([^"]+)"', text)
    assert sorted(colour for colour, _, _ in polylines) == sorted([rank_colour(r) for r in range(4)] * 2)
    newest = {colour: points for colour, style, points in polylines if "dasharray" not in style}
    assert all(len(points.split()) == 60 for points in newest.values())  # 2 epochs x 30 steps, every rank
    assert "loss per rank" in text and ">step<" in text and ">rank 3<" in text
    assert 'class="steps"' not in text and "step time" not in text   # no step lines: no step-time section

    png = tmp_path / "report.png"
    screenshot(page, png, tmp_path / "chromium-profile")
    width, height, rows = read_png(png)
    assert (width, height) == (1200, 1600)
    wanted = [rank_colour(r) for r in range(4)] + [ROOT_COLOUR, OUTCOME_COLOURS["ok"][0], OUTCOME_COLOURS["stopped"][0]]
    pixels = colour_pixels(rows, wanted)
    counts = {colour: len(ys) for colour, ys in pixels.items()}
    # each rank's loss line is drawn (a legend swatch alone is 24x3 pixels), and so are the timeline's bars
    for colour in wanted:
        assert counts.get(colour, 0) > 400, counts
    # the root cause's bar and marker are in the timeline, above the loss chart
    assert max(pixels[ROOT_COLOUR]) < min(pixels[rank_colour(0)]), counts


ALERT = "#b3261e"       # report.html.j2's --alert: a flagged row of the slowest ranks


def test_step_time_chart_in_headless_chromium(tmp_path):
    """4 ranks print Megatron-style step lines, rank 2 taking 40% longer: its line is drawn above the others in
    the step-time chart, and its row of the slowest ranks in the alert colour, under the chart (the page's only
    alert colour: the run succeeded)."""
    out = tmp_path / "runs"
    result = run_dlaunch("run", ROOT / "tests" / "programs" / "step_rank.py", "--ranks", "4", "--output-dir", out,
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page, text = report_page(tmp_path, latest_run(out), "steps")
    assert text.count('<svg class="chart"') == 1 and 'aria-label="step time (ms) per rank' in text
    png = tmp_path / "steps.png"
    screenshot(page, png, tmp_path / "chromium-profile", height=1800)
    rows = read_png(png)[2]
    # the plot areas' rows (grid lines and the lines drawn cut them up): the last area, the step-time chart's;
    # a line at the axis' lowest or highest value runs along its border, so a few rows either side count too
    plot = [y for y, row in enumerate(rows) if row.count(bytes.fromhex("fbfbfd")) > 700]
    top = max(y for y, above in zip(plot, [-1000] + plot) if y - above > 100) - 8
    bottom = max(plot) + 8     # the legend's swatches begin 43 rows under the plot area
    colours = [rank_colour(r) for r in range(4)]
    found = colour_pixels(rows, colours + [ALERT])
    inside = {c: [y for y in found.get(c, []) if top <= y <= bottom] for c in colours}
    # the flagged rank's line is drawn in its colour inside the chart (legend and table swatches lie outside
    # it), and so are the others' (counted together: lines of equally fast ranks hide one another)
    slow = sorted(inside[rank_colour(2)])
    fast = sorted(y for rank in (0, 1, 3) for y in inside[rank_colour(rank)])
    assert len(slow) > 400 and len(fast) > 400, ({c: len(ys) for c, ys in inside.items()}, top, bottom)
    # higher up: slower (medians of the pixels' rows: a spike's steep segments are many pixels of few steps)
    assert slow[len(slow) // 2] < fast[len(fast) // 2] - 5, (slow[len(slow) // 2], fast[len(fast) // 2])
    # the flagged row: alert-coloured text under the chart, and nowhere else on the page
    assert len(found.get(ALERT, [])) > 20 and min(found[ALERT]) > bottom, len(found.get(ALERT, []))


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


# --------------------------------------------------------------------------
# 1, 8 and 64 ranks without launching them: dlaunch's own writers, the logs a training script prints
# --------------------------------------------------------------------------

STEPS, EPOCHS = 50, 3


def rank_log(rank: int, attempt: int, upto: int | None = None) -> list[str]:
    """What a rank prints: the seeds' loss lines (2.3 falling to about 0.01), an accuracy line per epoch in
    one of the forms people print."""
    lines = [f"rank {rank} started (attempt {attempt})"]
    for epoch in range(1, EPOCHS + 1):
        for step in range(1, STEPS + 1):
            x = (epoch - 1) * STEPS + step
            if upto is not None and x > upto:
                return lines + [f"rank {rank} exits"]
            loss = 2.3 * math.exp(-x / 28) * (1 + 0.02 * (rank % 7)) + 0.004 * (rank % 5)
            lines.append(f"epoch: {epoch} step: {step}, loss is {loss:.7f}")
        accuracy = 0.55 + 0.12 * epoch + 0.002 * rank
        lines.append([f"epoch: {epoch} accuracy: {accuracy:.4f}", f"{{'accuracy': {accuracy}}}",
                      f"acc: {accuracy:.3f}", f"Eval result: accuracy is {accuracy:.4f}"][rank % 4])
    return lines


def fake_run(out, run_id, hosts, *, written=None, fail=(), resume_dir=None, extra_env=None):
    """A finished run directory exactly as dlaunch writes it (make_plan, rundir.create, summarize), its
    ranks never started: ``hosts`` ranks per server; only servers ``written`` wrote anything; ``fail``:
    (attempt, rank, exit code or signal name, seconds after start) per failed attempt, each followed by a
    restart."""
    from launcher.checkpoint.resume import ResumePoint
    from launcher.execute.results import AttemptResult, RankResult, summarize
    from launcher.plan.make import Command, Options, Policy, make_plan
    from launcher.rundir.create import create as create_run_dir
    from launcher.rundir.create import write_json
    from launcher.rundir.paths import host_suffix
    from launcher.table.model import dumps, loads

    servers, rank = [], 0
    for index, count in enumerate(hosts):
        servers.append({"server_id": f"10.0.0.{index + 1}", "host_nic_ip": "reserve",
                        "device": [{"device_id": str(d), "device_ip": f"192.{d + 1}.0.{index + 1}",
                                    "rank_id": str(rank + d)} for d in range(count)]})
        rank += count
    table = loads(json.dumps({"version": "1.0", "server_count": str(len(hosts)), "server_list": servers,
                              "status": "completed"}))
    t0 = time.time() - 120
    for index in (range(len(hosts)) if written is None else written):
        suffix = host_suffix(servers[index]["server_id"]) if len(hosts) > 1 else ""
        opts = Options(command=Command(str(ROOT / "examples" / "train_cifar.py"), ("--epochs", str(EPOCHS),
                                                                                  "--batch-size", "32")),
                       run_id=run_id, output_dir=str(out), launch_dir=str(out.parent), python=sys.executable,
                       policy=Policy(grace_period=7.0, max_restarts=len(fail)), host_files_suffix=suffix,
                       extra_env=extra_env or {})
        ranks_here = [int(d["rank_id"]) for d in servers[index]["device"]]
        resume = ResumePoint(run_dir=resume_dir, label="resnet-1_50", epoch=1, step=50,
                             files={r: f"{resume_dir}/rank_{r:03d}/ckpt/resnet-1_50.ckpt" for r in ranks_here}) \
            if resume_dir else None
        table_file = os.path.join(out, run_id, f"rank_table{suffix}.json")
        plans = [make_plan(table, index, opts, table_file, {}, attempt=a, resume=resume)
                 for a in range(len(fail) + 1)]
        create_run_dir(plans[0], dumps(table), shared=True)
        attempts, start = [], t0
        for number, plan in enumerate(plans):
            failing = fail[number] if number < len(fail) else None
            stop = start + (failing[3] if failing else 60.0)
            results = []
            for spec in plan.ranks:
                begin = start + 0.3 + 0.01 * spec.rank
                dies = failing and failing[1] == spec.rank
                upto = int(STEPS * EPOCHS * (stop - begin) / 60) if failing else None
                with open(spec.env_log, "w") as fh:
                    fh.write("".join(f"{k}={v}\n" for k, v in sorted(spec.env.items())))
                with open(spec.log_file, "w") as fh:
                    fh.write("\n".join(rank_log(spec.rank, number, upto)) + "\n")
                if not failing:
                    code, end = 0, stop - 0.2 * (spec.rank % 3)
                elif dies:
                    what = failing[2]
                    code, end = (-signal.Signals[what].value if isinstance(what, str) else what), stop
                else:
                    code, end = -signal.SIGTERM, stop + 0.4
                results.append(RankResult(rank=spec.rank, local_rank=spec.local_rank, device_id=spec.device_id,
                                          server_id=spec.server_id, log_file=spec.log_file,
                                          error_file=spec.error_file, pid=10000 + spec.rank, start=begin, end=end,
                                          returncode=code))
            cause = next((r for r in results if failing and r.rank == failing[1]), None)
            attempts.append(AttemptResult(attempt=number, ranks=results, root_cause=cause))
            start = stop + 1.0     # the restart: at once
        write_json(plans[-1].host_file("summary", "json"), summarize(plans[-1], attempts, t0))
    return out / run_id


def report_page(tmp_path, run_dir, name):
    page = tmp_path / f"{name}.html"
    made = run_dlaunch("report", run_dir, "-o", page, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return page, page.read_text()


def svg_of(text, cls, index=0):
    return re.findall(rf'<svg class="{cls}".*?</svg>', text, re.S)[index]


def first_border_row(rows, colour="#d8dae0") -> int:
    """The y of the first section's top border: the first row mostly of the card border colour."""
    needle = bytes.fromhex(colour.lstrip("#"))
    return next(y for y, row in enumerate(rows) if row.count(needle) > 800)


def pixel_boxes(rows, colour, xgap=14, ygap=3):
    """Bounding boxes (x0, y0, x1, y1) of the clusters of pixels of exactly ``colour``: a line of text each
    (rows of pixels less than ``ygap`` apart, split where ``xgap`` columns are empty)."""
    needle, points = bytes.fromhex(colour.lstrip("#")), collections.defaultdict(list)
    for y, row in enumerate(rows):
        start = 0
        while (at := row.find(needle, start)) >= 0:
            if at % 3 == 0:
                points[y].append(at // 3)
            start = at + 1
    lines, boxes = [], []
    for y in sorted(points):
        if lines and y - lines[-1][-1] <= ygap:
            lines[-1].append(y)
        else:
            lines.append([y])
    for ys in lines:
        xs = sorted(x for y in ys for x in points[y])
        first = xs[0]
        for a, b in zip(xs, xs[1:] + [None]):
            if b is None or b - a > xgap:
                boxes.append([first, ys[0], a, ys[-1]])
                first = b
    return boxes


def colours_in_box(rows, box, colours) -> set[str]:
    x0, y0, x1, y1 = box
    wanted = {bytes.fromhex(c.lstrip("#")): c for c in colours}
    found = set()
    for y in range(y0, y1 + 1):
        row = rows[y]
        for x in range(x0, x1 + 1):
            hit = wanted.get(row[3 * x:3 * x + 3])
            if hit:
                found.add(hit)
    return found


BAR_COLOURS = [colour for colour, _ in OUTCOME_COLOURS.values()]
ROOT_LABEL = "#a3142c"     # the timeline's root-cause labels (report.html.j2: svg text.root)


def test_report_pages_of_1_8_and_64_ranks_in_headless_chromium(tmp_path):
    out = tmp_path / "runs"
    one = fake_run(out, "one", [1], resume_dir=str(tmp_path / "runs" / "before"),
                   extra_env={"DATA_PATH": "/data/cifar-10-batches-bin", "HF_TOKEN": "hf_secret"})
    eight = fake_run(out, "eight", [4, 4, 4], written=[0, 1], fail=[(0, 5, 3, 3.0)])
    deep = "/mnt/shared/checkpoints/" + "/".join(f"experiment-{i:02d}-with-a-rather-long-name" for i in range(8))
    many = fake_run(out, "sixty-four-ranks-" + "x" * 90, [64], resume_dir=deep,
                    fail=[(0, 37, "SIGKILL", 20.0), (1, 12, 1, 10.0)])
    pages = {name: report_page(tmp_path, run, name) for name, run in (("one", one), ("eight", eight),
                                                                      ("many", many))}
    shots = {}
    for name, (page, _) in pages.items():
        png = tmp_path / f"{name}.png"
        screenshot(page, png, tmp_path / "chromium-profile", height={"one": 1300, "eight": 1800}.get(name, 2600))
        shots[name] = read_png(png)[2]

    text = pages["one"][1]
    # the command, its arguments and the settings; --env variables shown, secrets masked
    assert f"{sys.executable} {ROOT}/examples/train_cifar.py --epochs 3 --batch-size 32" in text
    assert "SIGTERM, 7 s grace, then SIGKILL" in text and "DATA_PATH" in text and "/data/cifar-10-batches-bin" in text
    assert "HF_TOKEN" in text and "hf_secret" not in text
    # log paths are links
    assert f'href="file://{one}/rank_000/output.log"' in text
    # loss on a log scale: decades evenly spaced; the right half of the curve still falls (pixels)
    loss = svg_of(text, "chart", 0)
    assert "loss (log scale)" in loss
    ticks = {float(v): float(y) for y, v in re.findall(r'y="([\d.]+)" class="tick ytick"[^>]*>([^<]+)<', loss)}
    assert {0.01, 0.1, 1.0} <= set(ticks) and abs((ticks[0.01] - ticks[0.1]) - (ticks[0.1] - ticks[1.0])) < 0.2
    # whole-number step ticks on every chart
    for chart in re.findall(r'<svg class="chart".*?</svg>', text, re.S):
        xticks = re.findall(r'class="tick" text-anchor="middle">([^<]+)<', chart)
        assert xticks and all(re.fullmatch(r"\d+", t) for t in xticks), xticks
    # accuracy lines: one point per epoch, at its end
    accuracy = svg_of(text, "chart", 1)
    assert "accuracy per rank" in accuracy and len(re.findall(r"<polyline[^>]*points=\"([^\"]+)\"", accuracy)[0]
                                                       .split()) == EPOCHS
    rows = shots["one"]
    plot = [y for y, row in enumerate(rows) if row.count(bytes.fromhex("fbfbfd")) > 700]
    top, bottom = plot[0], plot[-1]              # the loss chart's plot area, the page's first tall one
    curve = [(i // 3, y) for y in range(top, bottom) for i in range(0, len(rows[y]), 3)
             if rows[y][i:i + 3] == bytes.fromhex(rank_colour(0).lstrip("#"))]
    xs = [x for x, _ in curve]
    right = [y for x, y in curve if x > (min(xs) + max(xs)) / 2]
    assert (max(right) - min(right)) > 0.3 * (bottom - top), "the loss curve's second half looks flat"

    text = pages["eight"][1]
    # hosts of one job in one run directory: the whole job, and the host that never reported
    assert "incomplete" in text and "never reported" in text and "10.0.0.3 (ranks 8-11)" in text
    assert svg_of(text, "chart", 0).count('class="swatch"') == 8
    # colours: 8 distinct lines, each drawn (pixels), distinct from the timeline's colours
    counts = collections.Counter()
    for colour, ys in colour_pixels(shots["eight"], [rank_colour(r) for r in range(8)]).items():
        counts[colour] = len(ys)
    assert len(counts) == 8 and min(counts.values()) > 300, counts

    text = pages["many"][1]
    rows = shots["many"]
    colours = [rank_colour(r) for r in range(64)]     # distinct (test_rank_colours_distinct), each drawn
    found = colour_pixels(rows, colours)
    assert all(len(found.get(c, ())) >= 100 for c in colours), {c: len(found.get(c, ())) for c in colours}
    assert 'class="mean"' in text and 'class="band"' in text and "mean of 64 ranks" in text
    # the header never wraps: a 90-character run id and a 350-character "resumed from" leave it one line
    assert deep in text and f'title="resnet-1_50 of {deep}"' in text
    assert first_border_row(rows) == first_border_row(shots["one"])

    # root-cause labels never overlap a bar: no bar colour inside any label's pixels
    for name in ("eight", "many"):
        boxes = [b for b in pixel_boxes(shots[name], ROOT_LABEL) if (b[2] - b[0]) > 20]
        assert len(boxes) == (1 if name == "eight" else 3), (name, boxes)   # 64: two labels and "root cause"
        for box in boxes:
            assert not colours_in_box(shots[name], box, BAR_COLOURS), (name, box)


# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across exec, so a child of a pytest worker that
# imported torch starts with the worker's 280 MiB already counted
MEASURED_REPORT = """\
import sys
from launcher.cli import main
code = main(["report", *sys.argv[1:]])
with open("/proc/self/io") as fh:
    read = dict(line.split(": ") for line in fh.read().splitlines())["rchar"]
with open("/proc/self/status") as fh:
    peak = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
print(f"read={read} peak_kib={peak} code={code}")
"""


def test_report_of_a_sparse_2_gib_log_reads_its_data_not_its_hole(tmp_path):
    """A log truncated to 2 GiB (a hole) with a loss line after it: report steps over the hole, so it neither
    reads 2 GiB of zeros nor holds them, and still finds the line."""
    out = tmp_path / "runs"
    assert run_dlaunch("run", ROOT / "tests" / "programs" / "rank.py", "--ranks", "1", "--output-dir", out,
                       "--console", "none", cwd=tmp_path).returncode == 0
    log = latest_run(out) / "rank_000" / "output.log"
    os.truncate(log, 2 << 30)
    with open(log, "ab") as fh:
        fh.write(b"\nepoch: 1 step: 7, loss is 0.123456\n")
    if os.stat(log).st_blocks * 512 > 64 << 20:
        pytest.skip("this filesystem keeps no sparse files")
    measured = subprocess.run([sys.executable, "-c", MEASURED_REPORT, str(latest_run(out)), "-o", "page.html"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    numbers = dict(item.split("=") for item in measured.stdout.strip().splitlines()[-1].split())
    assert numbers["code"] == "0", measured.stderr
    page = (tmp_path / "page.html").read_text()
    assert re.search(r"0\.123(5|456)", page), "the loss line after the hole is not on the page"
    assert int(numbers["read"]) < 64 << 20, numbers          # not the 2 GiB of the hole
    assert int(numbers["peak_kib"]) < 200 << 10, numbers     # 200 MiB


def test_bounded_lines_treat_a_hole_as_the_zeros_it_holds(tmp_path):
    from launcher.base.lines import bounded_lines

    path = tmp_path / "sparse.log"
    path.write_bytes(b"a\n")
    os.truncate(path, 1 << 20)
    with open(path, "ab") as fh:
        fh.write(b"b\nc\n")
    assert list(bounded_lines(str(path), 64 << 10, chunk=4096)) == ["a", "c"]   # the 1 MiB line is skipped
    assert list(bounded_lines(str(path), 2 << 20, chunk=4096)) == ["a", "\0" * ((1 << 20) - 2) + "b", "c"]


def test_parse_metrics_keeps_an_even_bounded_sample_of_a_long_log(monkeypatch):
    from launcher.observe import metrics

    monkeypatch.setattr(metrics, "MAX_KEPT", 100)
    lines = [f"epoch: {e} step: {s}, loss is {1 / (e * 1000 + s)}" for e in (1, 2) for s in range(1, 1001)]
    lines.insert(1500, "epoch: 2 accuracy: 0.5")
    lines += [json.dumps({"dlaunch": "metric", "step": i, "lr": 0.1, f"m{i}": 1}) for i in range(3000)]
    found = metrics.parse_metrics(lines)
    loss = found["loss"]
    assert loss.seen == 2000 and len(loss) <= 101
    assert loss[0] == (1, 1 / 1001) and loss[-1] == (2000, 1 / 3000)   # the first and the last line
    gaps = {b[0] - a[0] for a, b in zip(loss[:-2], loss[1:-1])}
    assert len(gaps) == 1, gaps   # evenly spread
    assert found["accuracy"] == [(2000, 0.5)] and found["accuracy"].seen == 1
    assert found["lr"].seen == 3000 and len(found["lr"]) <= 101 and found["lr"][-1] == (2999.0, 0.1)
    assert len(found) <= metrics.MAX_NAMES + 2   # a new name on every line: none after the cap (+ loss, accuracy)


def test_report_memory_stays_bounded_by_a_log_of_many_metric_lines(tmp_path):
    out = tmp_path / "runs"
    assert run_dlaunch("run", ROOT / "tests" / "programs" / "rank.py", "--ranks", "1", "--output-dir", out,
                       "--console", "none", cwd=tmp_path).returncode == 0
    with open(latest_run(out) / "rank_000" / "output.log", "a") as fh:
        for epoch in range(1, 7):
            fh.writelines(f"epoch: {epoch} step: {step}, loss is {1 / step:.6f}\n" for step in range(1, 100001))
    measured = subprocess.run([sys.executable, "-c", MEASURED_REPORT, str(latest_run(out)), "-o", "page.html"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    numbers = dict(item.split("=") for item in measured.stdout.strip().splitlines()[-1].split())
    assert numbers["code"] == "0", measured.stderr
    assert int(numbers["peak_kib"]) < 120 << 10, numbers   # 600,000 points held whole took over 200 MiB
    assert ">600000<" in (tmp_path / "page.html").read_text()   # every line counted in the ranks' table

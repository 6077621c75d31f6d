"""The launcher's loop while ranks run (launcher/execute/local/workers.py): what a wake-up costs, and exits found
without pidfds.

The loop wakes for every chunk of console output.  It used to ask every rank whether it was alive, twice,
and list the live ranks, on each wake-up: with 1,024 ranks and rank 0 printing 2,000 lines, 1.0 s of the
launcher's CPU instead of 0.44 s (a figure of benchmarks/results.md).  Counted here, not timed: a real launch
with ``RankProcess.alive`` wrapped to count how often it is asked.  How many wake-ups a launch has, and how many
periodic looks (every 0.5 s) it takes, depend on the machine's pace; so rank 0 prints its next line only once the
launcher has logged the one before (one wake-up each, on any machine), and the looks' questions are counted
apart from the wake-ups'.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LINES = 150
CHATTY = """#!/bin/sh
if [ "$RANK" = 0 ]; then exec "$CHATTY_PYTHON" -c "$CHATTY_RANK0"; else sleep 1.5; fi
"""
# rank 0: a line, then wait until the launcher has copied it into the rank's log (it read that chunk on a wake-up of
# its own), then the next line: every line is one more wake-up however busy the machine is
RANK0 = f"""
import os, time
log = os.path.join(os.environ["DLAUNCH_RANK_DIR"], "output.log")
logged = os.path.getsize(log)
for i in range({LINES}):
    line = f"line {{i}}\\n".encode()
    os.write(1, line)
    logged += len(line)
    while os.path.getsize(log) < logged:
        time.sleep(0.001)
"""


def launch_counting(tmp_path, ranks: int, program: str, prelude: str = "", env: dict | None = None) -> dict:
    """``dlaunch run`` in a child Python with ``alive`` and the loop's wake-ups counted; its exit code and counts:
    ``asked`` outside the periodic looks, ``looks`` (those that asked) and ``looked_at`` (their questions)."""
    code = textwrap.dedent(f"""
        import json, os
        {prelude}
        from launcher.execute.local import processes, workers as local
        from launcher.execute.local import watches
        asked = [0]
        wakeups = [0]
        looking = [False]
        looks = [0, 0]   # the periodic looks that asked (watches' tick) and the questions they asked
        alive = processes.RankProcess.alive.fget
        def counting(self):
            if looking[0]:
                looks[1] += 1
            else:
                asked[0] += 1
            return alive(self)
        processes.RankProcess.alive = property(counting)
        dispatch = local.LocalWorkers._dispatch
        def waking(self, *args, **kwargs):
            wakeups[0] += 1
            return dispatch(self, *args, **kwargs)
        local.LocalWorkers._dispatch = waking
        tick = watches.Watches.tick
        def ticking(self, *args, **kwargs):
            looking[0], before = True, looks[1]
            try:
                return tick(self, *args, **kwargs)
            finally:
                looking[0] = False
                looks[0] += looks[1] > before
        watches.Watches.tick = ticking
        from launcher.cli import main
        code = main(["run", "--no-python", {program!r}, "--ranks", "{ranks}", "--profile", "structure",
                     "--console", "0", "--output-dir", {str(tmp_path / 'runs')!r}])
        print(json.dumps({{"code": code, "asked": asked[0], "wakeups": wakeups[0], "looks": looks[0],
                          "looked_at": looks[1]}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, **(env or {}), "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_wake_up_does_not_ask_every_rank(tmp_path):
    script = tmp_path / "chatty.sh"
    script.write_text(CHATTY)
    script.chmod(0o755)
    result = launch_counting(tmp_path, 64, str(script), env={"CHATTY_PYTHON": sys.executable, "CHATTY_RANK0": RANK0})
    assert result["code"] == 0 and result["wakeups"] >= LINES, result   # each of rank 0's lines woke the loop
    # each rank is found ended once for good, and killed and collected at the end (6 questions a rank in all);
    # a wake-up asks a few more questions, never one per rank (that was 128 a wake-up: 19,200 and more here)
    assert result["asked"] <= 64 * 6 + result["wakeups"] * 4, result
    # a periodic look (the step reader's, every 0.5 s: how many depends on the machine's pace) asks each rank once
    assert result["looked_at"] <= 64 * result["looks"], result


def test_exits_are_polled_where_pidfds_cannot_be_had(tmp_path):
    """An old kernel (no pidfd_open): the exits are found by polling the started processes."""
    result = launch_counting(tmp_path, 8, "/bin/true", prelude="del os.pidfd_open")
    assert result["code"] == 0, result
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["exit_code"] == 0 and [r["exit_code"] for r in summary["ranks"]] == [0] * 8

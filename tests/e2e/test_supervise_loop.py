"""The launcher's loop while ranks run (launcher/execute/local/workers.py): what a wake-up costs, and exits found
without pidfds.

The loop wakes for every chunk of console output.  It used to ask every rank whether it was alive, twice,
and list the live ranks, on each wake-up: with 1,024 ranks and rank 0 printing 2,000 lines, 1.0 s of the
launcher's CPU instead of 0.44 s.  Counted here, not timed: a real launch with ``RankProcess.alive`` wrapped to
count how often it is asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHATTY = """#!/bin/sh
if [ "$RANK" = 0 ]; then i=0; while [ $i -lt 150 ]; do echo "line $i"; i=$((i+1)); sleep 0.004; done
else sleep 1.5; fi
"""


def launch_counting(tmp_path, ranks: int, program: str, prelude: str = "") -> dict:
    """``dlaunch run`` in a child Python with ``alive`` and the loop's wake-ups counted; its exit code and counts."""
    code = textwrap.dedent(f"""
        import json, os
        {prelude}
        from launcher.execute.local import processes, workers as local
        asked = [0]
        wakeups = [0]
        alive = processes.RankProcess.alive.fget
        def counting(self):
            asked[0] += 1
            return alive(self)
        processes.RankProcess.alive = property(counting)
        dispatch = local.LocalWorkers._dispatch
        def waking(self, *args, **kwargs):
            wakeups[0] += 1
            return dispatch(self, *args, **kwargs)
        local.LocalWorkers._dispatch = waking
        from launcher.cli import main
        code = main(["run", "--no-python", {program!r}, "--ranks", "{ranks}", "--profile", "structure",
                     "--console", "0", "--output-dir", {str(tmp_path / 'runs')!r}])
        print(json.dumps({{"code": code, "asked": asked[0], "wakeups": wakeups[0]}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_wake_up_does_not_ask_every_rank(tmp_path):
    script = tmp_path / "chatty.sh"
    script.write_text(CHATTY)
    script.chmod(0o755)
    result = launch_counting(tmp_path, 64, str(script))
    assert result["code"] == 0 and result["wakeups"] >= 50, result   # rank 0's lines woke the loop
    # each rank is found ended once for good; a wake-up asks a few more questions, never one per rank
    assert result["asked"] <= 64 * 4 + result["wakeups"] * 4, result


def test_exits_are_polled_where_pidfds_cannot_be_had(tmp_path):
    """An old kernel (no pidfd_open): the exits are found by polling the started processes."""
    result = launch_counting(tmp_path, 8, "/bin/true", prelude="del os.pidfd_open")
    assert result["code"] == 0, result
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["exit_code"] == 0 and [r["exit_code"] for r in summary["ranks"]] == [0] * 8

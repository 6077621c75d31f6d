"""The dying gasp in a job that all-reduces every step (issue 46, item 2): a rank raises, its peers' collective
breaks, and the snippet of docs/checkpoints.md saves the step they reached, so the restart loses no step.

Three gloo ranks save every 10 steps; rank 1 raises at step 25 of the first attempt. Without the gasp the
restart would resume after step 20 (4 steps trained again); with it every rank resumes after step 24."""

import json

from tests.launching import ROOT, latest_run, run_dlaunch

PROGRAM = str(ROOT / "tests" / "programs" / "gasp_collective.py")


def test_the_documented_snippet_saves_the_step_the_survivors_reached(tmp_path):
    done = run_dlaunch("run", PROGRAM, "--ranks", "3", "--output-dir", tmp_path / "runs", "--survivor-window", "20",
                       "--max-restarts", "1", cwd=tmp_path, timeout=240)
    run = latest_run(tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert "rank 1 raised an exception" in done.stderr
    assert {(run / f"first_step.{rank}.1").read_text() for rank in range(3)} == {"25"}, done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert [a["root_cause"]["rank"] for a in summary["attempts"] if a["root_cause"]] == [1]

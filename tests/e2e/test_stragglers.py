"""dlaunch status names a slow rank from the Megatron-style step lines of a real run."""

import json

from tests.launching import ROOT, latest_run, run_dlaunch


def test_status_names_the_rank_40_percent_slower(tmp_path):
    out = tmp_path / "runs"
    result = run_dlaunch("run", "--ranks", "4", "--output-dir", out, ROOT / "tests/programs/step_rank.py",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = latest_run(out)
    snap = json.loads(run_dlaunch("status", "--json", run_dir, cwd=tmp_path, timeout=30).stdout)
    slowest = snap["steps"]["ranks"][0]
    assert slowest["rank"] == 2 and slowest["flagged"] and abs(slowest["relative"] - 1 / 1.4) < 0.08
    assert [row["rank"] for row in snap["steps"]["ranks"] if row["flagged"]] == [2]
    text = run_dlaunch("status", run_dir, cwd=tmp_path, timeout=30).stdout
    assert "steps: slowest rank 2 (" in text and "1 rank(s) under 0.75" in text

"""Fast tests of the pure layers, in-process, nothing started: options -> plan -> environment, the SSH plan,
the results model and the run-directory reader. End-to-end tests elsewhere start real processes."""

import json

import pytest

from launcher.rundir.read import load_run

# ------------------------------------------------------------------ options -> plan -> environment


# ------------------------------------------------------------------ the SSH plan


# ------------------------------------------------------------------ results


@pytest.mark.parametrize("ranks", ["not a list", [1, None, "x"], [{"rank": "a", "rank_dir": "d"}], [{"rank": 0}]])
def test_a_damaged_plan_is_read_without_a_traceback(tmp_path, ranks):
    """A hand-edited or truncated plan.json: status, logs, report and prune read what they can."""

    from tests.launching import run_dlaunch

    run_dir = tmp_path / "runs" / "broken"
    run_dir.mkdir(parents=True)
    (run_dir / "plan.json").write_text(json.dumps({"run_id": "broken", "world_size": "many", "ranks": ranks}))
    assert load_run(str(run_dir)).ranks == []
    for argv in (["status", str(run_dir)], ["prune", "--keep", "0", "--output-dir", str(tmp_path / "runs")]):
        result = run_dlaunch(*argv, timeout=60)
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode in (0, 2), result.stderr

"""Warm restarts (--warm-restarts torch, execute/local/warm.py) with a real torch gloo job: the restarted ranks
run in interpreters started (and torch imported) before the failure, and train to the same losses as a cold
restart of the same job."""

import json

import pytest

from tests.launching import ROOT, run_dlaunch

pytest.importorskip("torch", reason="the warm-restart tests run a real torch job (the torch extra)")
TRAIN = str(ROOT / "tests" / "programs" / "warm_train.py")


def job(tmp_path, name, *flags):
    result = run_dlaunch("run", TRAIN, "--ranks", "2", "--max-restarts", "1", "--output-dir", tmp_path / "runs",
                         "--run-id", name, *flags, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "runs" / name
    return run_dir, json.loads((run_dir / "rank_000" / "losses.1.json").read_text())


def test_a_warm_restart_runs_in_a_ready_interpreter_and_trains_to_the_same_losses(tmp_path):
    cold_dir, cold = job(tmp_path, "cold")
    warm_dir, warm = job(tmp_path, "warm", "--warm-restarts", "torch")
    assert warm == cold and len(cold) == 4   # resumed from step 6, steps 7-10
    failed_at = float((warm_dir / "rank_001" / "failed_at").read_text())
    for rank in (0, 1):
        first = json.loads((warm_dir / f"rank_{rank:03d}" / "proc.0.json").read_text())
        second = json.loads((warm_dir / f"rank_{rank:03d}" / "proc.1.json").read_text())
        assert second["created"] < failed_at - 0.2, (second, failed_at)   # started before the failure: a standby
        assert second["pid"] != first["pid"] and second["name"] == "__main__" and second["argv"] == [TRAIN]
        cold_second = json.loads((cold_dir / f"rank_{rank:03d}" / "proc.1.json").read_text())
        assert cold_second["created"] > float((cold_dir / "rank_001" / "failed_at").read_text())
    assert "standby" not in (warm_dir / "rank_000" / "output.1.log").read_text()

"""The restart cycle's budget (execute/budget.py) with real launches: a crash loop stops with 93 ("do not
requeue") on every host, in the summary and the termination message; failures that move forward keep
restarting. Ranks are shells that save checkpoints the way launcher.checkpoint names them."""

import json

from launcher.contract import ExitCode
from tests.e2e.test_job_hosts import HOSTS, Job
from tests.launching import run_dlaunch, start_dlaunch

SAME_STEP = """
echo saved > "$DLAUNCH_CKPT_DIR/ckpt-1_30.pt"
[ "$RANK" = 1 ] && exit 3   # crashes at step 30, every attempt
sleep 30
"""

MOVING_ON = """
step=$((TORCHELASTIC_RESTART_COUNT + 1))
echo saved > "$DLAUNCH_CKPT_DIR/ckpt-1_$step.pt"   # each attempt gets one step further
[ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 5 ] && exit 3
exit 0
"""


def test_a_rank_that_crashes_at_the_same_step_stops_after_three_cycles_with_93(tmp_path):
    log = tmp_path / "termination-log"
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--max-restarts", "10", "--grace-period",
                         "1", "--termination-log", log, "--output-dir", tmp_path / "runs", "--run-id", "loop", "--",
                         "-c", SAME_STEP, cwd=tmp_path)
    assert result.returncode == ExitCode.NO_PROGRESS, result.stderr
    assert result.stderr.count("restarting all ranks") == 3   # attempt 0 made step 30; 1, 2, 3 made nothing new
    assert ("not restarting: 3 attempt(s) in a row failed without a new complete checkpoint (still ckpt-1_30; "
            "--restarts-without-progress 3)") in result.stderr
    summary = json.loads((tmp_path / "runs" / "loop" / "summary.json").read_text())
    assert summary["exit_code"] == 93 and len(summary["attempts"]) == 4
    assert summary["no_restart"].startswith("3 attempt(s) in a row failed")
    message = log.read_text()
    assert "restarts stopped: 3 attempt(s) in a row" in message and "exit code 93: do not requeue" in message


def test_failures_that_move_forward_keep_restarting_to_the_end(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--max-restarts", "10", "--grace-period",
                         "1", "--restarts-without-progress", "1", "--output-dir", tmp_path / "runs", "--", "-c",
                         MOVING_ON, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("restarting all ranks") == 5


def test_a_crash_loop_without_checkpoints_stops_at_the_failure_rate(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "1", "--max-restarts", "10",
                         "--max-failures-per-hour", "2", "--output-dir", tmp_path / "runs", "--", "-c", "exit 4",
                         cwd=tmp_path)
    assert result.returncode == ExitCode.NO_PROGRESS, result.stderr
    assert "not restarting: 3 failures within an hour (--max-failures-per-hour 2): a crash loop" in result.stderr


def test_a_crash_loop_across_two_hosts_ends_with_93_on_every_host(tmp_path):
    job = Job(tmp_path, 2, 29765, "hostloop")
    try:
        for index in (0, 1):
            job.procs[index] = start_dlaunch(
                "cluster", "--no-python", "/bin/sh", "--rank-table", job.table, "--rank-start", index, "--run-id",
                "hostloop", "--master-port", job.port, "--profile", "structure", "--grace-period", "1",
                *job.timeouts, "--max-restarts", "10", "--restarts-without-progress", "2", "--", "-c", SAME_STEP,
                cwd=job.cwd(index))
        for index in (0, 1):
            code, stderr = job.wait(index, timeout=60)
            assert code == ExitCode.NO_PROGRESS, stderr
            assert "not restarting the job: 2 attempt(s) in a row failed without a new complete checkpoint" in stderr
            summary = job.summary(index)
            assert summary["exit_code"] == 93 and len(summary["attempts"]) == 3, summary
            assert summary["job"]["exit_code"] == 93 and summary["job"]["root_cause"]["host"] == HOSTS[1]
    finally:
        job.cleanup()

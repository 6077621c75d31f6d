"""The restart budget's two rules: progress between failures, and the failure rate."""

from launcher.execute.budget import HOUR, RestartBudget


def test_attempts_that_end_where_they_began_stop_the_restarts_after_k_in_a_row():
    budget = RestartBudget(without_progress=3)
    assert budget.refuses("ckpt-1_30", 0) is None          # attempt 0 saved up to step 30: progress
    assert budget.refuses("ckpt-1_30", 1) is None          # crashed at 30 again: 1 without progress
    assert budget.refuses("ckpt-1_30", 2) is None          # 2
    why = budget.refuses("ckpt-1_30", 3)                   # 3 in a row: stop
    assert why.startswith("3 attempt(s) in a row failed without a new complete checkpoint (still ckpt-1_30")


def test_failures_that_move_forward_keep_restarting():
    budget = RestartBudget(without_progress=2)
    for step in range(1, 20):
        assert budget.refuses(f"ckpt-1_{step}", step) is None
    assert budget.refuses("ckpt-1_19", 20) is None and budget.refuses("ckpt-1_19", 21) is not None


def test_a_job_that_saves_nothing_shows_no_progress_and_is_not_stopped_for_it():
    budget = RestartBudget(without_progress=1)
    assert all(budget.refuses(None, t) is None for t in range(50))
    resumed = RestartBudget(without_progress=1, step="ckpt-2_0")   # started with --resume: measured from there
    assert resumed.refuses("ckpt-2_0", 0) is not None


def test_a_crash_loop_is_counted_within_an_hour():
    budget = RestartBudget(without_progress=0, per_hour=2)
    assert budget.refuses(None, 0) is None and budget.refuses(None, 10) is None
    assert budget.refuses(None, 20).startswith("3 failures within an hour (--max-failures-per-hour 2)")
    spaced = RestartBudget(without_progress=0, per_hour=2)
    assert all(spaced.refuses(None, n * HOUR * 0.6) is None for n in range(10))   # one every 36 minutes

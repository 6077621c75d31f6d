"""--hang-learn judges a rank by its own steps and the job's progress, never by another rank's lines (issue 47).

nanoGPT, HF Trainer and Lightning say their steps on rank 0 only, Megatron on the last rank: a budget learned
from those lines must not call a rank that prints nothing hung while the job steps. tests/programs/
lockstep_rank.py with ``--print-rank``: gloo ranks all-reducing every 0.2 s, one of them printing nanoGPT's
``iter N: loss X, time Y ms`` line, the others nothing at all.
"""

import re

from tests.launching import ROOT, run_dlaunch

PROGRAM = str(ROOT / "tests" / "programs" / "lockstep_rank.py")


def test_a_rank_that_prints_no_step_is_not_called_hung_while_the_job_steps(tmp_path):
    """2 ranks stepping every 0.2 s for 12 s, only rank 0 printing: the budget is learned from rank 0 (about
    1 s) and rank 1, silent all along, is not called hung (it was: exit 124 a second after the budget applied)."""
    result = run_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", tmp_path / "runs", "--hang-learn",
                         "--hang-timeout", "60", "--", "--steps", "60", "--print-rank", "0", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "hang timeout learned: " in result.stderr and " hung" not in result.stderr, result.stderr


def test_a_silent_rank_that_stops_is_still_found_by_the_one_that_prints(tmp_path):
    """Rank 0 prints nothing and stops at step 40 outside any collective; rank 1, which prints its steps,
    waits for it in all_reduce: rank 1's silence trips the learned budget and the stacks name rank 0."""
    stopped = tmp_path / "stopped"
    result = run_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", tmp_path / "runs", "--hang-learn",
                         "--hang-timeout", "60", "--", "--steps", "200", "--print-rank", "1", "--stop-rank", "0",
                         "--stop-at", "40", "--stopped-file", stopped, cwd=tmp_path, timeout=120)
    assert result.returncode == 124, result.stderr
    assert re.search(r"rank 0 hung: .*it stopped first: its stack is in no collective", result.stderr), \
        result.stderr


def test_the_interpreters_teardown_after_the_last_step_is_no_hang(tmp_path):
    """After its last step a torch rank spends seconds in its interpreter's teardown (torch's destructors, gloo's
    threads; 1.8 s seen on this machine after atexit), silent, before any rank has exited: that is the job
    ending, not a hang (it was: exit 124 on the printing rank, whose learned budget was about 1 s)."""
    result = run_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", tmp_path / "runs", "--hang-learn",
                         "--hang-timeout", "60", "--", "--steps", "40", "--print-rank", "0", "--teardown-seconds",
                         "5", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "hang timeout learned: " in result.stderr and " hung" not in result.stderr, result.stderr


def test_a_ddp_job_whose_printing_rank_stops_has_that_rank_named(tmp_path):
    """tests/programs/megatron_shaped.py: DDP, the iteration line on the last rank only. Rank 1, the one that
    prints, stops at step 25 outside any collective; rank 0, which prints nothing, waits for it inside backward
    (DDP's reducer: no torch.distributed frame). Rank 1 is named from the stacks (rank 0 was, for its older last
    sign of life: it prints nothing). The bound is 20 s: a loaded machine that stalls the job while it learns
    teaches a budget of 5 x that stall (60 s took a minute in the suite); the naming is what is tested."""
    result = run_dlaunch("run", ROOT / "tests" / "programs" / "megatron_shaped.py", "--ranks", "2", "--output-dir",
                         tmp_path / "runs", "--hang-learn", "--hang-timeout", "20", "--", "--train-iters", "200",
                         "--hidden", "128", "--stop-rank", "1", "--stop-at", "25", "--stopped-file",
                         tmp_path / "stopped", cwd=tmp_path, timeout=120)
    assert result.returncode == 124, result.stderr
    assert re.search(r"rank 1 hung: .*it stopped first: its stack is in no collective", result.stderr), \
        result.stderr


def test_a_job_whose_steps_are_a_progress_bar_learns_its_budget(tmp_path):
    """HF Trainer draws a tqdm bar on rank 0, one line redrawn after carriage returns until training ends: the
    bar's steps are read as it is drawn, so the budget is learned while the job runs (it was not: nothing
    learned, the hang timeout stayed --hang-timeout)."""
    result = run_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", tmp_path / "runs", "--hang-learn",
                         "--hang-timeout", "60", "--", "--steps", "40", "--print-rank", "0", "--bar", cwd=tmp_path,
                         timeout=120)
    assert result.returncode == 0, result.stderr
    assert "hang timeout learned: " in result.stderr and " hung" not in result.stderr, result.stderr

"""Step lines recognised with no code change, and the straggler scores made from them."""

import random

import pytest

from launcher.base.steps import StepLine, UserPattern, step_line
from launcher.base.stragglers import RankSteps, read_steps, scores, straggler_line

MEGATRON = (" [2025-04-13 23:41:12] iteration       10/    1000 | consumed samples:          160 | elapsed time per "
            "iteration (ms): 1147.6 | learning rate: 0.000000E+00 | global batch size:    16 | loss scale: 8388608.0 |")
MINDFORMERS = ("2025-04-07 15:34:29,173 - [mindformers/core/callback/callback.py:529] - INFO - { Epoch:[  1/  2], "
               "step:[    2/   19], loss: 10.633, per_step_time: 1752ms, lr: 1e-05, overflow cond: False")
MINDFORMERS_NEW = ("{ step:[    2/   10], loss:  11.755612, per_step_time:    710ms, load_balancing_loss:   1.106543, "
                   "lr: 1.000000e-05 }")
TIME_MONITOR = "epoch time: 12345.678 ms, per step time: 123.457 ms"


@pytest.mark.parametrize("line, expected", [
    (MEGATRON, StepLine(1147.6, 10)),
    (MINDFORMERS, StepLine(1752.0, 2)),
    (MINDFORMERS_NEW, StepLine(710.0, 2)),
    (TIME_MONITOR, StepLine(123.457)),
    ("epoch: 2 step: 40, loss is 1.234", None),
    ("elapsed time per iteration (ms): nan |", None),
    ("per_step_time: soon", None),
    ("", None),
])
def test_step_lines_of_the_frameworks(line, expected):
    assert step_line(line) == expected


def test_a_users_pattern_in_milliseconds_or_seconds_with_its_literal_filter():
    ms = UserPattern.parse(r"step (?P<step>\d+) took (?P<ms>[\d.]+) ms", literal="took")
    assert step_line("step 7 took 250.5 ms", ms) == StepLine(250.5, 7)
    seconds = UserPattern.parse(r"dt=(?P<s>[\d.]+)s")
    assert step_line("it 3 dt=0.25s", seconds) == StepLine(250.0)
    assert step_line("nothing here", ms) is None
    assert step_line(MEGATRON, ms) == StepLine(1147.6, 10)   # the frameworks' lines still count
    filtered = UserPattern.parse(r"(?P<ms>\d+)", literal="STEP")
    assert step_line("12 apples", filtered) is None        # the regex never ran: no literal in the line
    for bad in (r"(?P<time>\d+)", "(unclosed"):
        with pytest.raises(ValueError):
            UserPattern.parse(bad)


def test_a_long_line_without_a_step_costs_only_substring_tests():
    line = "x" * 60000 + " " * 4000
    assert step_line(line) is None


def _ranks(times_of_rank, hosts=1):
    ranks = []
    for rank, times in enumerate(times_of_rank):
        steps = RankSteps(rank, f"host{rank * hosts // len(times_of_rank)}")
        for step, ms in enumerate(times, 1):
            steps.add(ms, step)
        ranks.append(steps)
    return ranks


def test_one_rank_of_8_with_40_percent_extra_time_is_flagged_near_0_71():
    rng = random.Random(37)
    times = [[100 * (1.4 if rank == 5 else 1.0) * rng.uniform(0.95, 1.05) for _ in range(200)] for rank in range(8)]
    report = scores(_ranks(times, hosts=2))
    slowest = report["ranks"][0]
    assert slowest["rank"] == 5 and slowest["flagged"]
    assert slowest["relative"] == pytest.approx(1 / 1.4, abs=0.03)
    assert [row["rank"] for row in report["ranks"] if row["flagged"]] == [5]
    assert report["hosts"][0]["host"] == "host1"          # ranks 4-7: rank 5's host, pooled
    line = straggler_line(report)
    assert line.startswith("steps: slowest rank 5 (") and "flagged" in line and "hosts host1" in line


def test_5_percent_jitter_on_every_rank_flags_none_over_200_steps():
    rng = random.Random(5)
    report = scores(_ranks([[100 * rng.uniform(0.95, 1.05) for _ in range(200)] for _ in range(8)]))
    assert not any(row["flagged"] for row in report["ranks"] + report["hosts"])
    assert min(row["relative"] for row in report["ranks"]) > 0.9
    assert "none flagged" in straggler_line(report)


def test_a_rank_that_got_slower_than_itself_has_a_low_individual_score():
    times = [[100.0] * 50 for _ in range(3)]
    times[2] = [50.0] * 40 + [100.0] * 10      # fastest median, but twice as slow now as it was
    report = scores(_ranks(times))
    row = next(r for r in report["ranks"] if r["rank"] == 2)
    assert row["individual"] == 0.5 and row["relative"] == 1.0 and row["flagged"]


def test_no_step_times_no_scores():
    assert scores([RankSteps(0, "h")]) is None and straggler_line(None) is None


def test_read_steps_from_log_lines():
    steps = read_steps(3, "h", ["hello", MEGATRON, TIME_MONITOR])
    assert list(steps.times) == [1147.6, 123.457] and steps.last_step == 10


def test_status_refuses_a_step_pattern_without_a_time_group(tmp_path, capsys):
    from launcher import cli

    assert cli.main(["status", str(tmp_path), "--step-pattern", r"(?P<t>\d+)"]) == 2
    assert "named group" in capsys.readouterr().err

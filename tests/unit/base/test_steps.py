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


# Real tqdm output, captured once into a file (stdout and stderr, as a rank's log holds them) and pasted here:
# tqdm 4.70.1 drawing HF Trainer's bars as transformers' ProgressCallback makes them (a training bar
# tqdm(total=max_steps, dynamic_ncols=True), an evaluation's tqdm(total=4, leave=False, dynamic_ncols=True)
# under it, the logs written with bar.write(str(logs))), 1.5 s for the first step and 0.2 s for the others.
HF_TRAINER_LOG = (
    "\r  0%|          | 0/6 [00:00<?, ?it/s]\r 17%|█▋        | 1/6 [00:01<00:07,  1.50s/it]\r 33%|███▎      | 2/6 "
    "[00:01<00:02,  1.36it/s]\r 50%|█████     | 3/6 [00:01<00:01,  2.03it/s]\n\r  0%|          | 0/4 [00:00<?, "
    "?it/s]\x1b[A\n\r 25%|██▌       | 1/4 [00:00<00:00,  6.66it/s]\x1b[A\n\r 50%|█████     | 2/4 [00:00<00:00,  "
    "6.65it/s]\x1b[A\n\r 75%|███████▌  | 3/4 [00:00<00:00,  6.60it/s]\x1b[A\n\r100%|██████████| 4/4 [00:00<00:00,  "
    "6.52it/s]\x1b[A\n\r                                             \x1b[A\r"
    "                                             \r{'eval_loss': 0.4, 'eval_runtime': 0.6, "
    "'eval_samples_per_second': 6.6, 'eval_steps_per_second': 6.6, "
    "'epoch': 0.5}\n\r 50%|█████     | 3/6 [00:02<00:01,  2.03it/s]\r 67%|██████▋   | 4/6 [00:02<00:01,  "
    "1.62it/s]\r 83%|████████▎ | 5/6 [00:02<00:00,  2.14it/s]\r100%|██████████| 6/6 [00:03<00:00,  2.65it/s]\r100%|"
    "██████████| 6/6 [00:03<00:00,  1.92it/s]\n")
# Lightning 2.6.6's TQDMProgressBar, from a real Trainer.fit (16 batches of 0.12 s, a validation after each
# epoch) with its output in a file: the ends of an epoch's line, and a validation bar's lines.
LIGHTNING_LOG = (
    "\rSanity Checking: |          | 0/? [00:00<?, ?it/s]\rSanity Checking DataLoader 0:   0%|          | 0/2 "
    "[00:00<?, ?it/s]\rSanity Checking DataLoader 0:  50%|█████     | 1/2 [00:00<00:00, 13.04it/s]\r"
    "Training: |          | 0/? [00:00<?, ?it/s]\rEpoch 0:   0%|          | 0/16 [00:00<?, ?it/s]\rEpoch 0:   "
    "6%|▋         | 1/16 [00:00<00:02,  6.02it/s]\rEpoch 0:   6%|▋         | 1/16 [00:00<00:02,  6.01it/s, "
    "loss=0.869]\rEpoch 0: 100%|██████████| 16/16 [00:02<00:00,  7.68it/s, loss=0.185]\rEpoch 0: 100%|██████████| "
    "16/16 [00:02<00:00,  7.68it/s, loss=0.409]\n"
    "\rValidation: |          | 0/? [00:00<?, ?it/s]\x1b[A\n"
    "\rValidation DataLoader 0:  25%|██▌       | 1/4 [00:00<00:00, 34.56it/s]\x1b[A\n"
    "\rValidation DataLoader 0: 100%|██████████| 4/4 [00:00<00:00, 35.17it/s]\x1b[A\n"
    "\r                                                                      \x1b[A\rEpoch 0: 100%|██████████| "
    "16/16 [00:02<00:00,  7.27it/s, loss=0.409]\rEpoch 0:   0%|          | 0/16 [00:00<?, ?it/s, loss=0.409]      "
    "   \rEpoch 1:   0%|          | 0/16 [00:00<?, ?it/s, loss=0.409]\rEpoch 1:   6%|▋         | 1/16 "
    "[00:00<00:01,  7.52it/s, loss=0.409]\n"
    "\r                                                                      \x1b[A\rEpoch 1: 100%|██████████| "
    "16/16 [00:02<00:00,  7.23it/s, loss=0.411]`Trainer.fit` stopped: `max_epochs=2` reached.\n")


def _times(lines):
    return [(found.step, round(found.ms, 1)) for line in lines if (found := step_line(line))]


def test_hf_trainers_bar_read_as_a_log_reader_splits_it():
    """tail_lines (status, the report) splits at every \\r too: each redraw of the training bar is a step time;
    the evaluation's bar under it (ESC[A) and the logged dicts are none."""
    assert _times(HF_TRAINER_LOG.splitlines()) == [
        (1, 1500.0), (2, 735.3), (3, 492.6), (3, 492.6), (4, 617.3), (5, 467.3), (6, 377.4), (6, 520.8)]


def test_a_line_of_redraws_is_read_by_its_last_segment():
    physical = HF_TRAINER_LOG.split("\n")
    assert _times(physical[:1]) == [(3, 492.6)]          # not the first redraw's 1.50s/it
    assert _times(physical[1:6]) == []                    # the evaluation's bar, drawn under the training bar
    assert step_line(physical[6]) is None                 # its last segment is the eval dict
    assert _times(physical[7:]) == [(6, 520.8)]           # tqdm's close: the whole run's mean rate
    assert step_line("\r 50%|█████     | 3/6 [00:01<00:01,  2.03it/s]\r") == StepLine(1000 / 2.03, 3)  # ends in \r
    lightning = LIGHTNING_LOG.split("\n")
    assert _times(lightning) == [(16, 130.2), (1, 133.0), (16, 138.3)]   # the epochs' bars, not validation's


def test_lightnings_bar_read_redraw_by_redraw():
    assert _times(LIGHTNING_LOG.splitlines()) == [
        (1, 166.1), (1, 166.4), (16, 130.2), (16, 130.2), (16, 137.6), (1, 133.0), (16, 138.3)]


@pytest.mark.parametrize("line, expected", [
    (" 45%|████▌     | 45/100 [00:12<00:15,  3.61it/s]", StepLine(1000 / 3.61, 45)),
    ("Epoch 0:  45%|████▌     | 45/100 [00:12<00:15,  3.61it/s, v_num=0, loss=0.5]", StepLine(1000 / 3.61, 45)),
    ("  5%|▌         | 1/20 [00:01<00:23,  1.23s/it]", StepLine(1230.0, 1)),
    ("Epoch 3: |          | 45/? [1:02:03<?,  0.50it/s, v_num=1]", StepLine(2000.0, 45)),   # no total
    ("45it [00:12,  3.61it/s]", StepLine(1000 / 3.61, 45)),                                  # plain, no total
    (" 45%|####5     | 45/100 [00:12<00:15, 1234.56it/s]", StepLine(1000 / 1234.56, 45)),   # ascii bar
    ("  0%|          | 0/100 [00:00<?, ?it/s]", None),                                     # no rate yet
    ("Epoch 0:   0%|          | 0/16 [00:00<?, ?it/s, loss=0.409]", None),
    ("Epoch 9: 100%|██████████| 16/16 [03:20<00:00,  0.00it/s]", None),                     # no rate to invert
    ("Loading checkpoint shards:  50%|█████     | 1/2 [00:05<00:05,  5.10s/it]", None),    # not training
    ("Validation DataLoader 0:  25%|██▌       | 1/4 [00:00<00:00, 34.56it/s]", None),
    ("Map:  45%|████▌     | 450/1000 [00:01<00:01, 400.00 examples/s]", None),
    ("{'loss': 0.5, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.33}", None),      # HF's logged dicts
    ("{'train_runtime': 5.1, 'train_samples_per_second': 47.0, 'train_steps_per_second': 5.88, 'train_loss': "
     "0.5, 'epoch': 1.0}", None),
    ("it went at 3.61it/s", None),
])
def test_tqdm_bars_of_hf_trainer_and_lightning(line, expected):
    found = step_line(line)
    assert found == expected if expected is None or found is None else \
        (found.step, round(found.ms, 6)) == (expected.step, round(expected.ms, 6))


def test_a_long_line_of_rates_and_carriage_returns_costs_linear_time():
    import time

    lines = ["\r" * 60000 + "x", " 1%|" + "█" * 60000 + "| 1/9 [00:01<00:01, 1.0it/s]",
             "Epoch 1" + "1" * 60000 + "it/s", "|" * 60000 + "s/it", " " * 60000 + "1it [" + "1:" * 2000 + "s/it"]
    start = time.process_time()   # this process's CPU, not the wall clock: a busy machine does not stretch it
    assert [step_line(line) for line in lines] == [None] * len(lines)
    assert time.process_time() - start < 0.5   # measured: 0.006 s of CPU (0.026 s wall) on the 2-core VM


def test_a_progress_bar_drawn_again_counts_its_step_once():
    bar = "Epoch 0:  45%|####5     | 45/100 [00:12<00:15,  3.61it/s, v_num=0]"
    steps = read_steps(0, "h", [bar, bar, bar.replace("45/100", "46/100")])
    assert steps.last_step == 46 and len(steps.times) == 2

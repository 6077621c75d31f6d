"""The loss the frameworks print, charted with no code change (issue 47): nanoGPT, HF Trainer, Lightning,
Megatron, MindFormers, beside MindSpore's LossMonitor (the seeds' form)."""

from launcher.observe.metrics import parse_metrics


def _points(lines, name="loss"):
    return [(x, round(value, 4)) for x, value in parse_metrics(lines)[name]]


def test_nanogpts_iteration_and_evaluation_lines():
    lines = ["step 0: train loss 10.9000, val loss 10.9500", "iter 0: loss 10.9876, time 20412.55ms, mfu -100.00%",
             "iter 10: loss 3.2100, time 98.12ms, mfu 1.23%", "iter 20: loss 2.5375, time 97.01ms, mfu 1.24%",
             "step 250: train loss 1.9000, val loss 2.0100"]
    assert _points(lines) == [(0, 10.9876), (10, 3.21), (20, 2.5375)]
    assert _points(lines, "val loss") == [(0, 10.95), (250, 2.01)]


def test_hf_trainers_dicts_at_the_bars_count_and_its_bar_redraws():
    bar = " {p}%|█         | {n}/40 [00:0{n}<00:30,  1.00it/s]"
    lines = ["\r".join(bar.format(p=n * 2, n=n) for n in range(1, 11)) + "\r" + " " * 20 + "\r"
             + "{'loss': 2.3456, 'grad_norm': 1.23, 'learning_rate': 4.5e-05, 'epoch': 0.25}",
             "\r".join(bar.format(p=n * 2, n=n) for n in range(11, 21)) + "\r"
             + "{'loss': '1.9876', 'learning_rate': '4e-05', 'epoch': 0.5}",
             "{'eval_loss': 2.01, 'eval_runtime': 0.51, 'eval_samples_per_second': 98.0, 'epoch': 0.5}",
             "{'loss': 1.5, 'step': 30, 'epoch': 0.75}",
             "{'train_runtime': 5.1, 'train_samples_per_second': 47.0, 'train_loss': 2.0, 'epoch': 1.0}"]
    found = parse_metrics(lines)
    assert _points(lines) == [(10, 2.3456), (20, 1.9876), (30, 1.5)]
    assert _points(lines, "eval_loss") == [(20, 2.01)]
    assert _points(lines, "learning_rate") == [(10, 0.0), (20, 0.0)] and list(found["grad_norm"]) == [(10, 1.23)]
    assert not {"epoch", "eval_runtime", "eval_samples_per_second", "train_runtime", "total_flos"} & set(found)


def test_lightnings_bar_postfix_once_per_step_over_epochs():
    bar = "Epoch {e}:  {p}%|█    | {n}/16 [00:01<00:02, 7.00it/s, v_num=0, train_loss={loss}]"
    line = "\r".join(bar.format(e=e, p=n * 6, n=n, loss=f"{2 - e - n / 100:.3f}") for e in (0, 1)
                     for n in (1, 1, 2, 16))
    assert _points([line]) == [(1, 1.99), (2, 1.98), (16, 1.84), (17, 0.99), (18, 0.98), (32, 0.84)]


def test_megatron_and_mindformers_losses():
    megatron = (" [2025-04-13 23:41:12] iteration       10/    1000 | consumed samples:          160 | elapsed time "
                "per iteration (ms): 1147.6 | learning rate: 1.0E-05 | global batch size:    16 | "
                "lm loss: 1.234567E+00 |")
    mindformers = ("{ Epoch:[  2/  2], step:[    2/   19], loss: 10.633, per_step_time: 1752ms, lr: 1e-05, "
                   "overflow cond: False")
    assert _points([megatron]) == [(10, 1.2346)]
    assert _points([mindformers]) == [(21, 10.633)]
    assert _points(["{ step:[    3/   10], loss:  11.755612, per_step_time:    710ms }"]) == [(3, 11.7556)]


def test_mindsporess_loss_monitor_still_reads_as_before():
    assert _points(["epoch: 1 step: 5, loss is 2.3", "epoch: 2 step: 5, loss is 1.1"]) == [(5, 2.3), (10, 1.1)]

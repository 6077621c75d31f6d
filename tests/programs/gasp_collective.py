"""A gloo rank that all-reduces every step and saves the way docs/checkpoints.md's "dying gasp with
collectives" snippet says, for tests/e2e/test_gasp_collective.py.

Every rank saves every SAVE_EVERY steps (replicated: data parallel), resumes from ``checkpoint.load()``, and
writes the first step of each attempt to ``first_step.<rank>.<attempt>``; rank FAIL_RANK raises at step FAIL_AT
in the first attempt (writing the time to ``raised_at`` first; each survivor writes when its notice was written
to ``notice_at.<rank>.<attempt>``). The loop is the documented one: a step's collective that breaks because a peer
failed saves the last step done, once dlaunch's notice is there.
"""

import os
import pathlib
import time

import torch
import torch.distributed as dist

from launcher import checkpoint

STEPS, SAVE_EVERY = 40, 10
FAIL_RANK, FAIL_AT = int(os.environ.get("FAIL_RANK", "1")), int(os.environ.get("FAIL_AT", "25"))
run_dir = pathlib.Path(os.environ["DLAUNCH_RUN_DIR"])
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]

dist.init_process_group("gloo")
rank = dist.get_rank()
resumed = checkpoint.load()
weights = resumed["weights"] if resumed else torch.zeros(4)
start = resumed["step"] + 1 if resumed else 1
(run_dir / f"first_step.{rank}.{attempt}").write_text(str(start))


def train_step(step):
    if rank == FAIL_RANK and step == FAIL_AT and attempt == "0":
        (run_dir / "raised_at").write_text(repr(time.time()))   # for the raise -> notice latency
        raise RuntimeError(f"rank {rank} broke at step {step}")
    grad = torch.ones(4)
    dist.all_reduce(grad)
    weights.add_(grad)


def state(step):
    return {"weights": weights.clone(), "step": step}


# --- the snippet of docs/checkpoints.md ("With collectives"), as printed there -------------------------
for step in range(start, STEPS + 1):
    try:
        train_step(step)   # its all_reduce breaks when a peer fails
    except Exception:
        if checkpoint.save_on_notice(state(step - 1), 0, step - 1, replicated=True, wait=5):   # the last step done
            break
        raise
    if step % SAVE_EVERY == 0:
        checkpoint.save(state(step), 0, step, replicated=True)
    if checkpoint.save_on_notice(state(step), 0, step, replicated=True):   # a peer failed between two steps
        break
# ------------------------------------------------------------------------------------------------------------
else:
    dist.destroy_process_group()
told = checkpoint.notice()
if told:   # when dlaunch wrote this rank's notice, for the raise -> notice latency
    (run_dir / f"notice_at.{rank}.{attempt}").write_text(repr(told["at"]))

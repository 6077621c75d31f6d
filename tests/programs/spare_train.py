"""A training loop for the spare-host tests (tests/e2e/test_spares.py): a gloo all_reduce every step, each
rank saving its step checkpoint as launcher.checkpoint names them (``ckpt-0_N.pt``, written then renamed),
and resuming from DLAUNCH_RESUME_FROM / DLAUNCH_RESUME_STEP when dlaunch gives them.

Usage: spare_train.py STEPS SECONDS_PER_STEP. Each step appends {"step", "time", "value", "resumed"} to
``steps.jsonl`` in DLAUNCH_RANK_DIR (the rank's directory on the host that runs it) and prints
``step N rank R world W attempt A`` (benchmarks/bench_spares.py reads those). ``value`` is the sum of every
all_reduce so far: a rank that resumed from the right file ends with the same value as one that never
stopped (STEPS x WORLD_SIZE). Under another launcher (torchrun) its files go to $SPARE_TRAIN_DIR/rank_N.
With SPARE_TRAIN_MEMORY=1 each step is saved with ``checkpoint.save(..., memory=True)`` instead (dlaunch
persists every --memory-persist-every-th) and resumed with ``checkpoint.load()`` (tests/e2e/test_buddy_copy.py).
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

steps, pause = int(sys.argv[1]), float(sys.argv[2])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
own = os.path.join(os.environ.get("SPARE_TRAIN_DIR", "."), f"rank_{rank}")
ckpt_dir = os.environ.get("DLAUNCH_CKPT_DIR") or own
rank_dir = os.environ.get("DLAUNCH_RANK_DIR") or own
os.makedirs(ckpt_dir, exist_ok=True)
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
resumed = os.environ.get("DLAUNCH_RESUME_STEP")
memory = os.environ.get("SPARE_TRAIN_MEMORY") == "1"
if memory:
    from launcher import checkpoint
value = torch.zeros(1)
first = 1
if resumed:
    if memory:
        state = checkpoint.load()
    else:
        state = torch.load(os.environ["DLAUNCH_RESUME_FROM"])
    value, first = state["value"], state["step"] + 1
with open(os.path.join(rank_dir, "steps.jsonl"), "a") as log:
    for step in range(first, steps + 1):
        total = torch.ones(1)
        dist.all_reduce(total)
        value += total
        if memory:
            checkpoint.save({"step": step, "value": value.clone()}, 0, step, memory=True)
        else:
            path = os.path.join(ckpt_dir, f"ckpt-0_{step}.pt")
            torch.save({"step": step, "value": value}, path + ".part")
            os.replace(path + ".part", path)
        log.write(json.dumps({"step": step, "time": time.time(), "value": value.item(), "resumed": resumed}) + "\n")
        log.flush()
        print(f"step {step} rank {rank} world {world} attempt {attempt}", flush=True)
        time.sleep(pause)
dist.destroy_process_group()

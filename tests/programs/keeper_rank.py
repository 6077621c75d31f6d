"""A gloo rank that saves into dlaunch's memory tier every step, for the memory tier's e2e tests.

Each step all-reduces (the ranks go in lockstep) and saves ``{"step": N, "rank": R}`` into memory
(``DLAUNCH_MEMORY_SLOTS``), and ``ckpt.pt`` into ``DLAUNCH_MEMORY_DIR`` as a script's own ``torch.save`` would;
``--disk-at`` steps also go to disk (``checkpoint.save``). After its save of step ``--reach`` in the first
attempt, every rank writes ``reached.<rank>`` (its pid) into its rank directory and waits there for the test to
kill it (or dlaunch). A restarted rank says where it resumed from: ``resumed step S from FILE (holds H)``.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

from launcher import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--reach", type=int, default=3)
parser.add_argument("--disk-at", type=int, nargs="*", default=[1])
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
start = 1
if os.environ.get("DLAUNCH_RESUME_FROM"):
    held = torch.load(os.environ["DLAUNCH_RESUME_FROM"])
    assert held["rank"] == rank, held
    print(f"resumed step {os.environ['DLAUNCH_RESUME_STEP']} from {os.environ['DLAUNCH_RESUME_FROM']} "
          f"(holds {held['step']})", flush=True)
    start = held["step"] + 1


for step in range(start, args.steps + 1):
    value = torch.ones(1)
    dist.all_reduce(value)
    state = {"step": step, "rank": rank, "w": torch.full((256,), float(step))}
    checkpoint.save(state, 0, step, memory=True)
    torch.save(state, os.path.join(os.environ["DLAUNCH_MEMORY_DIR"], "ckpt.pt"))
    if step in args.disk_at:
        checkpoint.save(state, 0, step)
    print(f"step {step}", flush=True)
    if first and step == args.reach:
        with open(os.path.join(os.environ["DLAUNCH_RANK_DIR"], f"reached.{rank}"), "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(600)
    time.sleep(0.02)
dist.destroy_process_group()

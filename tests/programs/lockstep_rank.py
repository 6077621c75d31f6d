"""A gloo rank of a job that all-reduces every ``--interval`` seconds, for the hang watch's e2e tests.

Every rank reports its step (``heartbeat.beat(step=N)``) and prints a line per step; at ``--save-at`` every
rank spends ``--save-seconds`` inside ``heartbeat.phase("checkpoint")`` (each its own shard, as DCP does);
rank ``--stop-rank`` stops at ``--stop-at`` (it sleeps, outside any collective, after writing the time it
stopped into ``--stopped-file``), the others wait for it in their next all_reduce.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

from launcher import heartbeat

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--interval", type=float, default=0.2)
parser.add_argument("--save-at", type=int, default=-1)
parser.add_argument("--save-seconds", type=float, default=3.0)
parser.add_argument("--stop-rank", type=int, default=-1)
parser.add_argument("--stop-at", type=int, default=-1)
parser.add_argument("--stopped-file", default="")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.zeros(1)
for step in range(1, args.steps + 1):
    if rank == args.stop_rank and step == args.stop_at:
        with open(args.stopped_file, "w") as fh:
            fh.write(str(time.time()))
        time.sleep(3600)
    if step == args.save_at:
        with heartbeat.phase("checkpoint"):
            torch.save({"step": step}, os.path.join(os.environ["DLAUNCH_CKPT_DIR"], f"shard-{step}.pt"))
            time.sleep(args.save_seconds)
    time.sleep(args.interval)
    value = torch.ones(1)
    dist.all_reduce(value)
    total += value
    heartbeat.beat(step=step)
    print(f"step {step} total {int(total.item())}", flush=True)
dist.destroy_process_group()

"""A gloo rank of a synchronous job: each step works ``--ms`` of CPU, then all-reduces; rank ``--slow-rank``
works ``--slow`` times as long, so every rank's step takes the slow rank's time (the others wait for it in the
collective). Prints Megatron's iteration line (on ``--print-rank`` only, when given: Megatron prints on the
last rank). The work is CPU time (``time.process_time``), not wall time: a loaded machine stretches the
wall but not the ratio the tests look for. ``--jitter J`` varies every rank's work by up to +-J.
"""
import argparse
import random
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--ms", type=float, default=20.0)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow", type=float, default=1.4)
parser.add_argument("--jitter", type=float, default=0.0)
parser.add_argument("--print-rank", type=int, default=-1)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
work = args.ms * (args.slow if rank == args.slow_rank else 1.0) / 1000.0
value = torch.ones(1)
for step in range(1, args.steps + 1):
    start = time.perf_counter()
    until = time.process_time() + work * (1 + random.uniform(-args.jitter, args.jitter))
    while time.process_time() < until:
        pass
    dist.all_reduce(value)
    if args.print_rank < 0 or rank == args.print_rank:
        ms = (time.perf_counter() - start) * 1000.0
        print(f" iteration {step:8d}/{args.steps:8d} | elapsed time per iteration (ms): {ms:.1f} |", flush=True)
dist.destroy_process_group()

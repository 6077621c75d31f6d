"""A rank printing Megatron-style step lines; by default rank 2 takes 40% longer per step.

``--slow-rank R --slow F`` makes rank R take F times as long; ``--jitter J`` varies every step by up to +-J
(a fraction); ``--plain`` prints a line of its own instead of Megatron's; ``--window-file F`` gets the time
this rank printed its tenth step (straggler scores need ten).

Each line says the time the step was told to take, and the step sleeps that long: the time a sleep took on a
loaded 2-core machine (a 20 ms sleep taking 25-40) would blur the 40% difference the tests look for, while what
they test is how the launcher reads and scores the lines.
"""
import argparse
import os
import random
import time

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--ms", type=float, default=20.0)
parser.add_argument("--slow-rank", type=int, default=2)
parser.add_argument("--slow", type=float, default=1.4)
parser.add_argument("--jitter", type=float, default=0.0)
parser.add_argument("--window-file", default="")
parser.add_argument("--plain", action="store_true", help="print 'step N took X ms' (a line of the user's own)")
args = parser.parse_args()

rank = int(os.environ["RANK"])
slow = args.slow if rank == args.slow_rank else 1.0
for step in range(1, args.steps + 1):
    ms = args.ms * slow * (1 + random.uniform(-args.jitter, args.jitter))
    time.sleep(ms / 1000)
    if args.plain:
        print(f"step {step} took {ms:.1f} ms", flush=True)
    else:
        print(f" iteration {step:8d}/{args.steps:8d} | elapsed time per iteration (ms): {ms:.1f} |", flush=True)
    if step == 10 and args.window_file:
        with open(f"{args.window_file}.{rank}", "w") as fh:
            fh.write(str(time.time()))

"""A rank for the metrics tests: ``--steps`` Megatron-style step lines (rank ``--slow-rank`` 1.4x slower per step),
a MindSpore-named checkpoint of step ``--steps`` written by every rank, then it waits until ``--stop-file`` exists.
``--fail-rank R`` exits 3 from rank R after its steps, in the first attempt only (TORCHELASTIC_RESTART_COUNT 0).

Each line says the time the step was told to take (tests/programs/step_rank.py says why).
"""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--ms", type=float, default=20.0)
parser.add_argument("--slow-rank", type=int, default=2)
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--stop-file", required=True)
args = parser.parse_args()

rank = int(os.environ["RANK"])
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
ms = args.ms * (1.4 if rank == args.slow_rank else 1.0)
for step in range(1, args.steps + 1):
    time.sleep(ms / 1000)
    print(f" iteration {step:8d}/{args.steps:8d} | elapsed time per iteration (ms): {ms:.1f} |", flush=True)
if rank == args.fail_rank and first_attempt:
    raise SystemExit(3)
directory = os.environ["DLAUNCH_CKPT_DIR"]
name = os.path.join(directory, f"net-1_{args.steps}.ckpt")
with open(name + ".part", "wb") as fh:
    fh.write(b"state")
os.rename(name + ".part", name)
while not os.path.exists(args.stop_file):
    time.sleep(0.1)

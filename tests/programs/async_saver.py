"""A rank that saves checkpoints in the background, for launcher tests of a save in flight when the job ends.

Every rank saves step 1_1 synchronously.  ``--slow-rank`` then saves step 1_2 in the background,
slowly (``--delay`` seconds before each of its ``--storages`` tensors, through checkpoint's test
hook), says so, and either sleeps (``--then sleep``: dlaunch must stop it) or returns at once
(``--then exit``: the interpreter's exit waits for the save).  ``--fail-rank`` waits until the slow
rank's save is being written, saves step 1_2 itself, then exits with code 3.
"""

import argparse
import os
import sys
import threading
import time

from launcher import heartbeat

print(f"rank {os.environ['RANK']} starting", flush=True)
importing = threading.Event()   # alive (heartbeat) while torch imports: slow on a busy machine


def beat_while_importing():
    while not importing.wait(0.2):
        heartbeat.beat()


threading.Thread(target=beat_while_importing, daemon=True).start()
import torch  # noqa: E402

from launcher import checkpoint  # noqa: E402

importing.set()

parser = argparse.ArgumentParser()
parser.add_argument("--slow-rank", type=int, default=0)
parser.add_argument("--fail-rank", type=int)
parser.add_argument("--delay", type=float, default=1.0)
parser.add_argument("--storages", type=int, default=2)
parser.add_argument("--then", choices=("sleep", "exit"), default="sleep")
args = parser.parse_args()

rank = int(os.environ["RANK"])
state = {f"t{i}": torch.full((1000,), float(rank * 100 + i)) for i in range(args.storages)}
checkpoint.save(state, 1, 1)
print(f"rank {rank} saved 1_1", flush=True)
if rank == args.slow_rank:
    os.environ["DLAUNCH_CKPT_TEST_DELAY"] = str(args.delay)
    checkpoint.save(state, 1, 2, async_save=True)
    for tensor in state.values():
        tensor.zero_()   # training goes on: the file must hold the state as it was
    print(f"rank {rank} is saving 1_2 in the background", flush=True)
    if args.then == "sleep":
        for _ in range(1200):   # short sleeps: Python runs signal handlers between them
            time.sleep(0.1)
elif rank == args.fail_rank:
    slow_dir = os.path.join(os.environ["DLAUNCH_RUN_DIR"], f"rank_{args.slow_rank:03d}", "ckpt")
    while not any(name.startswith(".ckpt-1_2.pt~") for name in os.listdir(slow_dir)):
        time.sleep(0.05)
    checkpoint.save(state, 1, 2)
    print(f"rank {rank} fails while rank {args.slow_rank} writes", flush=True)
    sys.exit(3)

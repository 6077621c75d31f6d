"""A rank stepping every 0.2 s, printing a line and beating its heartbeat with the step, no collective.

``--fail-at N``: rank 1 exits 1 at step N of the first attempt; ``--stop-at N``: rank 1 sleeps at step N of a
restarted attempt (TORCHELASTIC_RESTART_COUNT > 0), writing the time into ``--stopped-file``; with ``--stop-all``
every rank of a restarted attempt sleeps there (rank 1 still writes the time), so no rank of that attempt
reports more steps.
"""
import argparse
import os
import sys
import time

from launcher import heartbeat

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--fail-at", type=int, default=-1)
parser.add_argument("--stop-at", type=int, default=-1)
parser.add_argument("--stopped-file", default="")
parser.add_argument("--stop-all", action="store_true")
args = parser.parse_args()
rank, restarted = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"]) > 0
for step in range(1, args.steps + 1):
    if rank == 1 and not restarted and step == args.fail_at:
        sys.exit(1)
    if (rank == 1 or args.stop_all) and restarted and step == args.stop_at:
        if rank == 1:
            with open(args.stopped_file, "w") as fh:
                fh.write(str(time.time()))
        time.sleep(3600)
    time.sleep(0.2)
    heartbeat.beat(step=step)
    print(f"step {step}", flush=True)

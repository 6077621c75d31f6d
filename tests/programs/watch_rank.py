"""A rank program for the status/logs/report tests: prints what those commands read, then sleeps or exits.

Every flag is one behaviour: timestamped lines at a steady pace (logs --follow latency),
loss lines in the seeds' form or dlaunch's JSON-lines form (report), and chosen exits.
"""

import argparse
import json
import math
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--tick", type=float, default=0.0, help="print 'tick I at EPOCH' every this many seconds")
parser.add_argument("--count", type=int, default=0, help="how many ticks")
parser.add_argument("--steps", type=int, default=0, help="print this many loss lines per epoch")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--step-every", type=float, default=0.0, help="seconds between loss lines")
parser.add_argument("--json-ranks", default="", help="these ranks print JSON metric lines instead (e.g. 1,3)")
parser.add_argument("--exit", action="append", default=[], metavar="RANK:CODE:AFTER",
                    help="this rank exits with CODE after AFTER seconds (before --sleep ends)")
parser.add_argument("--fail-on-attempt", type=int, help="--exit only while TORCHELASTIC_RESTART_COUNT is this")
parser.add_argument("--go-file", help="--exit's AFTER counts from when this file appears (the test says go)")
parser.add_argument("--sleep", type=float, default=0.0, help="then sleep this long")
args = parser.parse_args()

rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
started = time.monotonic()


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


exits = {}
for spec in args.exit:
    who, code, after = spec.split(":")
    if int(who) == rank and (args.fail_on_attempt is None or args.fail_on_attempt == attempt):
        exits = {"code": int(code), "after": float(after)}


def maybe_exit(wait=False):
    """Exit now if this rank's --exit is due (with ``wait``, sleep until it is)."""
    if not exits:
        return
    since = started
    if args.go_file:
        if not wait and not os.path.exists(args.go_file):
            return
        while not os.path.exists(args.go_file):
            time.sleep(0.02)
        since = exits.setdefault("go", time.monotonic())
    left = exits["after"] - (time.monotonic() - since)
    if left > 0 and wait:
        time.sleep(left)
    if left <= 0 or wait:
        say(f"rank {rank} exits with code {exits['code']}")
        sys.exit(exits["code"])


say(f"rank {rank} started (attempt {attempt})")
for i in range(args.count):
    say(f"tick {i} at {time.time():.6f}")
    maybe_exit()
    time.sleep(args.tick)
json_ranks = {int(r) for r in args.json_ranks.split(",") if r}
for epoch in range(1, args.epochs + 1):
    for step in range(1, args.steps + 1):
        done = (epoch - 1) * args.steps + step
        loss = 2.3 * math.exp(-done / (8.0 + 3 * rank)) + 0.1 + 0.05 * rank
        if rank in json_ranks:
            say(json.dumps({"dlaunch": "metric", "step": done, "loss": round(loss, 6)}))
        else:
            say(f"epoch: {epoch} step: {step}, loss is {loss:.7f}")
        maybe_exit()
        time.sleep(args.step_every)
maybe_exit(wait=True)
time.sleep(args.sleep)
say(f"rank {rank} done")

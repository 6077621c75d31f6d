"""A data-parallel rank for the survivors' window tests (tests/e2e/test_survivors.py), with no torch: it saves
checkpoint files the way launcher.checkpoint.save(replicated=True) names and marks them, and asks
launcher.checkpoint for the notice.

Attempt 0: every rank saves steps 10 and 20, then waits in "the collective of step 25" (polling the notice
every 10 ms, as a training loop asks between steps). Rank --fail-rank kills itself there with SIGKILL after
--fail-after seconds, saving nothing. A survivor that hears the notice records when (heard.json), saves step
25 as a replica, says it saved, and waits to be stopped. With --notice-signal, a SIGUSR1 handler records the
signal's arrival too. Attempt 1+: records DLAUNCH_RESUME_STEP and DLAUNCH_RESUME_FROM (resumed.json), exits 0.
"""

import argparse
import json
import os
import signal
import sys
import time

from launcher.checkpoint import notice, notice_saved

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, required=True)
parser.add_argument("--fail-after", type=float, default=1.0)
parser.add_argument("--no-save", action="store_true", help="hear the notice but never say it saved")
args = parser.parse_args()
rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank_dir, ckpt_dir = os.environ["DLAUNCH_RANK_DIR"], os.environ["DLAUNCH_CKPT_DIR"]


def record(name, value):
    with open(os.path.join(rank_dir, name), "w") as fh:
        json.dump(value, fh)


def save(step):
    name = f"ckpt-1_{step}.pt"
    with open(os.path.join(ckpt_dir, name + ".replica"), "w") as fh:   # the mark first, as checkpoint.save
        fh.write("every rank's state\n")
    with open(os.path.join(ckpt_dir, name + ".tmp"), "w") as fh:
        fh.write(f"rank {rank} step {step}\n")
    os.rename(os.path.join(ckpt_dir, name + ".tmp"), os.path.join(ckpt_dir, name))


if attempt > 0:
    record("resumed.json", {"step": os.environ.get("DLAUNCH_RESUME_STEP"),
                            "from": os.environ.get("DLAUNCH_RESUME_FROM")})
    sys.exit(0)
signal.signal(signal.SIGUSR1, lambda *_: record("signal.json", {"at": time.time()}))
signal.signal(signal.SIGTERM, lambda *_: (record("sigterm.json", {"at": time.time()}), sys.exit(143)))
save(10)
save(20)
started = time.time()
while True:   # the collective of step 25
    if rank == args.fail_rank and time.time() - started >= args.fail_after:
        record("failed.json", {"at": time.time()})
        os.kill(os.getpid(), signal.SIGKILL)
    found = notice()
    if found:
        record("heard.json", {"at": time.time(), "notice": found})
        if not args.no_save:
            save(25)
            notice_saved()
        while True:
            time.sleep(0.05)
    time.sleep(0.01)

"""A gloo rank of a job that all-reduces every ``--interval`` seconds, for the hang watch's e2e tests.

Every rank reports its step (``heartbeat.beat(step=N)``) and prints a line per step; at ``--save-at`` every
rank spends ``--save-seconds`` inside ``heartbeat.phase("checkpoint")`` (each its own shard, as DCP does);
rank ``--stop-rank`` stops at ``--stop-at`` (it sleeps, outside any collective, after writing the time it
stopped into ``--stopped-file``), the others wait for it in their next all_reduce. Rank ``--fail-rank`` exits
3 at ``--fail-at``; with ``--save-on-notice S`` every other rank, told by dlaunch's notice file
(``--survivor-window``), then works S seconds in silence (no output, no heartbeat, no checkpoint file: a save
to somewhere else), says "saved on notice" and marks its save done. With ``--print-rank R`` only rank R says its
steps, as nanoGPT does (``iter N: loss X, time Y ms, mfu Z%``, no heartbeat); every other rank prints nothing.
With ``--bar`` that rank draws a tqdm bar instead, as HF Trainer does (one line redrawn after carriage returns,
ended when the bar closes). With ``--teardown-seconds S`` every rank's interpreter spends S seconds in its
teardown after its last step, after the atexit handlers, silent (as torch's static destructors and gloo's threads
take seconds on a loaded machine); without it a ``--print-rank`` job leaves at once.
"""
import argparse
import os
import threading
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
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--fail-at", type=int, default=-1)
parser.add_argument("--save-on-notice", type=float, default=-1.0)
parser.add_argument("--print-rank", type=int, default=-1)
parser.add_argument("--teardown-seconds", type=float, default=0.0)
parser.add_argument("--bar", action="store_true")
args = parser.parse_args()


class SlowTeardown:
    """Sleeps when the interpreter's teardown clears this module, after the atexit handlers."""

    def __init__(self, seconds: float):
        self.seconds, self.sleep = seconds, time.sleep   # time itself may be torn down by then

    def __del__(self):
        self.sleep(self.seconds)


teardown = SlowTeardown(args.teardown_seconds) if args.teardown_seconds > 0 else None


def save_on_notice() -> None:
    from launcher import checkpoint

    notice = os.environ["DLAUNCH_NOTICE_FILE"]
    while checkpoint.notice() is None:   # asking says this rank watches: the window waits for its save
        time.sleep(0.02)
    time.sleep(args.save_on_notice)   # the save, silent
    print("saved on notice", flush=True)
    open(os.path.join(os.path.dirname(notice), "notice.saved"), "w").close()
    os._exit(0)


if args.save_on_notice >= 0:
    threading.Thread(target=save_on_notice, daemon=True).start()

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.zeros(1)
if args.bar and rank == args.print_rank:
    from tqdm import tqdm

    bar = tqdm(total=args.steps, mininterval=0)
for step in range(1, args.steps + 1):
    if rank == args.stop_rank and step == args.stop_at:
        with open(args.stopped_file, "w") as fh:
            fh.write(str(time.time()))
        time.sleep(3600)
    if rank == args.fail_rank and step == args.fail_at:
        os._exit(3)   # not sys.exit: torch's teardown aborts a rank that never destroyed its group (docs/run.md)
    if step == args.save_at:
        with heartbeat.phase("checkpoint"):
            torch.save({"step": step}, os.path.join(os.environ["DLAUNCH_CKPT_DIR"], f"shard-{step}.pt"))
            time.sleep(args.save_seconds)
    time.sleep(args.interval)
    value = torch.ones(1)
    try:
        dist.all_reduce(value)
    except RuntimeError:   # a peer died: wait for the notice, whose thread saves and exits
        if args.save_on_notice < 0:
            raise
        time.sleep(3600)
    total += value
    if args.print_rank < 0:
        heartbeat.beat(step=step)
        print(f"step {step} total {int(total.item())}", flush=True)
    elif rank == args.print_rank and args.bar:
        bar.update(1)
    elif rank == args.print_rank:
        print(f"iter {step}: loss 2.5000, time {args.interval * 1000:.2f}ms, mfu 1.00%", flush=True)
dist.destroy_process_group()
if args.print_rank >= 0 and teardown is None:   # leave at once: a slow teardown is not these tests' subject
    os._exit(0)

"""A rank that hands dlaunch hostile text (issue 45; tests/e2e/test_border_cases.py), each flag one shape.

Every run appends its attempt (TORCHELASTIC_RESTART_COUNT) to runs.txt in DLAUNCH_RANK_DIR first. The hostile
text is made here, not passed in argv, so the plan and summary dlaunch writes stay ordinary.
"""
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--megatron-digits", type=int, default=0,
                    help="print a Megatron step line whose iteration number has this many digits")
parser.add_argument("--line", action="append", default=[], help="print this line")
parser.add_argument("--x-line", type=int, default=0, help="print a line of this many 'x'")
parser.add_argument("--heartbeat-brackets", type=int, default=0, help="write this many '[' into the heartbeat")
parser.add_argument("--heartbeat-fifo", action="store_true",
                    help="make the heartbeat file a FIFO, wait a second (dlaunch looks twice a second), then "
                         "write fifo.made in the rank directory")
parser.add_argument("--notice-saved-dir", action="store_true", help="make a directory named notice.saved")
parser.add_argument("--sleep", type=float, default=0.0, help="then sleep this long")
parser.add_argument("--fail", type=int, help="then exit with this code")
parser.add_argument("--until", help="(a rank that did not fail) then sleep until this file exists (60 s at most)")
parser.add_argument("--fail-on-attempt", type=int, help="only on this attempt (TORCHELASTIC_RESTART_COUNT)")
parser.add_argument("--fail-rank", type=int, help="only this rank fails (default: every rank)")
args = parser.parse_args()

rank_dir = os.environ["DLAUNCH_RANK_DIR"]
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
with open(os.path.join(rank_dir, "runs.txt"), "a") as fh:
    fh.write(f"{attempt}\n")

if args.megatron_digits:
    print(f" iteration {'9' * args.megatron_digits}/ 100 | elapsed time per iteration (ms): 10.0 |", flush=True)
for line in args.line:
    print(line, flush=True)
if args.x_line:
    print("x" * args.x_line, flush=True)
heartbeat = os.path.join(rank_dir, "heartbeat")
if args.heartbeat_brackets:
    with open(heartbeat, "w") as fh:
        fh.write("[" * args.heartbeat_brackets)
if args.heartbeat_fifo:
    os.mkfifo(heartbeat)
    time.sleep(1.0)
    with open(os.path.join(rank_dir, "fifo.made"), "w") as fh:
        fh.write("made\n")
    print("made the FIFO", flush=True)
if args.notice_saved_dir:
    os.makedirs(os.path.join(rank_dir, "notice.saved"), exist_ok=True)

time.sleep(args.sleep)
if args.fail is not None and (args.fail_on_attempt is None or args.fail_on_attempt == attempt) \
        and (args.fail_rank is None or args.fail_rank == int(os.environ["RANK"])):
    sys.exit(args.fail)
if args.until:   # the ranks that did not fail: a survivor, a job that runs until the test is done with it
    deadline = time.monotonic() + 60
    while not os.path.exists(args.until) and time.monotonic() < deadline:
        time.sleep(0.05)

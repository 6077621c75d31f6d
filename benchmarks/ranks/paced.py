"""Rank script for bench_watchdog.py: prints argv[1] lines a second for argv[2] seconds, in 10 ms batches."""
import os
import sys
import time

rank = os.environ["RANK"]
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
batch = max(1, int(rate / 100))
start = time.monotonic()
sent = 0
while time.monotonic() - start < seconds:
    due = int((time.monotonic() - start) * rate)
    while sent < due:
        sys.stdout.write("".join(f"rank {rank} step {sent + i:07d} loss 0.123456\n" for i in range(batch)))
        sent += batch
    time.sleep(0.01)

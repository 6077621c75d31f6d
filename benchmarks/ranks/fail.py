"""Rank script for bench_run.py: rank FAIL_RANK (argv[3], default 3) sleeps argv[2] seconds, writes
time.time() to the file argv[1] and exits with code FAIL_RANK at once; every other rank sleeps forever."""
import os
import sys
import time

stamp, delay = sys.argv[1], float(sys.argv[2])
fail_rank = int(sys.argv[3]) if len(sys.argv) > 3 else 3
if int(os.environ["RANK"]) == fail_rank:
    time.sleep(delay)
    with open(stamp, "w") as fh:
        fh.write(repr(time.time()))
    os._exit(fail_rank)
while True:
    time.sleep(3600)

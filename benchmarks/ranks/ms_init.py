"""Rank script for bench_msrun.py: MindSpore init() on CPU, then exit 0.

With arguments STAMP DELAY FAIL_RANK: rank FAIL_RANK sleeps DELAY seconds after init(), writes time.time()
to STAMP and exits with code FAIL_RANK at once (os._exit: the launcher's latency, not MindSpore's teardown);
every other rank sleeps forever.  The scheduler runs this script too and never returns from init().
"""
import os
import sys
import time

import mindspore as ms
from mindspore.communication import get_rank, init

ms.set_device("CPU")
init()
if len(sys.argv) > 1:
    stamp, delay, fail_rank = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    if get_rank() == fail_rank:
        time.sleep(delay)
        with open(stamp, "w") as fh:
            fh.write(repr(time.time()))
        os._exit(fail_rank)
    while True:
        time.sleep(3600)

"""A gloo rank that all-reduces in a loop until it is killed; it writes its pid to ``pid.<rank>`` in the run
directory once its group formed (tests/e2e/test_raised.py kills one from outside)."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
with open(os.path.join(os.environ["DLAUNCH_RUN_DIR"], f"pid.{rank}"), "w") as fh:
    fh.write(str(os.getpid()))
tensor = torch.ones(1000)
while True:
    dist.all_reduce(tensor)
    time.sleep(0.01)

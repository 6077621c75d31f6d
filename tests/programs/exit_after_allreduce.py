"""Two gloo ranks all-reduce once; rank 1 then exits 7 (issue 38, item 13), after ``destroy_process_group``
when given ``--destroy``. Rank 0 sleeps past rank 1's exit, so rank 1's code is the job's only failure.

Without ``--destroy`` rank 1 dies of SIGABRT (134) in 2 to 4 runs of 8 here, under torchrun too: at
interpreter exit a gloo worker thread frees the finished all-reduce, whose tensor's Python object needs the
GIL, and CPython ends a thread that asks for the GIL during finalization with ``pthread_exit``, whose unwinding
through torch's C++ frames calls ``std::terminate`` (docs/run.md, "Exit code").
"""
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
tensor = torch.ones(4)
dist.all_reduce(tensor)
if dist.get_rank() == 1:
    if "--destroy" in sys.argv:
        dist.destroy_process_group()
    sys.exit(7)
time.sleep(30)   # stopped by dlaunch once rank 1 has failed

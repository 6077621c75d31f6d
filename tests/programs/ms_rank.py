"""A MindSpore rank program for launcher tests (CPU): each flag is one thing a real MindSpore job does.

Under ``--ms-scheduler`` (or ``dlaunch msrun``) the same program also runs as MindSpore's scheduler
(MS_ROLE=MS_SCHED): ``init()`` is called first, before anything rank-specific, because in the scheduler it
serves the cluster until the workers are done and then ends the process, as in msrun's examples.
Each rank writes what it saw into DLAUNCH_RANK_DIR (ms.jsonl) for the test to check after the run.
"""

import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--allreduce", action="store_true", help="AllReduce(SUM) of rank+1; result and ranks to ms.jsonl")
parser.add_argument("--train-step", action="store_true",
                    help="one DATA_PARALLEL step (GRAPH_MODE, gradients_mean) of a linear model; weights to ms.jsonl")
parser.add_argument("--fail-rank", type=int, help="this rank exits with --code right after init()")
parser.add_argument("--code", type=int, default=3)
parser.add_argument("--crash-once-rank", type=int,
                    help="this rank kills itself (SIGKILL) right after init(), in its first run only")
parser.add_argument("--sleep", type=float, default=0.0, help="after the rest, sleep this long (ready.jsonl first)")
args = parser.parse_args()

import mindspore as ms  # noqa: E402  (after the flags: a bad flag fails fast, without the 6 s import)
from mindspore.communication import get_group_size, get_rank, init  # noqa: E402

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")
init()                                  # the scheduler process never returns from here
rank_dir = os.environ["DLAUNCH_RANK_DIR"]


def note(name, data):
    with open(os.path.join(rank_dir, name), "a") as fh:
        fh.write(json.dumps(data) + "\n")


rank = get_rank()
note("ms.jsonl", {"what": "init", "ms_rank": rank, "ms_size": get_group_size(), "RANK": os.environ.get("RANK"),
                  "RANK_ID": os.environ.get("RANK_ID"), "pid": os.getpid()})
if args.crash_once_rank == rank and not os.path.exists(os.path.join(rank_dir, "crashed")):
    open(os.path.join(rank_dir, "crashed"), "w").close()
    print(f"rank {rank} crashes now", flush=True)
    os.kill(os.getpid(), 9)
if args.fail_rank == rank:
    print(f"rank {rank} fails now with code {args.code}", flush=True)
    sys.exit(args.code)

if args.allreduce:
    import numpy as np
    from mindspore import ops

    total = ops.AllReduce(ops.ReduceOp.SUM)(ms.Tensor(np.array([rank + 1.0], np.float32)))
    note("ms.jsonl", {"what": "allreduce", "sum": float(total.asnumpy()[0])})

if args.train_step:
    import numpy as np
    from mindspore import nn

    # loss = sum(w * x) with x = rank+1 everywhere: each rank's gradient is rank+1; gradients_mean makes every
    # rank apply the mean, so after one SGD step (lr 1) every rank holds w0 - mean(rank+1).
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)

    class Linear(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.full((3,), 10.0, np.float32)), name="w")

        def construct(self, x):
            return (self.w * x).sum()

    net = Linear()
    step = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), learning_rate=1.0))
    step(ms.Tensor(np.full((3,), rank + 1.0, np.float32)))
    note("ms.jsonl", {"what": "train", "w": [float(v) for v in net.w.asnumpy()]})

if args.sleep:
    note("ready.jsonl", {"time": time.time()})
    time.sleep(args.sleep)
print(f"rank {rank} done", flush=True)

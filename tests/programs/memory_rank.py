"""A rank of a gloo job that saves every step into the memory tier (``checkpoint.save(..., memory=True)``), for
tests that SIGKILL it: after each save it writes ``saved <step>`` to ``--progress``; when all ``--steps`` are
saved it sleeps until killed.  ``--block-rank R --block-step S``: rank R's save of step S stops after its tensors
are copied into the slot (a value in the state, deep-copied last, writes ``blocking <S>`` and sleeps), so a test
can kill it mid-save.  ``--fork-child``: after its first save the rank forks a child that saves with
``memory=True`` too (it must go to disk, never to the parent's slots).  ``state_at`` is the state of a step.
"""

import argparse
import os
import sys
import time


def state_at(torch, rank: int, step: int, reduced: float):
    base = torch.arange(1000.0) + 1000 * rank + step
    layer = torch.nn.Linear(16, 8)
    with torch.no_grad():
        layer.weight.fill_(step + rank / 10)
        layer.bias.fill_(-step)
    return {"model": layer.state_dict(), "big": torch.full((1 << 20,), float(step)), "base": base,
            "view": base[10:20], "bf16": torch.ones(8, dtype=torch.bfloat16) * step, "empty": torch.empty(0),
            "reduced": torch.tensor([reduced]), "step": step, "rank": rank}


class Blocker:
    """Deep-copied by the capture after the tensors: the save is mid-way when this runs."""

    def __init__(self, progress, step):
        self.progress, self.step = progress, step

    def __deepcopy__(self, memo):
        with open(self.progress, "a") as fh:
            fh.write(f"blocking {self.step}\n")
        time.sleep(600)
        return self


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--progress", required=True)
    parser.add_argument("--block-rank", type=int, default=-1)
    parser.add_argument("--block-step", type=int, default=-1)
    parser.add_argument("--fork-child", action="store_true")
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    from launcher import checkpoint

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(1, args.steps + 1):
        total = torch.tensor([float(rank + step)])
        dist.all_reduce(total)
        state = state_at(torch, rank, step, float(total))
        if rank == args.block_rank and step == args.block_step:
            state["zz_blocker"] = Blocker(args.progress, step)
        path = checkpoint.save(state, 0, step, memory=True)
        assert path == os.path.join(os.environ["DLAUNCH_MEMORY_SLOTS"], f"slot-{(step - 1) % 2}"), path
        if args.fork_child and step == 1:
            child = os.fork()
            if child == 0:
                out = checkpoint.save({"child": True}, 0, 99, memory=True)
                os._exit(0 if out == os.path.join(checkpoint.ckpt_dir(), "ckpt-0_99.pt") else 1)
            assert os.waitpid(child, 0)[1] == 0
        with open(args.progress, "a") as fh:
            fh.write(f"saved {step}\n")
    dist.barrier()
    print("all saved", flush=True)
    sys.stdout.flush()
    time.sleep(600)


if __name__ == "__main__":
    main()

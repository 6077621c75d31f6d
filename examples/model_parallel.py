"""Model parallelism by hand, with per-rank (sliced) checkpoints: the seeds' HybridParallelNet in PyTorch.

The first layer's weight ``W`` [hidden, in_features] is split along its *second* dimension (the
input features, like MatMul's ``shard(((1, 1), (1, N)))``): rank r holds ``W[:, r*k:(r+1)*k]`` and
reads only its k input features, computes a partial product, and the partial products are summed
with ``all_reduce`` (gloo, CPU).  Everything after that (the bias, a replicated second layer, the
loss) is identical on every rank.

    dlaunch run examples/model_parallel.py --ranks 4 [-- --integrated]
    torchrun --nproc-per-node 4 examples/model_parallel.py
    python examples/model_parallel.py            # one process holds the whole weight

At each epoch's end every rank saves its slices with ``checkpoint.save_sliced`` (model and
optimizer, plus a strategy file); ``--integrated`` also saves the full state once, from rank 0,
under ``$DLAUNCH_RUN_DIR/integrated/``.  ``dlaunch ckpt merge`` rebuilds the full state from the
slices; ``dlaunch run --resume`` (or a resharded checkpoint) continues training.  Data is synthetic
and a pure function of (seed, epoch, step), so every rank sees the same batch and a resumed run
continues exactly.  Loss lines read ``epoch: 1 step: 10, loss is 0.6931472``.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from launcher import checkpoint


class _SumAcrossRanks(torch.autograd.Function):
    """all_reduce(sum) forward; identity backward, because every rank computes the same loss from
    the summed result (Megatron's reduce-from-model-parallel region)."""

    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        if dist.is_initialized():
            dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad


class InputSlicedLinear(nn.Module):
    """``x @ W.T + b`` with W split along the input features: this rank holds W's columns ``begin:end``."""

    def __init__(self, full_weight: torch.Tensor, rank: int, world: int):
        super().__init__()
        out_features, in_features = full_weight.shape
        if in_features % world:
            raise SystemExit(f"{in_features} input features cannot be split across {world} ranks")
        width = in_features // world
        self.begin, self.end = rank * width, (rank + 1) * width
        self.weight = nn.Parameter(full_weight[:, self.begin:self.end].clone())
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = x[:, self.begin:self.end] @ self.weight.T
        return _SumAcrossRanks.apply(partial) + self.bias


class HybridParallelNet(nn.Module):
    def __init__(self, full_weight: torch.Tensor, classes: int, rank: int, world: int):
        super().__init__()
        self.fc1 = InputSlicedLinear(full_weight, rank, world)
        self.fc2 = nn.Linear(full_weight.shape[0], classes)   # replicated

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


def batch(args, teacher: torch.Tensor, epoch: int, step: int):
    """The same synthetic batch on every rank: labels from a fixed random linear teacher."""
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + epoch * 10_007 + step)
    x = torch.randn(args.batch_size, args.in_features, generator=generator)
    return x, (x @ teacher).argmax(1)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--in-features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-every", type=int, default=5)
    parser.add_argument("--prefix", default="mp", help="checkpoint prefix")
    parser.add_argument("--keep-max", type=int, default=None, help="keep only the newest N checkpoints per rank")
    parser.add_argument("--integrated", action="store_true",
                        help="also save the full state from rank 0 under $DLAUNCH_RUN_DIR/integrated")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.environ.get("WORLD_SIZE"):
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    try:
        full_weight = torch.randn(args.hidden, args.in_features,
                                  generator=torch.Generator().manual_seed(args.seed)) / args.in_features ** 0.5
        teacher = torch.randn(args.in_features, args.classes, generator=torch.Generator().manual_seed(args.seed + 1))
        # Replicated layers start different on purpose, as with unseeded initialisation;
        # broadcast_parameters gives every rank rank 0's (the seeds' parameter_broadcast).
        torch.manual_seed(args.seed + 100 + rank)
        net = HybridParallelNet(full_weight, args.classes, rank, world)
        checkpoint.broadcast_parameters(net, skip={"fc1.weight"})
        optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
        sliced_param = list(net.parameters()).index(net.fc1.weight)
        strategy = {"model.fc1.weight": 1, f"optimizer.state.{sliced_param}.momentum_buffer": 1}

        start = 1
        state = checkpoint.load()      # DLAUNCH_RESUME_FROM under dlaunch run --resume
        if state is not None:
            net.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = state["epoch"] + 1
            print(f"resumed from {os.environ['DLAUNCH_RESUME_FROM']}: epoch {state['epoch']} done, "
                  f"continuing at epoch {start}", flush=True)

        def full_state(epoch, step):
            return {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "step": step}

        with checkpoint.saving_on_exception(lambda: full_state(here.epoch, here.step), prefix=args.prefix) as here:
            for epoch in range(start, args.epochs + 1):
                for step in range(1, args.steps + 1):
                    here.epoch, here.step = epoch, step
                    x, y = batch(args, teacher, epoch, step)
                    loss = F.cross_entropy(net(x), y)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    if step % args.log_every == 0:
                        print(f"epoch: {epoch} step: {step}, loss is {loss.item():.7g}", flush=True)
                state = full_state(epoch, args.steps)
                checkpoint.save_sliced(state, strategy, epoch, args.steps, prefix=args.prefix,
                                       keep_max=args.keep_max)
                if args.integrated:
                    checkpoint.save_integrated(state, epoch, args.steps, prefix=args.prefix, strategy=strategy)
        if dist.is_initialized():
            dist.barrier()   # rank 0 may still be writing the integrated checkpoint
        print("training finished", flush=True)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without interpreter finalisation: torch 2.13's gloo worker threads can drop their last
    # collective's tensors after it began, and the GIL they then need aborts the process with
    # "terminate called without an active exception" (about 1 run in 20 here; pytorch PR #179291).
    # Every checkpoint is already closed, fsynced and renamed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

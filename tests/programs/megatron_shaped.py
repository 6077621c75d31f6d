"""A training loop shaped as Megatron-LM's ``pretrain``/``train`` is, on gloo CPU ranks, for the hang watch.

What matters to a launcher is kept: the iteration line is printed by the last rank only (``print_rank_last``),
in ``training_log``'s exact format (``megatron/training/training.py``); the save messages by rank 0 only
(``print_rank_0``); every rank builds its data iterator before the first iteration (``--load-seconds``: the data
loading a real job does there), does a data-parallel step (DDP: gradients all-reduced in backward) and, every
``--save-interval`` iterations, saves its own shard into ``--save`` and waits for the others at a barrier
(``--save-seconds``: how long the shard's write takes), as ``save_checkpoint`` does. Nothing of dlaunch is
imported: no heartbeat, no phase, the save not in dlaunch's checkpoint directory.

Rank ``--stop-rank`` stops at ``--stop-at`` outside any collective (writes the time into ``--stopped-file``,
then sleeps): the others wait for it in their next all-reduce, a real hang.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--train-iters", type=int, default=60)
parser.add_argument("--log-interval", type=int, default=1)
parser.add_argument("--save", default="")
parser.add_argument("--save-interval", type=int, default=0)
parser.add_argument("--save-seconds", type=float, default=0.0)
parser.add_argument("--load-seconds", type=float, default=0.0)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--micro-batch", type=int, default=64)
parser.add_argument("--stop-rank", type=int, default=-1)
parser.add_argument("--stop-at", type=int, default=-1)
parser.add_argument("--stopped-file", default="")
args = parser.parse_args()


def print_rank_0(message: str) -> None:
    if dist.get_rank() == 0:
        print(message, flush=True)


def print_rank_last(message: str) -> None:
    if dist.get_rank() == dist.get_world_size() - 1:
        print(message, flush=True)


def save_checkpoint(iteration: int, model) -> None:
    print_rank_0(f"saving checkpoint at iteration {iteration:7d} to {args.save} in torch_dist format")
    start = time.time()
    shard = os.path.join(args.save, f"iter_{iteration:07d}", f"__{dist.get_rank()}_0.distcp")
    os.makedirs(os.path.dirname(shard), exist_ok=True)
    torch.save(model.state_dict(), shard)
    time.sleep(args.save_seconds)   # the rest of the shard's write
    dist.barrier()
    print_rank_0(f"  successfully saved checkpoint from iteration {iteration:7d} to {args.save} "
                 f"[ t 1/1, p 1/1 ] in {time.time() - start:.2f} s")


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234 + rank)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(args.hidden, 4 * args.hidden), torch.nn.GELU(), torch.nn.Linear(4 * args.hidden, args.hidden)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    print_rank_0("> building train, validation, and test datasets ...")
    time.sleep(args.load_seconds)   # the data iterators' first batches
    print_rank_0("done with setup ...")
    print_rank_0("training ...")
    consumed, last = 0, time.time()
    for iteration in range(1, args.train_iters + 1):
        if rank == args.stop_rank and iteration == args.stop_at:
            with open(args.stopped_file, "w") as fh:
                fh.write(str(time.time()))
            time.sleep(3600)
        x = torch.randn(args.micro_batch, args.hidden)
        loss = (model(x) - x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        consumed += args.micro_batch * world
        if iteration % args.log_interval == 0:
            elapsed = (time.time() - last) / args.log_interval
            last = time.time()
            log = f" [{time.strftime('%Y-%m-%d %H:%M:%S')}]"
            log += f" iteration {iteration:8d}/{args.train_iters:8d} |"
            log += f" consumed samples: {consumed:12d} |"
            log += f" elapsed time per iteration (ms): {elapsed * 1000.0:.1f} |"
            log += f" learning rate: {1e-4:.6E} |"
            log += f" global batch size: {args.micro_batch * world:5d} |"
            log += f" lm loss: {loss.item():.6E} |"
            log += f" loss scale: {1.0:.1f} |"
            log += f" grad norm: {grad_norm.item():.3f} |"
            log += f" number of skipped iterations: {0:3d} |"
            log += f" number of nan iterations: {0:3d} |"
            print_rank_last(log)
        if args.save and args.save_interval and iteration % args.save_interval == 0:
            save_checkpoint(iteration, model)
            last = time.time()   # Megatron's timers leave the save out of the next iteration's time
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A Lightning Fabric training script as a Fabric user writes one (written for dlaunch's tests in the shape of
Lightning's own ``examples/fabric/language_model/train.py``: ``Fabric()``, ``fabric.setup``,
``fabric.setup_dataloaders``, ``fabric.backward``, ``fabric.print`` on rank 0, ``fabric.save``; no code of it
copied), training Lightning's demo ``Transformer`` on random tokens with DDP on gloo CPU ranks.

Fabric sees torchrun's variables (its TorchElasticEnvironment) and starts no processes of its own, so this runs
under any launcher that sets them. Rank 0 prints a line per step, ``epoch: E - iteration: N - loss L - T ms``
(read with ``--step-pattern``: Fabric has no step line of its own). For benchmarks/bench_false_hangs.py:
``--load-seconds`` (every rank's first batch takes that much longer to load: in the DataLoader's collate),
``--save-seconds`` (rank 0's write of each ``fabric.save`` every ``--save-every`` steps takes that much longer;
the other ranks wait for it in the save's barrier), ``--stop-rank``/``--stop-at``/``--stopped-file`` (that rank
stops at that step outside any collective, after writing the time: a real hang).
"""
import argparse
import os
import time

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.demos import Transformer
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--devices", type=int, default=2)
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--seq", type=int, default=32)
parser.add_argument("--vocab", type=int, default=512)
parser.add_argument("--out", default="fabric_out")
parser.add_argument("--save-every", type=int, default=0)
parser.add_argument("--save-seconds", type=float, default=0.0)
parser.add_argument("--load-seconds", type=float, default=0.0)
parser.add_argument("--stop-rank", type=int, default=-1)
parser.add_argument("--stop-at", type=int, default=-1)
parser.add_argument("--stopped-file", default="")
args = parser.parse_args()

_loaded = False


def collate(samples):
    """The default collate, the first batch of this process slower (reading and decoding the first shard)."""
    global _loaded
    if not _loaded:
        _loaded = True
        time.sleep(args.load_seconds)
    return torch.utils.data.default_collate(samples)


def main():
    L.seed_everything(42)
    fabric = L.Fabric(accelerator="cpu", devices=args.devices, strategy="ddp")
    fabric.launch()
    tokens = torch.randint(0, args.vocab, (args.iters * args.batch_size * fabric.world_size + 1, args.seq + 1))
    data = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=args.batch_size, shuffle=True,
                      collate_fn=collate)
    model = Transformer(vocab_size=args.vocab, ninp=64, nhead=2, nhid=128, nlayers=2, dropout=0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    data = fabric.setup_dataloaders(data)
    iteration, epoch, started = 0, 0, time.perf_counter()
    while iteration < args.iters:
        for inputs, target in data:
            iteration += 1
            if fabric.global_rank == args.stop_rank and iteration == args.stop_at:
                with open(args.stopped_file, "w") as fh:
                    fh.write(str(time.time()))
                time.sleep(3600)
            output = model(inputs, target)
            loss = F.nll_loss(output, target.reshape(-1))
            fabric.backward(loss)
            fabric.clip_gradients(model, optimizer, clip_val=0.25)
            optimizer.step()
            optimizer.zero_grad()
            now = time.perf_counter()
            fabric.print(f"epoch: {epoch} - iteration: {iteration} - loss {loss.item():.4f} - "
                         f"{(now - started) * 1000:.1f} ms")
            if args.save_every and iteration % args.save_every == 0:
                path = os.path.join(args.out, f"step-{iteration:05d}.ckpt")
                if fabric.global_rank == 0:
                    time.sleep(args.save_seconds)   # the write of a real model's state
                fabric.save(path, {"model": model, "optimizer": optimizer, "iteration": iteration})
                fabric.print(f"saved {path}")
            started = time.perf_counter()
            if iteration >= args.iters:
                break
        epoch += 1


if __name__ == "__main__":
    main()

"""nanoGPT's checkpointing, unmodified in kind: ``torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))``
and ``init_from = 'resume'`` when that file is there; ``--out_dir`` is the only thing the user points at
``$DLAUNCH_MEMORY_DIR``. Two gloo ranks, a tiny model, a save every iteration (``always_save_checkpoint``).
In the first attempt rank ``--victim`` writes ``reached`` (its pid) into its rank directory after the save of
iteration ``--reach``, then waits to be killed.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--out_dir", required=True)
parser.add_argument("--max_iters", type=int, default=8)
parser.add_argument("--reach", type=int, default=4)
parser.add_argument("--victim", type=int, default=1)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
iter_num = 0
ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
if os.path.exists(ckpt_path):   # init_from = 'resume'
    checkpoint = torch.load(ckpt_path, map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]
    print(f"resuming from iter {iter_num} in {ckpt_path}", flush=True)
first = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
while iter_num < args.max_iters:
    loss = model(torch.randn(4, 16)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num}
    torch.save(checkpoint, ckpt_path)
    print(f"iter {iter_num}: loss {loss.item():.4f}", flush=True)
    if first and rank == args.victim and iter_num == args.reach:
        with open(os.path.join(os.environ["DLAUNCH_RANK_DIR"], "reached"), "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(600)
    time.sleep(0.02)
dist.destroy_process_group()

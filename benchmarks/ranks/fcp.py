"""A rank for benchmarks/bench_flash.py: DLRover's Flash Checkpoint (``DdpCheckpointer``) under ``dlrover-run``, or
(``FCP_IMPL=dlaunch``) dlaunch's memory tier under ``dlaunch run --memory-ckpt``, the same calls timed the same way.

Run in DLRover's own venv (torch 2.13.0 CPU + dlrover[torch]), 2 gloo ranks.  ``FCP_STATE`` picks the state:
``bytes`` (``FCP_GIB`` GiB per rank: 16 float32 tensors, each rank its own values) or ``nanogpt`` (the model and
AdamW state of tests/clients/nanogpt's config/bench_cpu.py after one step, in nanoGPT's own checkpoint dict).
Every rank saves its own shard (``local_shard_num`` = ranks on the node), so each rank has its state in memory.

Attempt 0 (``TORCHELASTIC_RESTART_COUNT`` 0): times, per rank, ``FCP_SAVES`` saves into memory
(``StorageType.MEMORY``; the first allocates the shared memory), the peers in the same process: ``copy_`` into
kept buffers (a clone made once), ``torch.save`` to a file on disk (+ fsync), then exits 1 so that dlrover-run
restarts it.  Attempt 1 times ``load_checkpoint()`` (from the agent's shared memory) and the copy of what it
returned into the live state, beside ``torch.load`` of the disk file and the same copy, and checks the values.
Each attempt writes ``rank<R>-attempt<A>.txt`` (``key value`` lines) into ``FCP_OUT``.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

GIB = 1 << 30


def byte_state(gib: float, rank: int, step: int) -> dict:
    n = int(gib * GIB) // 4 // 16
    return {f"t{i:02d}": torch.full((n,), float(rank * 1000 + step + i)) for i in range(16)}


def nanogpt_state(client: str, step: int) -> dict:
    sys.path.insert(0, client)
    from model import GPT, GPTConfig  # tests/clients/nanogpt/model.py

    config: dict = {}
    exec(open(os.path.join(client, "config", "bench_cpu.py")).read(), {}, config)   # its own config file
    args = dict(n_layer=config["n_layer"], n_head=config["n_head"], n_embd=config["n_embd"],
                block_size=config["block_size"], bias=False, vocab_size=65, dropout=0.0)
    torch.manual_seed(step)
    model = GPT(GPTConfig(**args))
    optimizer = model.configure_optimizers(0.1, config["learning_rate"], (0.9, 0.95), "cpu")
    x = torch.randint(0, 65, (config["batch_size"], config["block_size"]))
    _, loss = model(x, x)
    loss.backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "model_args": args,
            "iter_num": step, "best_val_loss": 1e9, "config": config}


def tensors(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in tensors(obj[k])]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors(v)]
    return []


def copy_into(live: dict, loaded: dict) -> None:
    for dst, src in zip(tensors(live), tensors(loaded), strict=True):
        dst.copy_(src)


class DlaunchMemory:
    """The same calls on dlaunch's memory tier (``FCP_IMPL=dlaunch``, under ``dlaunch run --memory-ckpt``):
    ``checkpoint.save(..., memory=True)`` and, after the restart, ``checkpoint.load()``; imported before the
    timing starts, as DLRover's checkpointer is made before it."""

    def __init__(self):
        from launcher import checkpoint

        self.checkpoint = checkpoint

    def save_checkpoint(self, step, state, path, storage_type=None):
        # persist=False: like DLRover's StorageType.MEMORY, no background write to disk (dlaunch still persists the
        # newest memory step at the failure); with the default (every 10th, the first included) a 1 GiB persist
        # keeps a slot locked for seconds and the saves meanwhile are skipped, on one rank and not the other
        self.checkpoint.save(state, 0, step, memory=True, persist=False)

    def load_checkpoint(self):
        return self.checkpoint.load(weights_only=False, map_memory=os.environ.get("FCP_MAP") == "1")


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    out, kind = os.environ["FCP_OUT"], os.environ.get("FCP_STATE", "bytes")
    saves = int(os.environ.get("FCP_SAVES", "5"))
    disk = os.path.join(os.environ["FCP_DISK"], f"rank{rank}.pt")
    make = ((lambda step: byte_state(float(os.environ.get("FCP_GIB", "1")), rank, step)) if kind == "bytes"
            else (lambda step: nanogpt_state(os.environ["FCP_CLIENT"], step)))
    lines = [f"pid {os.getpid()}"]
    if os.environ.get("FCP_IMPL", "dlrover") == "dlrover":
        from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType

        checkpointer = DdpCheckpointer(os.path.join(out, "ckpt"), local_shard_num=local_world,
                                       global_shard_num=world)
        memory = StorageType.MEMORY
    else:
        checkpointer, memory = DlaunchMemory(), None
    state = make(saves)
    size = sum(t.numel() * t.element_size() for t in tensors(state))
    lines.append(f"bytes {size}")
    if attempt == 0:
        for step in range(1, saves + 1):
            dist.barrier()
            t = time.perf_counter()
            checkpointer.save_checkpoint(step, state, os.path.join(out, "ckpt", f"{step}-rank{rank}.pt"),
                                         storage_type=memory)
            lines.append(f"fcp_save {time.perf_counter() - t:.6f}")
        kept = [t.clone() for t in tensors(state)]
        for _ in range(saves):
            t = time.perf_counter()
            for dst, src in zip(kept, tensors(state)):
                dst.copy_(src)
            lines.append(f"kept_copy {time.perf_counter() - t:.6f}")
        t = time.perf_counter()
        with open(disk, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        lines.append(f"torch_save {time.perf_counter() - t:.6f}")
        dist.barrier()
        write(out, rank, attempt, lines)
        sys.exit(1)   # a failure: dlrover-run persists the memory step and restarts the ranks
    t = time.perf_counter()
    loaded = checkpointer.load_checkpoint()
    lines.append(f"fcp_load {time.perf_counter() - t:.6f}")
    if loaded is None:   # no step to resume from (dlaunch: no step every rank has)
        write(out, rank, attempt, [*lines, "loaded none"])
        sys.exit(1)
    live = make(0)   # the restarted rank's state before the restore
    t = time.perf_counter()
    copy_into(live, loaded)
    lines.append(f"fcp_copy {time.perf_counter() - t:.6f}")
    lines.append(f"fcp_ok {int(all(torch.equal(a, b) for a, b in zip(tensors(live), tensors(state))))}")
    del loaded
    fd = os.open(disk, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)   # read from the disk, not the page cache
    os.close(fd)
    t = time.perf_counter()
    loaded = torch.load(disk, map_location="cpu", weights_only=False)
    lines.append(f"torch_load {time.perf_counter() - t:.6f}")
    live = make(0)
    t = time.perf_counter()
    copy_into(live, loaded)
    lines.append(f"torch_copy {time.perf_counter() - t:.6f}")
    lines.append(f"disk_ok {int(all(torch.equal(a, b) for a, b in zip(tensors(live), tensors(state))))}")
    persisted = sorted(os.listdir(os.path.join(out, "ckpt"))) if os.path.isdir(os.path.join(out, "ckpt")) else []
    lines.append(f"persisted {','.join(persisted) or '-'}")
    write(out, rank, attempt, lines)
    dist.barrier()
    dist.destroy_process_group()


def write(out: str, rank: int, attempt: int, lines: list) -> None:
    with open(os.path.join(out, f"rank{rank}-attempt{attempt}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

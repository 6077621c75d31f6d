"""Checkpoint saves on this machine: how long training stalls, how fast the file reaches the disk; and merge.

1. save   A 1 GiB state (16 float32 tensors of 64 MiB) saved, in one run, by every way there is,
          each into a fresh file in the same directory, in a new (seeded) order each
          repetition.  Before every timed save the page cache's dirty pages are flushed
          (``os.sync``) and the machine gets ``--settle`` seconds (default 3), untimed, so no save
          pays for another's writeback or profits from the memory another just freed.
            floor        the in-memory copy an asynchronous save cannot avoid: cloning the state
                         (CPU); the copy into preallocated pinned host memory (GPU)
            copy         the copy into preallocated buffers (what a save that reuses its buffers pays)
            raw          the state's bytes written sequentially (64 MiB writes) and fsynced: the disk
            torch.save   plain, into the page cache (not durable), and followed by an fsync
            dcp          ``torch.distributed.checkpoint.save``, and ``async_save`` (stall = until it
                         returns, end = until its future is done), one rank of a gloo group
            sync         ``checkpoint.save`` (atomic: temporary, fsync, rename, directory fsync)
            async        ``checkpoint.save(async_save=True)``: stall = until it returns, end = until
                         ``handle.wait()`` returns (the same atomic file)
          and, to see where torch.save's time goes: ``torch.save`` into a sink that discards
          (pickling, its zip writer and CRC-32, no disk), torch's zip writer with the CRC off into
          the same sink, ``launcher.checkpoint.file.write_torch`` (torch.save's archive without the CRC) into the
          page cache, and followed by an fsync without the early writeback.
          Reported per way: median (of ``--repeat``) stall and end-to-end seconds, GiB/s at the
          end; then the goals' ratios: async stall / floor (goal <= 2) and sync and async
          throughput / raw (goal >= 0.8).  With a GPU (``--device cuda``, default when one is
          there) the state lives on the GPU and the floor is the pinned device-to-host copy.
2. merge  A 4-rank sliced checkpoint written with ``checkpoint.save_sliced`` (384 MiB on disk):
          ``ckpttool.merge`` reads the slice and strategy files and writes the 288 MiB full
          checkpoint atomically.  Reported: MB read and written per second (median).

Files live in a temporary directory under TMPDIR (default /tmp), deleted at the end.  On this
project's VM a write's speed depends on whether the memory it fills was freed moments before
(still mapped: fast) or long enough ago for the VM to have handed it back (slow); the settling
time puts every way in the same, slow, case.  Takes about 6 minutes.

Run:  .venv/bin/python benchmarks/bench_checkpoint.py [--repeat N] [--only save|merge] [--device cpu|cuda]
      [--settle SECONDS]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launcher import checkpoint  # noqa: E402
from launcher.checkpoint import file as ckptfile  # noqa: E402
from launcher.observe import ckpt as ckpttool  # noqa: E402

MB = 1e6
GIB = 1 << 30


def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Discard:
    """A file object that throws its bytes away: serialization cost without a disk."""

    def write(self, data):
        return len(data)

    def flush(self):
        pass


SETTLE = 3.0


def settle():
    """Flush, then wait until the disk has written (and discarded deleted files) and the VM has taken
    back the memory the previous save freed: with 0.5 s, a save that came soon enough after another
    reused its still-mapped pages and ran 3-4x faster, whichever way it was."""
    os.sync()
    time.sleep(SETTLE)


def synchronize(device):
    if device != "cpu":
        torch.accelerator.synchronize()


def init_one_rank_group(work: Path) -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{work / 'pg'}", rank=0, world_size=1)


def ways(state, work: Path, device: str):
    """name -> function(n >= 0) that saves once and returns (stall seconds, end-to-end seconds)."""
    pinned = None

    def timed(fn, finish=None):
        """``fn()`` stalls training; ``finish(fn's result)``, if given, waits for the file."""
        settle()
        start = time.perf_counter()
        started = fn()
        stall = time.perf_counter() - start
        if finish is not None:
            finish(started)
        return stall, time.perf_counter() - start

    def floor(n):
        if device == "cpu":
            return timed(lambda: {k: v.clone() for k, v in state.items()})
        return reused(n)

    def reused(n):
        nonlocal pinned
        if pinned is None:   # preallocated and reused, as a good asynchronous save does
            pinned = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=device != "cpu") for k, v in state.items()}

        def copy():
            for k, v in state.items():
                pinned[k].copy_(v, non_blocking=device != "cpu")
            synchronize(device)
        return timed(copy)

    host = {k: v.detach().cpu() for k, v in state.items()}   # the raw write's bytes, copied beforehand

    def raw(n):
        path = work / f"raw-{n}.bin"

        def write():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for tensor in host.values():
                    view = memoryview(tensor.numpy()).cast("B")
                    done = 0
                    while done < len(view):
                        done += os.write(fd, view[done:done + (64 << 20)])
                os.fsync(fd)
            finally:
                os.close(fd)
        return timed(write)

    def torch_save(n):
        return timed(lambda: torch.save(state, work / f"plain-{n}.pt"))

    def torch_save_fsync(n):
        path = work / f"plainsync-{n}.pt"
        return timed(lambda: (torch.save(state, path), fsync_file(path)))

    def dcp_save(n):
        import torch.distributed.checkpoint as dcp

        init_one_rank_group(work)
        return timed(lambda: dcp.save(state, checkpoint_id=str(work / f"dcp-{n}")))

    def dcp_async(n):
        import torch.distributed.checkpoint as dcp

        init_one_rank_group(work)
        return timed(lambda: dcp.async_save(state, checkpoint_id=str(work / f"dcpa-{n}")), lambda f: f.result())

    def torch_save_null(n):
        return timed(lambda: torch.save(state, Discard()))

    def write_torch_null(n):   # the same C++ writer, CRC off, into the same sink
        def write():
            writer = torch._C.PyTorchFileWriter(Discard(), False, ckptfile.STORAGE_ALIGNMENT)
            for key, tensor in host.items():
                writer.write_record(key, tensor.untyped_storage(), tensor.untyped_storage().nbytes())
            writer.write_end_of_file()
        return timed(write)

    def write_torch(n):
        return timed(lambda: ckptfile.write_torch(state, str(work / f"wt-{n}.pt")))

    def write_torch_fsync(n):
        path = str(work / f"wtsync-{n}.pt")
        return timed(lambda: (ckptfile.write_torch(state, path), fsync_file(path)))

    def sync(n):
        return timed(lambda: checkpoint.save(state, n, 0, prefix="sync", directory=str(work)))

    def asynchronous(n):
        return timed(lambda: checkpoint.save(state, n, 0, prefix="async", directory=str(work), async_save=True),
                     lambda handle: handle.wait())

    return {"floor": floor, "copy (reused)": reused, "raw": raw, "torch.save": torch_save,
            "torch.save+fsync": torch_save_fsync,
            "dcp.save": dcp_save, "dcp.async_save": dcp_async, "dlaunch sync": sync, "dlaunch async": asynchronous,
            "torch.save->null": torch_save_null, "no-CRC writer->null": write_torch_null,
            "write_torch": write_torch, "write_torch+fsync": write_torch_fsync}


def clear(work: Path) -> None:
    for path in work.iterdir():
        if path.name == "pg":
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def bench_save(work: Path, repeat: int, device: str) -> None:
    state = {f"layer{i}.weight": torch.randn(4096, 4096, device=device) for i in range(16)}
    size = sum(t.numel() * t.element_size() for t in state.values())
    runs = ways(state, work, device)
    results = {name: [] for name in runs}
    for name in ("copy (reused)", "dcp.save", "dcp.async_save", "dlaunch async"):
        runs[name](repeat)   # warm-up: allocations kept for reuse, imports, threads land on no one
        clear(work)
    names = list(runs)
    for n in range(repeat):
        order = names[:]
        random.Random(n).shuffle(order)   # a new order each time: no way always follows the same one
        for name in order:
            results[name].append(runs[name](n))
            clear(work)
    if "torch.distributed" in sys.modules and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()   # save_sliced (merge below) would take it for the job's
    print(f"save: {size / GIB:.2f} GiB of {device} tensors, median of {repeat}, order shuffled")
    print(f"  {'how':18s} {'stall s':>8s} {'end s':>8s} {'GiB/s':>7s}   (each: stall/end)")
    median = {}
    for name in names:
        stall = statistics.median(s for s, _ in results[name])
        end = statistics.median(e for _, e in results[name])
        median[name] = stall, end
        each = ", ".join(f"{s:.2f}/{e:.2f}" for s, e in results[name])
        print(f"  {name:18s} {stall:8.3f} {end:8.3f} {size / GIB / end:7.2f}   ({each})")
    floor, raw = median["floor"][0], median["raw"][1]
    stall_ratio = median["dlaunch async"][0] / floor
    if device == "cpu":
        stall = median['dlaunch async'][0] / median['copy (reused)'][0]
        print(f"  async stall / copy into reused buffers: {stall:.2f}")
    sync_ratio, async_ratio = raw / median["dlaunch sync"][1], raw / median["dlaunch async"][1]
    print(f"  async stall / floor: {stall_ratio:.2f} (goal <= 2: {'met' if stall_ratio <= 2 else 'NOT met'})")
    for label, ratio in (("sync", sync_ratio), ("async", async_ratio)):
        verdict = "met" if ratio >= 0.8 else "NOT met"
        print(f"  {label} throughput / raw write+fsync: {ratio:.2f} (goal >= 0.8: {verdict})")
    print(f"  dlaunch sync vs torch.save+fsync: {median['torch.save+fsync'][1] / median['dlaunch sync'][1]:.2f}x "
          f"faster; async stall vs dcp.async_save stall: "
          f"{median['dcp.async_save'][0] / median['dlaunch async'][0]:.1f}x shorter")


def bench_merge(work: Path, repeat: int) -> None:
    run = work / "run"
    full = {"embed": torch.randn(8192, 1024), "up.weight": torch.randn(8192, 4096),
            "down.weight": torch.randn(4096, 8192), "down.bias": torch.randn(4096)}
    strategy = {"model.up.weight": 0, "model.down.weight": 1}
    saved = dict(os.environ)
    try:
        os.environ["WORLD_SIZE"] = "4"
        for rank in range(4):
            os.environ["RANK"] = str(rank)
            part = dict(full, **{"up.weight": full["up.weight"].chunk(4, 0)[rank],
                                 "down.weight": full["down.weight"].chunk(4, 1)[rank]})
            checkpoint.save_sliced({"model": part, "epoch": 1}, strategy, 1, 100,
                                   directory=str(run / f"rank_00{rank}" / "ckpt"))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    read = sum(p.stat().st_size for p in run.rglob("*.pt"))
    times, written = [], 0
    for n in range(repeat):
        output = work / f"merged-{n}.pt"
        settle()
        start = time.perf_counter()
        ckpttool.merge(str(run), str(output))
        times.append(time.perf_counter() - start)
        written = output.stat().st_size
        merged = torch.load(output, mmap=True)
        assert torch.equal(merged["model"]["up.weight"], full["up.weight"])
        del merged
        output.unlink()
    t = statistics.median(times)
    print(f"merge: 4 ranks, {read / MB:.0f} MB of slice files -> {written / MB:.0f} MB full checkpoint, "
          f"{repeat} repetitions, median {t:.3f} s")
    print(f"  read {read / MB / t:.0f} MB/s, written {written / MB / t:.0f} MB/s   "
          f"(each: {', '.join(f'{t_:.3f} s' for t_ in times)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=("save", "merge"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--settle", type=float, default=SETTLE, help="seconds of rest before each timed save")
    args = parser.parse_args()
    globals()["SETTLE"] = args.settle
    work = Path(tempfile.mkdtemp(prefix="bench_checkpoint_"))
    try:
        if args.only in (None, "save"):
            bench_save(work, args.repeat, args.device)
        if args.only in (None, "merge"):
            bench_merge(work, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

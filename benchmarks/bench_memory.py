"""The memory tier on this machine: how long a memory save stalls training, how fast a step comes back from memory.

A 1 GiB state (16 float32 tensors of 64 MiB, on the CPU) of one rank, in one run, each way in a new (seeded)
order every repetition, after warm-up saves (so every way is in its steady state: buffers and slots kept), and
after ``--settle`` seconds of rest (``os.sync`` first) before each timed operation:

  save (stall: until the call returns)
    memory       ``checkpoint.save(state, ..., memory=True)`` into two slots under a temporary directory in
                 /dev/shm (``DLAUNCH_MEMORY_SLOTS``): the copy in place, the archive's headers, the commit record
    copy         ``stage.capture`` into a warm ``BufferPool``: the copy into kept buffers an ``async_save`` makes
                 (the issue's baseline)
    torch.save   into a file on the disk (page cache, not fsynced)
    disk         ``checkpoint.save`` to the disk (atomic: temporary, fsync, rename, directory fsync)
  restore (until the state is in the process's own memory)
    memory       ``checkpoint.load()`` of that step from its slot (``DLAUNCH_RESUME_FROM`` names it): verify, copy
    disk, cold   ``torch.load`` of the disk checkpoint after ``fsync`` and ``posix_fadvise(DONTNEED)`` dropped its
                 pages from the page cache (the hypervisor below this VM may still cache the disk)
    disk, hot    ``torch.load`` of the same file with its pages in the page cache
    clone        ``tensor.clone()`` of every tensor: a copy into fresh memory, what any restore that must not
                 alias the slot costs at least (for context)
    mapped       ``checkpoint.load(map_memory=True)``: the slot verified and mapped copy-on-write, no copy (the
                 slot is retired: the next save there makes a new file); pages are read on first use
    mapped+read  the same, then every tensor summed (every page read once), as a first use would

Reported: the median of ``--repeat`` per way and every value; the goals' ratios: memory save stall / copy
(goal <= 1.2) and cold disk restore / memory restore (goal >= 5).  Files live in temporary directories under
/dev/shm (the slots) and TMPDIR (default /tmp; the disk files), removed at the end.  About 3 minutes.

Run:  .venv/bin/python benchmarks/bench_memory.py [--repeat N] [--settle SECONDS]
"""

from __future__ import annotations

import argparse
import functools
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
from launcher.checkpoint import stage as ckptstage  # noqa: E402
from launcher.contract import MEMORY_SLOTS_ENV, RESUME_FROM_ENV  # noqa: E402

GIB = 1 << 30
SETTLE = 1.0


def settle():
    os.sync()
    time.sleep(SETTLE)


def timed(fn):
    settle()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def bench(work: Path, shm: Path, repeat: int) -> None:
    state = {f"layer{i}.weight": torch.randn(4096, 4096) for i in range(16)}
    size = sum(t.numel() * t.element_size() for t in state.values())
    slots = shm / "rank_000" / "slots"
    slots.mkdir(parents=True)
    os.environ[MEMORY_SLOTS_ENV] = str(slots)
    os.environ.pop(RESUME_FROM_ENV, None)
    pool = ckptstage.BufferPool(limit=2 * size)
    step = [0]

    def memory_save():
        step[0] += 1
        return checkpoint.save(state, 0, step[0], memory=True)

    def copy():
        snapshot = ckptstage.capture(state, pool)
        pool.give_back(snapshot.buffers)

    saves = {"memory": memory_save, "copy": copy,
             "torch.save": lambda: torch.save(state, work / "plain.pt"),
             "disk": lambda: checkpoint.save(state, 1, 0, prefix="disk", directory=str(work))}
    memory_save(), memory_save(), copy()        # warm-up: both slots laid out, the pool's buffers kept
    results: dict[str, list[float]] = {name: [] for name in saves}
    for n in range(repeat):
        order = list(saves)
        random.Random(n).shuffle(order)
        for name in order:
            results[name].append(timed(saves[name])[0])
    assert equal(torch.load(work / "disk-1_0.pt", weights_only=True), state)

    disk_file = work / "disk-1_0.pt"
    os.environ[RESUME_FROM_ENV] = str(work / f"ckpt-0_{step[0]}.pt")   # the newest memory step's name

    def memory_load():
        loaded = checkpoint.load()
        assert loaded is not None
        return loaded

    def cold():
        drop_cache(disk_file)
        start = time.perf_counter()
        torch.load(disk_file, weights_only=True)
        return time.perf_counter() - start

    def hot():
        torch.load(disk_file, weights_only=True)   # its pages into the cache, untimed, then the settle as for all
        settle()
        start = time.perf_counter()
        torch.load(disk_file, weights_only=True)
        return time.perf_counter() - start

    seconds, loaded = timed(memory_load)
    assert equal(loaded, state)
    del loaded
    def mapped(read: bool):
        loaded = checkpoint.load(map_memory=True)
        assert loaded is not None
        if read:
            for tensor in loaded.values():
                tensor.sum()
        return loaded

    loads: dict[str, list[float]] = {"memory": [], "disk, cold": [], "disk, hot": [], "clone": [], "mapped": [],
                                     "mapped+read": []}
    for n in range(repeat):
        order = list(loads)
        random.Random(100 + n).shuffle(order)
        for name in order:
            if name == "memory":
                loads[name].append(timed(memory_load)[0])
            elif name == "clone":
                loads[name].append(timed(lambda: {key: value.clone() for key, value in state.items()})[0])
            elif name.startswith("mapped"):
                loads[name].append(timed(functools.partial(mapped, name == "mapped+read"))[0])
            elif name == "disk, cold":
                settle()
                loads[name].append(cold())
            else:
                loads[name].append(hot())

    print(f"memory tier: {size / GIB:.2f} GiB of CPU float32 tensors (16 x 64 MiB), median of {repeat}, "
          f"order shuffled, {SETTLE:g} s settle")
    median = {}
    for title, table in (("save stall", results), ("restore", loads)):
        print(f"  {title}:")
        for name, values in table.items():
            median[(title, name)] = statistics.median(values)
            each = ", ".join(f"{v:.3f}" for v in values)
            print(f"    {name:12s} {median[(title, name)]:8.3f} s  {size / GIB / median[(title, name)]:6.2f} GiB/s"
                  f"   ({each})")
    stall = median[("save stall", "memory")] / median[("save stall", "copy")]
    cold_ratio = median[("restore", "disk, cold")] / median[("restore", "memory")]
    hot_ratio = median[("restore", "disk, hot")] / median[("restore", "memory")]
    floor_ratio = median[("restore", "memory")] / median[("restore", "clone")]
    mapped_ratio = median[("restore", "disk, cold")] / median[("restore", "mapped")]
    read_ratio = median[("restore", "disk, cold")] / median[("restore", "mapped+read")]
    print(f"  memory save stall / copy into kept buffers: {stall:.2f} (goal <= 1.2: "
          f"{'met' if stall <= 1.2 else 'NOT met'})")
    print(f"  restore: memory {cold_ratio:.2f}x faster than the disk file, cold (goal >= 5: "
          f"{'met' if cold_ratio >= 5 else 'NOT met'}); {hot_ratio:.2f}x than the disk file, hot; "
          f"{floor_ratio:.2f}x the time of a clone into fresh memory")
    print(f"  restore mapped (load(map_memory=True)): {mapped_ratio:.0f}x faster than the disk file, cold "
          f"({'met' if mapped_ratio >= 5 else 'NOT met'}); with every page read once: {read_ratio:.2f}x")
    memory = median[("save stall", "memory")]
    print(f"  memory save stall vs torch.save: {median[('save stall', 'torch.save')] / memory:.1f}x shorter; "
          f"vs checkpoint.save to disk: {median[('save stall', 'disk')] / memory:.1f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--settle", type=float, default=SETTLE, help="seconds of rest before each timed step")
    args = parser.parse_args()
    globals()["SETTLE"] = args.settle
    work = Path(tempfile.mkdtemp(prefix="bench_memory_"))
    shm = Path(tempfile.mkdtemp(prefix="bench_memory_", dir="/dev/shm"))
    try:
        bench(work, shm, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``dlaunch msrun --dry-run`` of a 32,768-worker job, whole process (issue 45): with one worker per host
(``--local_worker_num 1``: 32,768 hosts, where the check for a server block pasted twice once compared every
server with every earlier one and took minutes) and with eight (4,096 hosts), each also at a quarter of the size
so the ratio of the two shows whether planning grew faster than the job (linear: about 4x, less the fixed cost
of starting Python). Goal: each 32,768-worker dry run under 2 s.  There is no peer: MindSpore's msrun has no
dry run.

Run:  .venv/bin/python benchmarks/bench_msrun_dry.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DLAUNCH = [sys.executable, "-m", "launcher"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}   # this tree's launcher, not the one the interpreter installed
GOAL = 2.0
WORKERS = 32768


def wall(argv: list, repeat: int, cwd: Path) -> float:
    """Median seconds of ``argv`` run ``repeat`` times, which must exit 0."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"{argv} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_msrun_dry_") as tmp:
        work = Path(tmp)
        (work / "train.py").touch()   # the script must exist, also for a dry run
        floor = wall([sys.executable, "-c", "pass"], args.repeat, work)
        for local in (1, 8):
            for workers in (WORKERS // 4, WORKERS):
                seconds = wall([*DLAUNCH, "msrun", f"--worker_num={workers}", f"--local_worker_num={local}",
                                "--node_rank=0", "--master_addr=127.0.0.1", "--dry-run", "train.py"], args.repeat, work)
                rows.append((local, workers, seconds))
    print(f"median of {args.repeat}; Python's own start here: {floor * 1000:.0f} ms")
    print(f"{'msrun --dry-run':44} {'wall':>8}  {'vs a quarter the size':>22}  goal")
    previous: dict[int, float] = {}
    for local, workers, seconds in rows:
        growth = f"{seconds / previous[local]:.1f}x for 4x" if local in previous else ""
        previous[local] = seconds
        verdict = f"< {GOAL:g} s: {'met' if seconds < GOAL else 'MISSED'}" if workers == WORKERS else ""
        name = f"{workers:,} workers, {local} a host ({workers // local:,} hosts)"
        print(f"{name:44} {seconds:7.2f}s  {growth:>22}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

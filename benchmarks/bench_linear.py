"""Everything besides spawning stays linear in the job's size (issue 22): whole-process wall times of

- validating a 32,768-rank table (4,096 servers) and planning this host's share of it (``--dry-run``),
- ``dlaunch msrun --dry-run`` for 32,768 workers,
- ``dlaunch status`` of a real 1,024-rank run (ranks are ``/bin/true``),

each also at a quarter of the size, so the ratio of the two shows whether a step grew faster than the job
(a linear step: about 4x, less the fixed cost of starting Python). Goals: the 32,768-rank table validated
and planned in under 2 s each; status of 1,024 ranks under 0.5 s.  There is no peer: torchrun has no rank
table, msrun no dry run, and neither keeps a run directory.

Run:  .venv/bin/python benchmarks/bench_linear.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_validate import big_table  # noqa: E402

DLAUNCH = [sys.executable, "-m", "launcher"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}   # this tree's launcher, not the one the interpreter installed


def wall(argv: list, repeat: int, cwd: Path) -> float:
    """Median seconds of ``argv`` run ``repeat`` times, which must exit 0."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(list(map(str, argv)), cwd=cwd, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"{argv} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_linear_") as tmp:
        work = Path(tmp)
        (work / "train.py").touch()   # msrun's script must exist, also for a dry run
        for servers in (1024, 4096):
            table = work / f"rt{servers}.json"
            table.write_text(json.dumps(big_table(servers)))
            ranks = servers * 8
            rows.append((f"validate-ranktable, {ranks:,} ranks",
                         wall([*DLAUNCH, "validate-ranktable", "-q", table], args.repeat, work), 2.0))
            rows.append((f"cluster --dry-run, {ranks:,} ranks",
                         wall([*DLAUNCH, "cluster", "--no-python", "/bin/true", "--rank-table", table,
                               "--rank-start", "0", "--dry-run"], args.repeat, work), 2.0))
            rows.append((f"msrun --dry-run, {ranks:,} workers",
                         wall([*DLAUNCH, "msrun", f"--worker_num={ranks}", "--local_worker_num=8", "--node_rank=0",
                               "--master_addr=127.0.0.1", "--dry-run", "train.py"], args.repeat, work), 2.0))
        for ranks in (256, 1024):
            subprocess.run([*DLAUNCH, "run", "--no-python", "/bin/true", "--ranks", str(ranks), "--profile",
                            "structure", "--console", "none", "--run-id", f"r{ranks}"], cwd=work, env=ENV, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rows.append((f"status of a {ranks:,}-rank run",
                         wall([*DLAUNCH, "status", f"dlaunch_runs/r{ranks}"], args.repeat, work),
                         0.5 if ranks == 1024 else None))
    floor = wall([sys.executable, "-c", "pass"], args.repeat, ROOT)
    print(f"median of {args.repeat}; Python's own start here: {floor * 1000:.0f} ms")
    print(f"{'measurement':42} {'wall':>8}  {'vs a quarter the size':>22}  goal")
    previous: dict[str, float] = {}
    for name, seconds, goal in rows:
        kind = name.split(",")[0].split(" of ")[0]
        growth = f"{seconds / previous[kind]:.1f}x for 4x" if kind in previous else ""
        previous[kind] = seconds
        verdict = "" if goal is None else f"< {goal:g} s: {'met' if seconds < goal else 'MISSED'}"
        print(f"{name:42} {seconds:7.2f}s  {growth:>22}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

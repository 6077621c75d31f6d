"""What hang detection costs: launcher CPU for an 8-rank job printing 10,000 lines a second in all,
with --hang-timeout and without it (goal: the watchdog adds under 1% of one core).

Run: .venv/bin/python benchmarks/bench_watchdog.py [--seconds 10] [--repeat 3]

Each rank prints 1,250 lines a second (rank 0 through the console pipe, the
others straight into their logs, dlaunch's default). The launcher's own CPU
time (user+system, not the ranks') is read when it exits; runs with and
without the watchdog alternate.
"""

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_run import run_launcher  # noqa: E402

PACED = str(Path(__file__).resolve().parent / "ranks" / "paced.py")
DLAUNCH = [sys.executable, "-m", "launcher"]


def one(tmp: str, seconds: float, watchdog: bool) -> tuple[float, float]:
    argv = [*DLAUNCH, "run", PACED, "--ranks", "8", "--output-dir", tmp]
    if watchdog:
        argv += ["--hang-timeout", "60"]
    run = run_launcher("dlaunch", argv + ["--", "1250", str(seconds)], dict(os.environ, PYTHONUNBUFFERED="1"),
                       tmp)
    if run.exit_code != 0:
        sys.exit(f"dlaunch exited {run.exit_code}: {run.stderr}")
    return run.cpu_own, run.wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with_dog, without = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for watchdog in ((True, False) if i % 2 == 0 else (False, True)):
                (with_dog if watchdog else without).append(one(tmp, args.seconds, watchdog))
    cpu_with = statistics.median(c for c, _ in with_dog)
    cpu_without = statistics.median(c for c, _ in without)
    wall = statistics.median(w for _, w in with_dog)
    extra = (cpu_with - cpu_without) / wall * 100
    print(f"8 ranks x 1,250 lines/s for {args.seconds:g} s, median of {args.repeat}")
    print(f"launcher CPU without --hang-timeout: {cpu_without:.3f} s  {[round(c, 3) for c, _ in without]}")
    print(f"launcher CPU with --hang-timeout 60: {cpu_with:.3f} s  {[round(c, 3) for c, _ in with_dog]}")
    print(f"watchdog adds {extra:.2f}% of one core over {wall:.1f} s wall (goal < 1%): "
          + ("met" if extra < 1 else "MISSED"))
    return 0 if extra < 1 else 1


if __name__ == "__main__":
    sys.exit(main())

"""What reading the ranks' step lines costs a launch (issue 37): console throughput and launcher CPU with the
step reader on (dlaunch's default, ``--straggler-report 60``) and off (``--straggler-report 0``, the launcher
before it), beside torchrun ``--tee 3``, 8 ranks each printing N Megatron step lines as fast as they can, every
line on the console (``--console all``: the tee and the reader both see every byte), or ``--console 0`` (rank
0's lines only: the others' logs are read by the step reader alone, at most 64 KiB per look).

Run: .venv/bin/python benchmarks/bench_steps.py [--lines 100000] [--repeat 3]

Printed: launcher wall and CPU medians of each, the ratio on/off (goal: within noise, <= 1.10) and on/torchrun.
"""

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import RANKS_DIR, dlaunch_command, run_launcher  # noqa: E402

SCRIPT = str(RANKS_DIR / "steplines.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
KINDS = ("on", "off", "torchrun")


def argv(kind: str, out: str, lines: int, console: str) -> list[str]:
    if kind == "torchrun":
        shown = ["--tee", "3"] if console == "all" else ["--tee", "3", "--local-ranks-filter", "0"]
        return [TORCHRUN, "--standalone", "--nproc-per-node", "8", *shown, "--log-dir", out, SCRIPT, str(lines)]
    report = ["--straggler-report", "0"] if kind == "off" else []
    return [*dlaunch_command(), "run", SCRIPT, "--ranks", "8", "--console", console, "--output-dir", out, *report,
            "--", str(lines)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--console", choices=("all", "0"), default="all",
                        help="all: every line on the console (default); 0: rank 0's only, the others' logs read by "
                             "the step reader alone (dlaunch's default console)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            for kind in (KINDS if rep % 2 == 0 else tuple(reversed(KINDS))):
                out = tempfile.mkdtemp(dir=tmp)
                with open(os.path.join(out, "console.txt"), "wb") as console:
                    run = run_launcher(kind, argv(kind, out, args.lines, args.console), env, tmp, stdout=console)
                if run.exit_code != 0:
                    sys.exit(f"{kind}: exited {run.exit_code}: {run.stderr[-500:]}")
                results[kind].append((run.wall, run.cpu_own))
    median = {kind: (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
              for kind, values in results.items()}
    shown = "every line on the console" if args.console == "all" else "rank 0's lines on the console"
    print(f"8 ranks x {args.lines:,} Megatron step lines each, {shown}; median of {args.repeat}")
    for kind in KINDS:
        wall, cpu = median[kind]
        print(f"  {kind:8s} wall {wall:.3f} s  launcher CPU {cpu:.3f} s  "
              f"{[(round(w, 3), round(c, 3)) for w, c in results[kind]]}")
    wall_ratio, cpu_ratio = median["on"][0] / median["off"][0], median["on"][1] / median["off"][1]
    print(f"step reader on/off: wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f} (goal: within noise, <= 1.10); "
          f"on/torchrun: wall {median['on'][0] / median['torchrun'][0]:.3f}, "
          f"CPU {median['on'][1] / median['torchrun'][1]:.3f}")
    return 0 if wall_ratio <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())

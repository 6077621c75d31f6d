"""Launch cost as the job grows: `dlaunch run` beside `torchrun`, 1 to 1,024 ranks of `/bin/true`, in one run.

For each size N, both launchers start N ranks that exit at once, alternately (the order flips each
repetition):

    dlaunch run --no-python /bin/true --ranks N --profile structure --console none --output-dir TMP
    torchrun --standalone --nproc-per-node N --no-python /bin/true

Measured per launcher run (benchmarks/harness.py, the same for every side-by-side benchmark): the wall time
of the launcher process (start to exit, its ranks included), the launcher's own CPU time (user + system of
the launcher process alone, ranks and helpers excluded, read from /proc/PID/stat after it exited and before
it is reaped), the CPU of the children it reaped (ranks; dlaunch's ranks include their setpriv exec), and its
peak RSS (VmHWM).  Reported: medians, the dlaunch/torchrun ratio from the same run, the CPU per rank.
Goals (issue 22): dlaunch faster at every N, wall <= 0.5x torchrun's at 1,024, launcher CPU per rank <= 0.3 ms,
peak RSS <= 64 MiB at 1,024.

Where the run directories live matters on some machines: every rank costs dlaunch four new inodes (its rank
directory, its checkpoint directory, env.log, output.log) and torchrun one or two; ``--tmp /dev/shm`` puts
both launchers' files (dlaunch's --output-dir, torchrun's TMPDIR) on a tmpfs, to tell the filesystem's cost
from the launcher's.  In the same run, ``scale_floor.py`` (a bare loop making those four inodes and one
setpriv spawn per rank, nothing else) is measured by the same harness: the kernel's floor under dlaunch's
directory contract, so that the launcher's CPU per rank above it is its own Python.

Nothing is removed between runs, only at the end: on the ext4 disks of the machines this was measured on,
creating an inode in the seconds after thousands were deleted costs 0.4-0.9 ms of kernel CPU instead of
~0.02 ms (``discard`` at work), and a run removed before the next would charge that to the next launcher.

Run:  .venv/bin/python benchmarks/bench_scale.py [--sizes 1,8,64,256,1024] [--repeat 3] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import MIB, Row, alternating, dlaunch_command, print_table, run_launcher  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CPU_GOAL_MS, RSS_GOAL_MIB, RATIO_GOAL_AT_1024 = 0.3, 64, 0.5


def argv(launcher: str, ranks: int, out: Path) -> list[str]:
    if launcher == "dlaunch":
        return [*dlaunch_command(), "run", "--no-python", "/bin/true", "--ranks", str(ranks),
                "--profile", "structure", "--console", "none", "--output-dir", str(out)]
    return [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(ranks), "--no-python", "/bin/true"]


def floor_argv(ranks: int, out: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve().parent / "scale_floor.py"), str(ranks), str(out)]


def one_run(launcher: str, ranks: int, root: str):
    """One launch in a directory of its own under ``root`` (kept until the end), measured by the shared
    harness; exits the benchmark if it fails."""
    work = Path(tempfile.mkdtemp(prefix=f"{launcher}-{ranks}-", dir=root))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(work)}   # torchrun leaves files in TMPDIR
    command = floor_argv(ranks, work / "runs") if launcher == "floor" else argv(launcher, ranks, work / "runs")
    run = run_launcher(launcher, command, env, str(work), timeout=600)
    if run.exit_code != 0 or run.timed_out:
        raise SystemExit(f"{launcher} with {ranks} ranks exited {run.exit_code}: {run.stderr[-400:]}")
    return run


def measure(size: int, repeat: int, root: str) -> list[Row]:
    runs: dict[str, list] = {"dlaunch": [], "torchrun": [], "floor": []}
    for _, launcher in alternating(repeat, "dlaunch", "torchrun"):
        runs[launcher].append(one_run(launcher, size, root))
        if launcher == "dlaunch":
            runs["floor"].append(one_run("floor", size, root))
    wall = Row(f"{size:5d} ranks: launcher wall", "s", [r.wall for r in runs["dlaunch"]],
               [r.wall for r in runs["torchrun"]], "faster" + (", <= 0.5x" if size >= 1024 else ""), False)
    wall.met = wall.ratio < (RATIO_GOAL_AT_1024 if size >= 1024 else 1.0)
    cpu = Row(f"{size:5d} ranks: launcher's own CPU per rank", "ms",
              [r.cpu_own / size * 1000 for r in runs["dlaunch"]], [r.cpu_own / size * 1000 for r in runs["torchrun"]],
              f"<= {CPU_GOAL_MS:g} ms" if size >= 1024 else "- (start-up over few ranks)", True)
    if size >= 1024:   # the goal is the cost of a rank where start-up no longer counts
        cpu.met = cpu.dl_median <= CPU_GOAL_MS
    floor = statistics.median(r.cpu_own / size * 1000 for r in runs["floor"])
    cpu.notes.append(f"the kernel's floor under the directory contract (scale_floor.py, same run): {floor:.3f} ms "
                     f"per rank; dlaunch above it: {cpu.dl_median - floor:.3f} ms per rank")
    children = {k: sorted(r.cpu_children / size * 1000 for r in v) for k, v in runs.items()}
    cpu.notes.append(f"CPU per rank of the ranks it reaped (ms): dlaunch {children['dlaunch']}, "
                     f"torchrun {children['torchrun']}")
    rss = Row(f"{size:5d} ranks: launcher peak RSS", "MiB", [r.peak_rss / MIB for r in runs["dlaunch"]],
              [r.peak_rss / MIB for r in runs["torchrun"]], f"<= {RSS_GOAL_MIB} MiB", False)
    rss.met = rss.dl_median <= RSS_GOAL_MIB
    return [wall, cpu, rss]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,8,64,256,1024")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tmp", default=None, help="where both launchers' files go (default: TMPDIR)")
    args = parser.parse_args()
    if not (BIN / "torchrun").exists():
        parser.error(f"{BIN / 'torchrun'} not found: run with the venv's python (.venv/bin/python)")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="dlaunch-scale-", dir=args.tmp) as root:
        for size in (int(s) for s in args.sizes.split(",")):
            rows.extend(measure(size, args.repeat, root))
            print(f"{size} ranks measured", file=sys.stderr, flush=True)
    where = f"; files in {args.tmp}" if args.tmp else ""
    print_table(rows, "torchrun", args.repeat, f" run (ranks are /bin/true{where})")
    return 0 if all(row.met for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

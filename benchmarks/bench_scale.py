"""Launch cost as the job grows: `dlaunch run` beside `torchrun`, 1 to 1,024 ranks of `/bin/true`, in one run.

For each size N, both launchers start N ranks that exit at once, alternately (the order flips each
repetition):

    dlaunch run --no-python /bin/true --ranks N --profile structure --console none --output-dir TMP
    torchrun --standalone --nproc-per-node N --no-python /bin/true

Measured per launcher run: the wall time of the launcher process (start to exit, its ranks included), and
the launcher's own CPU time (user + system of the launcher process alone, ranks and helpers excluded, read
from /proc/PID/stat after it exited and before it is reaped).  Reported: medians, the dlaunch/torchrun
ratio, and the launcher's CPU per rank.  Goals (issue 22): dlaunch faster at every N, wall <= 0.5x
torchrun's at 1,024, launcher CPU per rank <= 0.3 ms.

Run:  .venv/bin/python benchmarks/bench_scale.py [--sizes 1,8,64,256,1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def argv(launcher: str, ranks: int, out: Path) -> list[str]:
    if launcher == "dlaunch":
        return [sys.executable, "-m", "launcher", "run", "--no-python", "/bin/true", "--ranks", str(ranks),
                "--profile", "structure", "--console", "none", "--output-dir", str(out)]
    return [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(ranks), "--no-python", "/bin/true"]


def one_run(launcher: str, ranks: int) -> tuple[float, float]:
    """(wall seconds, the launcher's own CPU seconds) of one launch."""
    work = Path(tempfile.mkdtemp(prefix="dlaunch-scale-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(work)}   # torchrun leaves files in TMPDIR
    try:
        started = time.perf_counter()
        proc = subprocess.Popen(argv(launcher, ranks, work / "runs"), cwd=work, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)   # exited, not yet reaped: its stat is final
        wall = time.perf_counter() - started
        with open(f"/proc/{proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{launcher} with {ranks} ranks exited {proc.returncode}: {err.decode()[-400:]}")
        return wall, own
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,8,64,256,1024")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not (BIN / "torchrun").exists():
        parser.error(f"{BIN / 'torchrun'} not found: run with the venv's python (.venv/bin/python)")
    print(f"machine: {os.cpu_count()} cores; ranks are /bin/true; median of {args.repeat} alternating runs each")
    print(f"{'ranks':>6} {'dlaunch':>9} {'torchrun':>9} {'ratio':>6}  {'dlaunch CPU/rank':>16} "
          f"{'torchrun CPU/rank':>17}")
    met = True
    for size in (int(s) for s in args.sizes.split(",")):
        runs: dict[str, list[tuple[float, float]]] = {"dlaunch": [], "torchrun": []}
        for i in range(args.repeat):
            for launcher in (("dlaunch", "torchrun") if i % 2 == 0 else ("torchrun", "dlaunch")):
                runs[launcher].append(one_run(launcher, size))
        wall = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
        cpu = {k: statistics.median(c for _, c in v) / size * 1000 for k, v in runs.items()}
        ratio = wall["dlaunch"] / wall["torchrun"]
        met = met and ratio < 1 and (size < 1024 or ratio <= 0.5)
        print(f"{size:>6} {wall['dlaunch']:>8.3f}s {wall['torchrun']:>8.3f}s {ratio:>6.2f}  "
              f"{cpu['dlaunch']:>13.2f} ms {cpu['torchrun']:>14.2f} ms", flush=True)
    print("goal (faster at every size, <= 0.5x at 1,024):", "met" if met else "NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

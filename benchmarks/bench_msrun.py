"""`dlaunch msrun` measured side by side with MindSpore's own `msrun`, in the same run, on this machine.

Both get the same msrun command line; only the program differs (``msrun ...`` vs ``dlaunch msrun ...``).
Runs alternate (the order flips each repetition); the table shows the median of each, the ratio
dlaunch/msrun and whether dlaunch meets its goal.  The rank script is ``ranks/ms_init.py`` (MindSpore 2.10 on
CPU; both launchers also start MindSpore's scheduler, which runs the same script).

1. launch N  Wall time of the launcher process for N ranks (4, then 8) that call init() and exit 0:
               msrun --worker_num=N --local_worker_num=N --master_port=P --log_dir=TMP --join=True ms_init.py
               dlaunch msrun (the same flags)
             msrun needs --join=True to wait for its workers; dlaunch always does.  Both must exit 0.
             Goal: dlaunch no slower than msrun (<= 1.0x).
2. failfast  4 ranks; after init() rank 3 sleeps 0.5 s, writes time.time() and exits 3 (os._exit); the others
             sleep.  Latency = the moment the benchmark's waitid() sees the launcher exit minus the stamp.
             Goal: dlaunch exits 3 (the failing rank's code) within its grace period (10 s, the default)
             plus 1 s.  msrun kills the other workers, then waits for its scheduler and exits 1.

Every run gets a free port (msrun's default 8118 may be taken) and GLOG_v=3 (MindSpore's errors only, for
both).  After each run, any process still running ranks/ms_init.py is reported as left behind (and killed).

Run:  .venv/bin/python benchmarks/bench_msrun.py [--repeat N] [--only launch4,launch8,failfast] [--quick]
      --quick: 1 repetition, no warm-up (a smoke test, not a measurement).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402  (the shared harness: one run measured, one table)
    Row,
    alternating,
    describe_procs,
    fmt_list,
    kill_procs,
    print_table,
    rank_processes,
    run_launcher,
)

HERE = Path(__file__).resolve().parent
MS_INIT = str(HERE / "ranks" / "ms_init.py")
BIN = Path(sys.executable).parent
LAUNCHERS = {"msrun": [str(BIN / "msrun")], "dlaunch": [str(BIN / "dlaunch"), "msrun"]}
FAIL_RANKS = 4
FAIL_RANK = 3
FAIL_DELAY = 0.5
GRACE = 10.0                 # dlaunch's default --grace-period
RUN_TIMEOUT = 300.0          # msrun's fail-fast alone waits about half a minute for its scheduler
MEASUREMENTS = ("launch4", "launch8", "failfast")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Bench:
    def __init__(self, tmp: Path, repeat: int, warmup: bool):
        self.tmp, self.repeat, self.warmup = tmp, repeat, warmup
        # msrun runs "python SCRIPT" from PATH: the venv's python first, the one dlaunch runs ranks with
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "GLOG_v": "3", "TMPDIR": str(tmp / "tmpdir"),
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        (tmp / "tmpdir").mkdir()
        self.problems: list[str] = []
        self._n = 0

    def fresh(self, stem: str) -> Path:
        self._n += 1
        path = self.tmp / f"{stem}-{self._n}"
        path.mkdir()
        return path

    def run(self, launcher: str, ranks: int, *script_args: str):
        work = self.fresh(launcher)
        argv = [*LAUNCHERS[launcher], f"--worker_num={ranks}", f"--local_worker_num={ranks}",
                f"--master_port={free_port()}", f"--log_dir={work / 'logs'}", "--join=True", MS_INIT, *script_args]
        run = run_launcher(launcher, argv, self.env, str(work), timeout=RUN_TIMEOUT)
        if run.timed_out:
            self.problems.append(f"{launcher} did not exit within {RUN_TIMEOUT:g} s (killed)")
        if run.leftovers:
            self.problems.append(f"{launcher} exited leaving processes alive: " + "; ".join(run.leftovers))
        return run, work

    def pairs(self, ranks: int, make_args=lambda work: ()):
        """(launcher, Run, work dir) for msrun and dlaunch, self.repeat times each, alternating who goes first."""
        if self.warmup:
            self.run("msrun", ranks)     # untimed: the first MindSpore imports fill the page cache
        for _, launcher in alternating(self.repeat, "msrun", "dlaunch"):
            stamp_dir = self.fresh("stamp")
            run, _ = self.run(launcher, ranks, *make_args(stamp_dir))
            yield launcher, run, stamp_dir

    def launch(self, ranks: int) -> Row:
        walls = {"msrun": [], "dlaunch": []}
        codes = {"msrun": [], "dlaunch": []}
        for launcher, run, _ in self.pairs(ranks):
            walls[launcher].append(run.wall)
            codes[launcher].append(run.exit_code)
            if run.exit_code != 0:
                self.problems.append(f"launch {ranks}: {launcher} exited {run.exit_code}: {run.stderr[-500:]}")
        row = Row(f"launch, {ranks} ranks init() and exit (wall)", "s", walls["dlaunch"], walls["msrun"],
                  "dlaunch <= 1.0 x msrun", False)
        row.met = row.dl_median <= row.peer_median and not any(codes["dlaunch"])
        row.notes.append(f"exit codes: msrun {codes['msrun']}, dlaunch {codes['dlaunch']}")
        return row

    def launch4(self) -> Row:
        return self.launch(4)

    def launch8(self) -> Row:
        return self.launch(8)

    def failfast(self) -> Row:
        lat = {"msrun": [], "dlaunch": []}
        codes = {"msrun": [], "dlaunch": []}
        walls = {"msrun": [], "dlaunch": []}
        for launcher, run, stamp_dir in self.pairs(FAIL_RANKS, lambda d: (str(d / "failed_at"), str(FAIL_DELAY),
                                                                          str(FAIL_RANK))):
            codes[launcher].append(run.exit_code)
            walls[launcher].append(run.wall)
            try:
                lat[launcher].append(run.ended - float((stamp_dir / "failed_at").read_text()))
            except (OSError, ValueError):
                self.problems.append(f"failfast: {launcher}: rank {FAIL_RANK} never wrote its stamp (exit "
                                     f"{run.exit_code}): {run.stderr[-500:]}")
        row = Row(f"fail-fast, rank {FAIL_RANK} of {FAIL_RANKS} exits {FAIL_RANK} after init()", "s",
                  lat["dlaunch"], lat["msrun"], f"dlaunch < {GRACE + 1:g} s, exit {FAIL_RANK}", False)
        row.met = (bool(lat["dlaunch"]) and max(lat["dlaunch"]) < GRACE + 1
                   and all(code == FAIL_RANK for code in codes["dlaunch"]))
        row.notes.append(f"exit codes: msrun {codes['msrun']}, dlaunch {codes['dlaunch']}")
        row.notes.append(f"launcher wall (s): msrun {fmt_list(walls['msrun'])}, dlaunch {fmt_list(walls['dlaunch'])}")
        return row


def mindspore_version() -> str:
    import mindspore

    return f" msrun (MindSpore {mindspore.__version__}, CPU)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=None, help="repetitions per launcher (default 3; 1 with --quick)")
    parser.add_argument("--only", default=None, help="comma list of: " + ", ".join(MEASUREMENTS))
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 repetition, no warm-up")
    args = parser.parse_args()
    only = MEASUREMENTS if not args.only else tuple(n.strip() for n in args.only.split(","))
    unknown = [n for n in only if n not in MEASUREMENTS]
    if unknown:
        parser.error(f"unknown measurement(s) {unknown}; choose from {', '.join(MEASUREMENTS)}")
    for tool in LAUNCHERS.values():
        if not os.access(tool[0], os.X_OK):
            parser.error(f"{tool[0]} not found: run with the venv's python (.venv/bin/python), MindSpore installed")
    repeat = args.repeat or (1 if args.quick else 3)
    rows: list[Row] = []
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="dlaunch-bench-msrun-"))
    bench = Bench(tmp, repeat, warmup=not args.quick)
    try:
        for name in MEASUREMENTS:
            if name in only:
                t0 = time.perf_counter()
                print(f"running {name} ...", file=sys.stderr, flush=True)
                rows.append(getattr(bench, name)())
                print(f"  {name} took {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    finally:
        left = describe_procs(rank_processes(launchers=True))
        kill_procs(rank_processes(launchers=True))
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(rows, "msrun", repeat, mindspore_version())
    print()
    print(f"rank processes alive at the end: {len(left)}" + "".join(f"\n    {d}" for d in left))
    print("problems seen:" + ("".join(f"\n    {p}" for p in bench.problems) if bench.problems else
                              " none (exit codes as expected, no rank outlived its launcher)"))
    print(f"total time {time.perf_counter() - started:.1f} s")
    return 0 if all(r.met for r in rows) and not bench.problems and not left else 1


if __name__ == "__main__":
    sys.exit(main())

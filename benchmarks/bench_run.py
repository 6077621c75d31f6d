"""`dlaunch run` measured side by side with `torchrun`, in the same run, on this machine.

Every measurement runs dlaunch and torchrun alternately (the order flips each
repetition), reports the median of each, the ratio dlaunch/torchrun and whether
dlaunch meets its goal.  The rank scripts are in ``benchmarks/ranks/`` and never
import torch, so the numbers are the launchers' own.

1. launch   Launch overhead: wall time of the whole launcher process for 8 ranks
            that exit 0 at once (``ranks/noop.py``):
              torchrun --standalone --nproc-per-node 8 noop.py
              dlaunch run noop.py --ranks 8 --output-dir TMP
            Goal: dlaunch <= 0.15 x torchrun.
2. failfast Fail-fast latency: 8 ranks (``ranks/fail.py``); rank 3 sleeps 0.5 s,
            writes time.time() to a file and calls os._exit(3); the others sleep
            forever.  Latency = the moment the benchmark's waitid() sees the
            launcher exit minus the stamp.  Both launchers must exit non-zero;
            dlaunch must exit 3 (the failing rank's code; torchrun always exits 1).
            Both use their default grace period (the sleeping ranks die on SIGTERM).
            Goal: dlaunch < 0.3 s.
3. memory   Launcher peak RSS: the launcher process only (not its ranks, not its
            helper processes): the kernel's per-process high-water mark VmHWM from
            /proc/PID/status, polled every 10 ms until the process exits, with 8
            ranks that sleep 1 s (``ranks/sleep.py``).  (``/usr/bin/time -f %M``
            and wait4()'s ru_maxrss are not used: on Linux they report the maximum
            over the process *and* its waited-for descendants.)  Helper processes
            that are not ranks (dlaunch's forked reaper) are listed separately.
            Goal: dlaunch < 40 MiB.
4. console  Console throughput: 8 ranks each write 100,000 lines, one
            sys.stdout.write per line (``ranks/spam.py``), PYTHONUNBUFFERED=1 for
            both launchers; ``dlaunch run --console all`` vs ``torchrun --tee 3
            --log-dir TMP`` (torchrun shows every local rank by default), console
            stdout to /dev/null.  Measured: the launcher process's own CPU time
            (user+system of all its threads, ranks excluded), read from
            /proc/PID/stat after it has exited but before it is reaped
            (waitid(WNOWAIT) leaves it a zombie whose stat holds the final times).
            Every run's logs must hold all 800,000 lines (dlaunch: rank_*/output.log,
            torchrun: */attempt_0/*/stdout.log).  One extra, untimed run of each
            writes the console to a file to check that every line reached it,
            prefixed with its own rank and in order.  Goal: dlaunch CPU <= torchrun CPU.

Both launchers get the same environment: the caller's, plus PYTHONUNBUFFERED=1
and TMPDIR pointing into the benchmark's temporary directory (torchrun leaves a
``torchelastic_*`` directory behind in TMPDIR on every run).  Everything is
deleted at the end; any rank process still alive after its launcher exited is
reported (and killed).

With ``--front torchrun`` dlaunch is started with torchrun's own command line (``dlaunch torchrun
--standalone --nproc-per-node 8 SCRIPT``): the figures of the torchrun front beside torchrun itself.

Run:  .venv/bin/python benchmarks/bench_run.py [--repeat N] [--only NAME[,NAME]] [--quick] [--front torchrun]
      NAME is one of launch, failfast, memory, console; --quick: 1 repetition,
      10,000 lines per rank, no warm-up runs (a smoke test, not a measurement).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402  (the shared harness: one run measured, one table)
    MIB,
    RANKS_DIR,
    RUN_TIMEOUT,
    Row,
    Run,
    describe_procs,
    fmt_list,
    kill_procs,
    print_table,
    rank_processes,
    run_launcher,
)

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
DLAUNCH = str(BIN / "dlaunch")
TORCHRUN = str(BIN / "torchrun")
NPROC = 8
FAIL_RANK = 3
FAIL_DELAY = 0.5
SLEEP_SECONDS = 1.0
LINES = 100_000
QUICK_LINES = 10_000
MEASUREMENTS = ("launch", "failfast", "memory", "console")
FRONT = "run"   # --front torchrun: dlaunch is started as `dlaunch torchrun --standalone ...`, torchrun's own line


def dlaunch_argv(script: str, out: Path, script_args=(), run_id: str | None = None,
                 console_all: bool = False) -> list[str]:
    """dlaunch's command for NPROC ranks of ``script``: ``dlaunch run`` or, with --front torchrun, torchrun's
    command line with dlaunch in front (its default console shows every rank, as ``--console all``)."""
    own = ["--run-id", run_id] if run_id else []
    if FRONT == "torchrun":
        return [DLAUNCH, "torchrun", "--standalone", "--nproc-per-node", str(NPROC), "--log-dir", str(out), *own,
                script, *script_args]
    console = ["--console", "all"] if console_all else []
    return [DLAUNCH, "run", script, "--ranks", str(NPROC), "--output-dir", str(out), *console, *own,
            *(["--", *script_args] if script_args else [])]


def rank_script(name: str) -> str:
    return str(RANKS_DIR / name)


# --------------------------------------------------------------------------------------------- the measurements


class Bench:
    def __init__(self, tmp: Path, repeat: int, lines: int, warmup: bool):
        self.tmp, self.repeat, self.lines, self.warmup = tmp, repeat, lines, warmup
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp / "tmpdir")}
        (tmp / "tmpdir").mkdir()
        self.cwd = str(tmp)
        self.problems: list[str] = []   # launcher bugs or surprises worth a closer look
        self._n = 0

    def fresh(self, stem: str) -> Path:
        self._n += 1
        path = self.tmp / f"{stem}-{self._n}"
        path.mkdir()
        return path

    def pairs(self, make, **kwargs):
        """Run (dlaunch, torchrun) self.repeat times, alternating who goes first; yields finished Runs."""
        if self.warmup:
            for launcher in ("dlaunch", "torchrun"):
                run_launcher(launcher, make(launcher)[0], self.env, self.cwd, **kwargs)
        for rep in range(self.repeat):
            order = ("dlaunch", "torchrun") if rep % 2 == 0 else ("torchrun", "dlaunch")
            for launcher in order:
                argv, context = make(launcher)
                yield rep, run_launcher(launcher, argv, self.env, self.cwd, **kwargs), context

    def check_common(self, run: Run, what: str) -> None:
        if run.timed_out:
            self.problems.append(f"{what}: {run.launcher} did not exit within {RUN_TIMEOUT:g} s (killed)")
        if run.leftovers:
            self.problems.append(f"{what}: {run.launcher} exited leaving processes alive: "
                                 + "; ".join(run.leftovers))

    # 1 ---------------------------------------------------------------------------------------------------------
    def launch(self) -> Row:
        noop = rank_script("noop.py")

        def make(launcher):
            if launcher == "dlaunch":
                return dlaunch_argv(noop, self.fresh("runs")), None
            return [TORCHRUN, "--standalone", "--nproc-per-node", str(NPROC), noop], None

        walls = {"dlaunch": [], "torchrun": []}
        for _, run, _ in self.pairs(make):
            self.check_common(run, "launch")
            if run.exit_code != 0:
                self.problems.append(f"launch: {run.launcher} exited {run.exit_code}: {run.stderr[-500:]}")
            walls[run.launcher].append(run.wall)
        row = Row(f"launch overhead, {NPROC} no-op ranks (launcher wall)", "s", walls["dlaunch"],
                  walls["torchrun"], "dlaunch <= 0.15 x torchrun", False)
        row.met = row.dl_median <= 0.15 * row.peer_median
        return row

    # 2 ---------------------------------------------------------------------------------------------------------
    def failfast(self) -> Row:
        fail = rank_script("fail.py")

        def make(launcher):
            stamp = self.fresh("stamp") / "failed_at"
            args = [str(stamp), str(FAIL_DELAY), str(FAIL_RANK)]
            if launcher == "dlaunch":
                return dlaunch_argv(fail, self.fresh("runs"), args), stamp
            return [TORCHRUN, "--standalone", "--nproc-per-node", str(NPROC), fail, *args], stamp

        lat = {"dlaunch": [], "torchrun": []}
        codes = {"dlaunch": [], "torchrun": []}
        for _, run, stamp in self.pairs(make):
            self.check_common(run, "failfast")
            codes[run.launcher].append(run.exit_code)
            try:
                failed_at = float(stamp.read_text())
            except (OSError, ValueError):
                self.problems.append(f"failfast: {run.launcher}: rank {FAIL_RANK} never wrote its stamp "
                                     f"(exit {run.exit_code}): {run.stderr[-500:]}")
                continue
            lat[run.launcher].append(run.ended - failed_at)
            if run.exit_code == 0:
                self.problems.append(f"failfast: {run.launcher} exited 0 although rank {FAIL_RANK} failed")
            if run.launcher == "dlaunch" and run.exit_code != FAIL_RANK:
                self.problems.append(f"failfast: dlaunch exited {run.exit_code}, not the failing rank's "
                                     f"{FAIL_RANK}")
        row = Row(f"fail-fast latency, rank {FAIL_RANK} of {NPROC} exits {FAIL_RANK}", "s",
                  lat["dlaunch"] or [float("nan")], lat["torchrun"] or [float("nan")], "dlaunch < 0.3 s", False)
        row.met = bool(lat["dlaunch"]) and row.dl_median < 0.3 and all(c == FAIL_RANK for c in codes["dlaunch"])
        row.notes.append(f"exit codes: dlaunch {codes['dlaunch']}, torchrun {codes['torchrun']} "
                         f"(torchrun reports the rank's code only in its error summary and always exits 1)")
        return row

    # 3 ---------------------------------------------------------------------------------------------------------
    def memory(self) -> Row:
        sleep = rank_script("sleep.py")

        def make(launcher):
            if launcher == "dlaunch":
                return dlaunch_argv(sleep, self.fresh("runs"), [str(SLEEP_SECONDS)]), None
            return [TORCHRUN, "--standalone", "--nproc-per-node", str(NPROC), sleep, str(SLEEP_SECONDS)], None

        peaks = {"dlaunch": [], "torchrun": []}
        helpers = {"dlaunch": [], "torchrun": []}
        for _, run, _ in self.pairs(make, watch_helpers=True):
            self.check_common(run, "memory")
            if run.exit_code != 0:
                self.problems.append(f"memory: {run.launcher} exited {run.exit_code}: {run.stderr[-500:]}")
            peaks[run.launcher].append(run.peak_rss / MIB)
            helpers[run.launcher].extend(f"{' '.join(cmd[:3])[:60]} peak {rss / MIB:.1f} MiB"
                                         for cmd, rss in run.helpers.values())
        row = Row(f"launcher peak RSS, {NPROC} ranks sleeping {SLEEP_SECONDS:g} s", "MiB", peaks["dlaunch"],
                  peaks["torchrun"], "dlaunch < 40 MiB", False)
        row.met = row.dl_median < 40
        for launcher in ("dlaunch", "torchrun"):
            seen = sorted(set(helpers[launcher]))
            row.notes.append(f"{launcher} non-rank child processes (not counted): "
                             + ("; ".join(seen) if seen else "none"))
        return row

    # 4 ---------------------------------------------------------------------------------------------------------
    def _console_argv(self, launcher: str) -> tuple[list[str], Path]:
        spam = rank_script("spam.py")
        out = self.fresh("console")
        if launcher == "dlaunch":
            return dlaunch_argv(spam, out, [str(self.lines)], run_id="bench", console_all=True), out
        return [TORCHRUN, "--standalone", "--nproc-per-node", str(NPROC), "--tee", "3", "--log-dir", str(out),
                spam, str(self.lines)], out

    @staticmethod
    def _log_files(launcher: str, out: Path) -> list[Path]:
        if launcher == "dlaunch":
            return sorted(out.glob("bench/rank_*/output.log"))
        return sorted(out.glob("*/attempt_0/*/stdout.log"))

    def console(self) -> Row:
        cpu = {"dlaunch": [], "torchrun": []}
        walls = {"dlaunch": [], "torchrun": []}
        counts = {"dlaunch": [], "torchrun": []}
        expected = NPROC * self.lines
        for _, run, out in self.pairs(self._console_argv):
            self.check_common(run, "console")
            if run.exit_code != 0:
                self.problems.append(f"console: {run.launcher} exited {run.exit_code}: {run.stderr[-500:]}")
            cpu[run.launcher].append(run.cpu_own)
            walls[run.launcher].append(run.wall)
            files = self._log_files(run.launcher, out)
            total = sum(_count_lines(f) for f in files)
            counts[run.launcher].append(total)
            if total != expected or len(files) != NPROC:
                self.problems.append(f"console: {run.launcher} logs hold {total} of {expected} lines "
                                     f"({len(files)} log files)")
            shutil.rmtree(out, ignore_errors=True)
        row = Row(f"launcher CPU, {NPROC} ranks x {self.lines:,} lines to console", "s", cpu["dlaunch"],
                  cpu["torchrun"], "dlaunch CPU <= torchrun CPU", False)
        row.met = row.dl_median <= row.peer_median
        row.notes.append(f"launcher wall (s): dlaunch {fmt_list(walls['dlaunch'])}, torchrun "
                         f"{fmt_list(walls['torchrun'])}")
        row.notes.append(f"lines in logs (expected {expected:,}): dlaunch {counts['dlaunch']}, torchrun "
                         f"{counts['torchrun']}")
        row.notes.extend(self.console_completeness())
        return row

    def console_completeness(self) -> list[str]:
        """One untimed run of each with the console in a file: every line there, own rank, in order?"""
        notes = []
        patterns = {"dlaunch": re.compile(rb"^\[rank(\d+)\]: rank (\d+) step (\d+) "),
                    "torchrun": re.compile(rb"^\[default(\d+)\]:rank (\d+) step (\d+) ")}
        for launcher in ("dlaunch", "torchrun"):
            argv, out = self._console_argv(launcher)
            console_file = out / "console.txt"
            with open(console_file, "wb") as fh:
                run = run_launcher(launcher, argv, self.env, self.cwd, stdout=fh)
            self.check_common(run, "console check")
            next_step = [0] * NPROC
            bad = other = 0
            with open(console_file, "rb") as fh:
                for line in fh:
                    match = patterns[launcher].match(line)
                    if not match:
                        other += 1
                        continue
                    shown, rank, step = (int(g) for g in match.groups())
                    if shown != rank or rank >= NPROC or step != next_step[rank]:
                        bad += 1
                    if rank < NPROC:
                        next_step[rank] = step + 1
            complete = all(n == self.lines for n in next_step) and not bad
            verdict = "complete" if complete else "INCOMPLETE"
            notes.append(f"console check, {launcher} (exit {run.exit_code}): lines per rank {next_step}, "
                         f"{bad} misattributed/out of order, {other} other lines: {verdict}")
            if not complete:
                self.problems.append(f"console: {launcher}'s console output is incomplete or garbled: "
                                     f"last step per rank {next_step}, {bad} bad lines")
            shutil.rmtree(out, ignore_errors=True)
        return notes


def _count_lines(path: Path) -> int:
    count = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=None, help="repetitions per launcher (default 3; 1 with --quick)")
    parser.add_argument("--only", default=None, help="comma list of: " + ", ".join(MEASUREMENTS))
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 repetition, 10,000 lines, no warm-up")
    parser.add_argument("--front", choices=("run", "torchrun"), default="run",
                        help="start dlaunch as `dlaunch run` (default) or as `dlaunch torchrun` with torchrun's line")
    args = parser.parse_args()
    global FRONT
    FRONT = args.front
    only = MEASUREMENTS if not args.only else tuple(n.strip() for n in args.only.split(","))
    unknown = [n for n in only if n not in MEASUREMENTS]
    if unknown:
        parser.error(f"unknown measurement(s) {unknown}; choose from {', '.join(MEASUREMENTS)}")
    repeat = args.repeat or (1 if args.quick else 3)
    for tool in (DLAUNCH, TORCHRUN):
        if not os.access(tool, os.X_OK):
            parser.error(f"{tool} not found: run with the venv's python (.venv/bin/python)")
    stray = rank_processes(launchers=True)
    if stray:
        print("warning: rank processes from an earlier run are alive:\n  " + "\n  ".join(describe_procs(stray)),
              file=sys.stderr)

    rows: list[Row] = []
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="dlaunch-bench-"))
    bench = Bench(tmp, repeat, QUICK_LINES if args.quick else LINES, warmup=not args.quick)
    try:
        for name in MEASUREMENTS:
            if name in only:
                t0 = time.perf_counter()
                print(f"running {name} ...", file=sys.stderr, flush=True)
                rows.append(getattr(bench, name)())
                print(f"  {name} took {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    finally:
        leftovers = rank_processes(launchers=True)
        left_desc = describe_procs(leftovers)
        kill_procs(leftovers)
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(rows, "torchrun", repeat)
    print()
    print(f"rank processes alive at the end: {len(left_desc)}" + "".join(f"\n    {d}" for d in left_desc))
    if bench.problems:
        print("problems seen:")
        for problem in bench.problems:
            print(f"    {problem}")
    else:
        print("problems seen: none (exit codes as expected, all lines arrived, no rank outlived its launcher)")
    print(f"total time {time.perf_counter() - started:.1f} s")
    return 0 if all(r.met for r in rows) and not bench.problems and not left_desc else 1


if __name__ == "__main__":
    sys.exit(main())

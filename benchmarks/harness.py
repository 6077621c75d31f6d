"""What every side-by-side benchmark here shares: one launcher run measured, alternating order, one table.

``run_launcher`` starts one launcher process (dlaunch, or its peer: torchrun, msrun) and measures it the same
way for every benchmark: wall time from the spawn to its exit, its own CPU time (user + system of all its
threads, read from /proc/PID/stat after it exited and before it is reaped: waitid(WNOWAIT)), the CPU of the
children it reaped (its ranks, helpers), its peak RSS (VmHWM, polled), and the rank processes it left alive.
``alternating`` gives the order of the launchers for each repetition (flipped every time, so neither always
runs on a warmer cache).  ``Row`` and ``print_table`` print every benchmark's result in one format: the
measurement, dlaunch's median, the peer's median, the ratio dlaunch/peer from the same run, the goal, and
whether it is met; then every single value.
"""

from __future__ import annotations

import functools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
RANKS_DIR = HERE / "ranks"
RUN_TIMEOUT = 120.0
MIB = 1024 * 1024


# --------------------------------------------------------------------------------------------- one launcher run


@dataclass
class Run:
    launcher: str
    argv: list[str]
    exit_code: int
    wall: float                 # seconds from Popen to the launcher's exit
    ended: float                # time.time() when waitid() saw it exit
    cpu_own: float              # user+system of the launcher process itself (all its threads)
    cpu_children: float         # user+system of its waited-for children (ranks, helpers)
    peak_rss: int               # bytes: VmHWM of the launcher process
    helpers: dict = field(default_factory=dict)   # pid -> [cmdline, peak VmHWM bytes] of non-rank children
    leftovers: list = field(default_factory=list)  # rank (or launcher-helper) processes alive after it exited
    timed_out: bool = False
    stderr: str = ""


def timed_lines(stream, lines: list) -> threading.Thread:
    """A started daemon thread appending ``(arrival time, line)`` for each line of ``stream`` (a launcher's stderr,
    timed as it arrives) to ``lines``."""
    def read():
        for line in stream:
            lines.append((time.time(), line.rstrip("\n")))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def _vm_hwm(pid: int) -> int | None:
    """Peak RSS of one process (its own address space only), in bytes; None once it has no memory."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _is_launcher_cmd(cmdline: list[str]) -> bool:
    """dlaunch or torchrun itself (or a process forked from it that did not exec, like dlaunch's reaper)."""
    return any(os.path.basename(part) in ("dlaunch", "torchrun") for part in cmdline[:2])


def _is_rank_cmd(cmdline: list[str]) -> bool:
    return not _is_launcher_cmd(cmdline) and any(str(RANKS_DIR) in part for part in cmdline)


def _is_bench_launcher_cmd(cmdline: list[str]) -> bool:
    return _is_launcher_cmd(cmdline) and any(str(RANKS_DIR) in part for part in cmdline)


class _Sampler(threading.Thread):
    """Polls the launcher's VmHWM (and, optionally, its non-rank children's) every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float, watch_helpers: bool):
        super().__init__(daemon=True)
        self.pid, self.interval, self.watch_helpers = pid, interval, watch_helpers
        self.stop = threading.Event()
        self.peak = 0
        self.children: dict[int, list] = {}   # pid -> [last cmdline, peak VmHWM]

    def run(self) -> None:
        try:
            launcher = psutil.Process(self.pid)
        except psutil.Error:
            return
        while True:
            hwm = _vm_hwm(self.pid)
            if hwm:
                self.peak = max(self.peak, hwm)
            if self.watch_helpers:
                try:
                    kids = launcher.children()
                except psutil.Error:
                    kids = []
                for kid in kids:
                    try:
                        cmdline = kid.cmdline()
                    except psutil.Error:
                        continue
                    entry = self.children.setdefault(kid.pid, [cmdline, 0])
                    entry[0] = cmdline or entry[0]   # a rank execs: the last cmdline seen decides
                    entry[1] = max(entry[1], _vm_hwm(kid.pid) or 0)
            if self.stop.wait(self.interval):
                return

    def helpers(self) -> dict[int, list]:
        return {pid: entry for pid, entry in self.children.items() if not _is_rank_cmd(entry[0])}


def rank_processes(launchers: bool = False) -> list[psutil.Process]:
    """Live processes running one of benchmarks/ranks/*.py (zombies have no cmdline and are not counted);
    with ``launchers``, also launcher processes (and their forks, e.g. dlaunch's reaper) running them."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.pid != os.getpid() and (_is_rank_cmd(cmdline) or (launchers and _is_bench_launcher_cmd(cmdline))):
            found.append(proc)
    return found


def describe_procs(procs: list[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        try:
            out.append(f"pid {proc.pid} ppid {proc.ppid()} {proc.status()}: {' '.join(proc.cmdline())}")
        except psutil.Error:
            pass
    return out


def kill_procs(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def dlaunch_command() -> list[str]:
    """How a user starts dlaunch: the ``dlaunch`` console script beside this Python where dlaunch is installed
    (scripts/test.sh's venv; torchrun is measured by its own script too), else ``python -m launcher``, the same
    program plus runpy's start (~3 ms).  PYTHONPATH, set by the benchmarks, picks this checkout either way."""
    script = Path(sys.executable).parent / "dlaunch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "launcher"]


@functools.cache
def compile_launcher() -> None:
    """Byte-compile dlaunch's package once, as ``pip install`` does (and did for torchrun): where
    PYTHONDONTWRITEBYTECODE is set, every launch of a module changed since its .pyc compiled it again, ~20 ms
    of CPU charged to dlaunch alone when a dozen had changed (0.02 ms per rank at 1,024)."""
    import compileall

    compileall.compile_dir(str(HERE.parent / "launcher"), quiet=1)


def run_launcher(launcher: str, argv: list[str], env: dict, cwd: str, *, stdout=subprocess.DEVNULL,
                 watch_helpers: bool = False, timeout: float = RUN_TIMEOUT) -> Run:
    compile_launcher()
    with tempfile.TemporaryFile() as err:
        timed_out = threading.Event()
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=err)

        def on_timeout() -> None:
            timed_out.set()
            proc.send_signal(signal.SIGTERM)
            time.sleep(5)
            if proc.returncode is None:
                try:
                    proc.kill()
                except OSError:
                    pass

        sampler = _Sampler(proc.pid, 0.01, watch_helpers)
        sampler.start()
        timer = threading.Timer(timeout, on_timeout)
        timer.daemon = True
        timer.start()
        exited = False
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)   # exited, not reaped: /proc/PID stays
            exited = True
            ended, wall = time.time(), time.perf_counter() - start
            try:
                times = psutil.Process(proc.pid).cpu_times()
                cpu_own, cpu_children = times.user + times.system, times.children_user + times.children_system
            except psutil.Error:
                cpu_own = cpu_children = float("nan")
            sampler.stop.set()
            sampler.join()
        finally:
            timer.cancel()
            if not exited:   # interrupted (Ctrl-C) while the launcher runs: stop it, then reap it
                proc.send_signal(signal.SIGTERM)
            exit_code = proc.wait()
        leftovers = rank_processes(launchers=True)
        left_desc = describe_procs(leftovers)
        kill_procs(leftovers)
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    return Run(launcher, argv, exit_code, wall, ended, cpu_own, cpu_children, sampler.peak, sampler.helpers(),
               left_desc, timed_out.is_set(), stderr)


# --------------------------------------------------------------------------------------------- the table


def alternating(repeat: int, first: str, second: str) -> Iterator[tuple[int, str]]:
    """(repetition, launcher) for ``repeat`` repetitions of both, the order flipped every repetition."""
    for rep in range(repeat):
        for launcher in ((first, second) if rep % 2 == 0 else (second, first)):
            yield rep, launcher


@dataclass
class Row:
    """One measurement: every value of dlaunch and of its peer (torchrun, msrun) from the same run."""

    name: str
    unit: str
    dlaunch: list[float]
    peer: list[float]
    goal: str
    met: bool
    notes: list[str] = field(default_factory=list)

    @property
    def dl_median(self) -> float:
        return statistics.median(self.dlaunch) if self.dlaunch else float("nan")

    @property
    def peer_median(self) -> float:
        return statistics.median(self.peer) if self.peer else float("nan")

    @property
    def ratio(self) -> float:
        return self.dl_median / self.peer_median if self.peer_median else float("nan")


def fmt(value: float, unit: str) -> str:
    if value != value:  # nan
        return "n/a"
    if unit == "MiB":
        return f"{value:.1f} {unit}"
    return f"{value:.2f} {unit}" if unit == "ms" else f"{value:.3f} {unit}"


def fmt_list(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def print_table(rows: list[Row], peer: str, repeat: int, what: str = "") -> None:
    """The table every side-by-side benchmark prints: medians, the ratio from this run, goal, result."""
    print()
    print(f"dlaunch{what} vs {peer}, median of {repeat} run(s) each, alternating "
          f"({psutil.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    header = f"{'measurement':52} {'dlaunch':>11} {peer:>11} {'ratio':>6}  {'goal':28} result"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row.name:52} {fmt(row.dl_median, row.unit):>11} {fmt(row.peer_median, row.unit):>11} "
              f"{row.ratio:6.3f}  {row.goal:28} {'met' if row.met else 'MISSED'}")
    print()
    for row in rows:
        print(f"{row.name}:")
        print(f"    dlaunch  {fmt_list(row.dlaunch)} {row.unit}")
        print(f"    {peer:8} {fmt_list(row.peer)} {row.unit}")
        for note in row.notes:
            print(f"    {note}")

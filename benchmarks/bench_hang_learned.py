"""How soon a hang is called with ``--hang-learn``: from the moment a rank stops to the launcher's " hung: " line,
beside the budget learned from the job (issue 37; the tests in tests/e2e/test_hang_learned.py assert the order and
which budget called the hang, not this delay, which grows with the machine's load: issue 45).

Scenarios (``--scenario``):

- ``carried`` (default): ``dlaunch run tests/programs/paced_steps.py --ranks 2 --hang-learn --hang-timeout 60
  --max-restarts 1``: attempt 0 learns the step budget (steps every 0.2 s) and rank 1 fails at step 25; in attempt
  1 rank 1 stops at step 3 and writes the time; the budget carried from attempt 0 calls the hang.
- ``two-hosts``: two ``dlaunch cluster`` hosts on 127.0.0.2 and 127.0.0.3, 4 gloo ranks each
  (tests/programs/lockstep_rank.py, needs torch): a 3 s checkpoint phase at step 30, rank 6 stops at step 50.

Per run: the delay (the line's arrival minus the stop's time stamp), the learned budget and silence
(``hang_timeouts*.json``), and the delay past the budget (what the launcher's look interval, the stack dumps and
the load add).  Medians and every value are printed; nothing is asserted.  Quiet-machine goal (what the tests
asserted before issue 45): delay <= 5 x silence + 1 s for ``two-hosts``, < budget + 1.5 s for ``carried``.

Run:  .venv/bin/python benchmarks/bench_hang_learned.py [--scenario carried|two-hosts] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.launching import free_port, kill_run, write_rank_table  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from harness import timed_lines  # noqa: E402  (a launcher's stderr, timed line by line)

PACED = str(ROOT / "tests" / "programs" / "paced_steps.py")
LOCKSTEP = str(ROOT / "tests" / "programs" / "lockstep_rank.py")
HOSTS = ("127.0.0.2", "127.0.0.3")
TIMEOUT = 150.0


def start(args: list, cwd: Path, lines: list) -> tuple[subprocess.Popen, threading.Thread]:
    """One dlaunch, its stderr lines collected with their arrival times."""
    proc = subprocess.Popen([sys.executable, "-m", "launcher", *map(str, args)], cwd=cwd, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc, timed_lines(proc.stderr, lines)


def finish(procs: list, readers: list, run_id: str) -> list:
    try:
        codes = [proc.wait(timeout=TIMEOUT) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        kill_run(run_id)
    for reader in readers:
        reader.join(timeout=10)
    return codes


def carried(tmp: Path) -> dict:
    stopped, lines = tmp / "stopped", []
    proc, reader = start(["run", PACED, "--ranks", "2", "--output-dir", tmp / "runs", "--run-id", "carried",
                          "--hang-learn", "--hang-timeout", "60", "--max-restarts", "1", "--", "--fail-at", "25",
                          "--stop-at", "3", "--stopped-file", stopped], tmp, lines)
    codes = finish([proc], [reader], "carried")
    return measure(codes, [lines], stopped, [tmp / "runs" / "carried" / "hang_timeouts.json"])


def two_hosts(tmp: Path) -> dict:
    table = write_rank_table(tmp / "rt.json", HOSTS, devices_per_host=4)
    run_id, port, stopped = "learned", free_port(HOSTS[0]), tmp / "stopped"
    procs, readers, lines = [], [], [[], []]
    for index in (0, 1):
        cwd = tmp / f"host{index}"
        cwd.mkdir()
        proc, reader = start(["cluster", LOCKSTEP, "--rank-table", table, "--rank-start", index * 4, "--run-id",
                              run_id, "--profile", "structure", "--master-port", port, "--hang-learn",
                              "--hang-timeout", "60", "--grace-period", "2", "--host-timeout", "5", "--",
                              "--save-at", "30", "--save-seconds", "3", "--stop-rank", "6", "--stop-at", "50",
                              "--stopped-file", stopped], cwd, lines[index])
        procs.append(proc)
        readers.append(reader)
    codes = finish(procs, readers, run_id)
    clocks = [tmp / f"host{index}" / "dlaunch_runs" / run_id / f"hang_timeouts.{host}.json"
              for index, host in enumerate(HOSTS)]
    return measure(codes, lines, stopped, clocks)


def measure(codes: list, lines: list, stopped: Path, clocks: list) -> dict:
    hung = [at for host in lines for at, line in host if " hung: " in line]
    if 124 not in codes or not hung or not stopped.exists():
        return {"failed": f"exit codes {codes}, hang line seen: {bool(hung)}, stop stamped: {stopped.exists()}"}
    learned = [json.loads(path.read_text()) for path in clocks]
    return {"delay": min(hung) - float(stopped.read_text()),
            "budget": max(clock["step_budget_s"] for clock in learned),
            "silence": max(clock["silence_s"] for clock in learned)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("carried", "two-hosts"), default="carried")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    scenario = carried if args.scenario == "carried" else two_hosts
    runs = []
    for index in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            run = scenario(Path(tmp))
        print(f"run {index + 1}: " + (run["failed"] if "failed" in run else
                                      f"hang called {run['delay']:.2f} s after the stop; learned budget "
                                      f"{run['budget']:.2f} s (silence {run['silence']:.3f} s); "
                                      f"{run['delay'] - run['budget']:.2f} s past the budget"), flush=True)
        runs.append(run)
    good = [run for run in runs if "failed" not in run]
    if not good:
        print("no run called a hang")
        return 1
    delay = statistics.median(run["delay"] for run in good)
    budget = statistics.median(run["budget"] for run in good)
    past = statistics.median(run["delay"] - run["budget"] for run in good)
    load = os.getloadavg()[0]
    print(f"{args.scenario}, {len(good)} of {len(runs)} runs, load average {load:.1f}: hang called {delay:.2f} s "
          f"after the stop (median), learned budget {budget:.2f} s, {past:.2f} s past it")
    return 0


if __name__ == "__main__":
    sys.exit(main())

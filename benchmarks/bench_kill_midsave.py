"""What a SIGKILL in the middle of a save costs a script that rewrites its checkpoint in place every step.

nanoGPT's way: ``torch.save(state, out_dir/ckpt.pt)`` every iteration, the same file truncated and written again,
resumed by loading it. Into ``$DLAUNCH_MEMORY_DIR`` (``dlaunch run --memory-ckpt``) a kill between two saves costs
nothing (the file in memory is whole and newest); a kill in the middle of one leaves it torn, and the restart
resumes from the copy dlaunch's keeper mirrored to disk: the saves since that copy are lost. This benchmark
SIGKILLs the rank at random moments and counts, per kill, the completed saves lost (the last save that returned,
minus the one the restart resumed from), for each dlaunch checkout given (``--repo``: e.g. a worktree before a
change beside the current one), alternated, with the same seeded kill times.

    .venv/bin/python benchmarks/bench_kill_midsave.py --repo . --repo /tmp/before --kills 20
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = r'''
import os, sys, time, torch
path = os.path.join(os.environ["DLAUNCH_MEMORY_DIR"], "ckpt.pt")
step = 0
if os.path.exists(path):
    step = torch.load(path)["step"] + 1
    print(f"resumed {step - 1}", flush=True)
state = {"w": torch.randn(int(os.environ["BENCH_FLOATS"]))}
while step < int(os.environ["BENCH_STEPS"]):
    torch.save({"step": step, **state}, path)   # in place, as nanoGPT does
    print(f"saved {step}", flush=True)
    step += 1
    time.sleep(float(os.environ["BENCH_PAUSE"]))
'''

LINE = re.compile(r"^(?:\[rank0\]: )?(saved|resumed) (\d+)$")


def rank_pids(work: Path) -> set[int]:
    """The live rank processes: those whose command line runs this run's saver (dlaunch's own names it after -m)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"-m" not in cmd and any(arg.endswith(str(work / "saver.py").encode()) for arg in cmd):
                found.add(int(entry))
    return found


def new_rank(work: Path, killed: set[int], timeout: float = 60.0) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fresh = rank_pids(work) - killed
        if fresh:
            return min(fresh)
        time.sleep(0.01)
    return None


def saves_lost(attempt_logs: list[str]) -> list[int | None]:
    """Per restart, the completed saves lost: the last save that returned before it minus the one it resumed
    from (all of them when it started afresh: no file); None when it could not resume (a torn file loaded)."""
    lost: list[int | None] = []
    last_saved = -1
    for index, text in enumerate(attempt_logs):
        found = [(m.group(1), int(m.group(2))) for m in map(LINE.match, map(str.strip, text.splitlines())) if m]
        if index:
            resumed = next((n for kind, n in found if kind == "resumed"), None)
            if resumed is not None:
                lost.append(last_saved - resumed)
            else:
                lost.append(None if "Traceback" in text else last_saved + 1)
        last_saved = max((n for kind, n in found if kind == "saved"), default=last_saved)
    return lost


def one(repo: Path, work: Path, kill_at: list[float], args) -> list[int | None]:
    """One dlaunch run of the saver, SIGKILLed ``kill_at[i]`` seconds after its i-th start; the saves lost at
    each kill (0 when it came between two saves, or the keeper had the last one mirrored)."""
    work.mkdir(parents=True)
    (work / "saver.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(repo), BENCH_FLOATS=str(args.floats), BENCH_STEPS=str(10 ** 9),
               BENCH_PAUSE=str(args.pause), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "run", str(work / "saver.py"), "--ranks", "1",
                             "--profile", "structure", "--memory-ckpt", "--max-restarts", str(len(kill_at)),
                             "--run-id", "kills", "--output-dir", str(work / "runs")],
                            cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killed: set[int] = set()
    try:
        for delay in kill_at:
            pid = new_rank(work, killed)
            if pid is None:
                break
            time.sleep(delay)
            with contextlib.suppress(ProcessLookupError):   # it died by itself (a torn file it could not load)
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
            if proc.poll() is not None:
                break
        if proc.poll() is None and new_rank(work, killed) is not None:
            time.sleep(args.startup)   # the last restart resumed and saved
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    logs = sorted((work / "runs" / "kills" / "rank_000").glob("output*.log"),
                  key=lambda p: int(p.name.split(".")[1]) if p.name.count(".") == 2 else 0)
    return saves_lost([p.read_text(errors="replace") for p in logs])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", action="append", required=True, help="a dlaunch checkout (repeatable)")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs per run")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--floats", type=int, default=8_000_000, help="float32s in the state (32 MB)")
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between saves")
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument("--startup", type=float, default=3.0, help="seconds a rank takes to import torch and save")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    kill_at = [args.startup + rng.uniform(0.0, 1.0) for _ in range(args.kills)]
    results: dict[str, list[int | None]] = {repo: [] for repo in args.repo}
    tmp = Path(tempfile.mkdtemp(prefix="bench_kill_midsave-"))
    print(f"load average before: {os.getloadavg()}", flush=True)
    for rep in range(args.repeat):
        for i, repo in enumerate(args.repo if rep % 2 == 0 else args.repo[::-1]):
            lost = one(Path(repo).resolve(), tmp / f"{rep}-{i}", kill_at, args)
            results[repo] += lost
            print(f"#{rep + 1} {repo}: saves lost per kill {lost}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    for repo, lost in results.items():
        counted = [n for n in lost if n is not None]
        torn = [n for n in counted if n > 0]
        print(f"{repo}: {len(lost)} restarts, {len(lost) - len(counted)} could not resume; saves lost: median "
              f"{statistics.median(counted) if counted else 'n/a'}, max {max(counted, default='n/a')}, "
              f"kills that lost any {len(torn)}, total {sum(counted)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

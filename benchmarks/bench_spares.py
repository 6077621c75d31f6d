"""What losing a host costs a job with a hot spare: dlaunch's --spares beside torchrun's own elastic spare, in one run.

The job: tests/programs/spare_train.py (gloo, one rank per host, an all_reduce, a checkpoint per step and 0.1 s
of sleep, 80 steps), three hosts on one machine, two running and one standing by. Once the second host's rank
printed step 15, that host's launcher is SIGKILLed (its machine is gone) with its rank. Measured per run, from
the step lines as they arrive (every launcher's stdout read line by line, stamped on arrival):

1. training again: from the kill to the first step line of the job's next attempt;
2. resumed at: the step that line is (dlaunch resumes from the newest step every rank completed; torchrun
   gives no resume point, so a script that does not keep its own starts again at step 1);
3. the exit codes of the launchers still running (every one must end 0).

The launchers:

- ``dlaunch``: three ``python -m launcher cluster spare_train.py --rank-table rt.json --spares 1 --rank-start K``
  (127.0.0.2-4, one shared output directory), --host-timeout 1 as the e2e tests give;
- ``torchrun``: three ``torchrun --nnodes 2:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint
  127.0.0.1:P --max-restarts 3`` agents: the third joins a full job and waits, torchrun's hot spare (it is let
  in when the job forms again after the failure); torchrun's default rendezvous timeouts.

    .venv/bin/python benchmarks/bench_spares.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "tests" / "programs" / "spare_train.py"
STEP = re.compile(r"step (\d+) rank (\d+) world (\d+) attempt (\d+)")
HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
STEPS, PAUSE, KILL_AFTER = "80", "0.1", 15
ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lines:
    """Step lines of some processes' stdout, stamped as they arrive: [(time, launcher, rank, step, attempt)]."""

    def __init__(self):
        self.seen: list[tuple[float, int, int, int, int]] = []
        self.lock = threading.Lock()

    def follow(self, index: int, stream) -> None:
        def read():
            for line in stream:
                found = STEP.search(line)
                if found:
                    with self.lock:
                        self.seen.append((time.monotonic(), index, int(found[2]), int(found[1]), int(found[4])))
        threading.Thread(target=read, daemon=True).start()

    def of(self, launcher: int) -> list[tuple[float, int, int, int, int]]:
        with self.lock:
            return [entry for entry in self.seen if entry[1] == launcher]

    def after(self, moment: float) -> list[tuple[float, int, int, int, int]]:
        with self.lock:
            return [entry for entry in self.seen if entry[0] > moment and entry[4] > 0]


def kill_when_due(lines: Lines, victim: subprocess.Popen) -> float | None:
    """SIGKILL the second host's launcher and its whole tree (its machine gone) right after its step
    KILL_AFTER; the moment it was killed."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        steps = lines.of(1)
        if steps and steps[-1][3] >= KILL_AFTER:
            tree = [victim.pid] + [p.pid for p in psutil.Process(victim.pid).children(recursive=True)]
            for pid in tree:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return time.monotonic()
        time.sleep(0.005)
    return None


def measure(lines: Lines, killed: float | None, codes: list[int | None]) -> dict:
    if killed is None:
        return {"codes": codes, "error": "the second host never reached the kill step"}
    again = lines.after(killed)
    first = min(again, default=None)
    return {"codes": codes, "back": first[0] - killed if first else None, "resumed_at": first[3] if first else None}


def run_dlaunch(tmp: Path) -> dict:
    table = {"version": "1.0", "server_count": "3", "status": "completed", "server_list": [
        {"server_id": host, "device": [{"device_id": "0", "device_ip": f"192.0.2.{i + 10}", "rank_id": str(i)}]}
        for i, host in enumerate(HOSTS)]}
    (tmp / "rt.json").write_text(json.dumps(table))
    master = port()
    lines, procs = Lines(), []
    for index in range(3):
        cwd = tmp / f"host{index}"
        cwd.mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "launcher", "cluster", str(TRAIN), "--rank-table", str(tmp / "rt.json"),
             "--rank-start", str(index), "--spares", "1", "--profile", "structure", "--run-id", "bench",
             "--output-dir", str(tmp / "runs"), "--master-port", str(master), "--host-timeout", "1",
             "--grace-period", "1", "--console", "all", "--", STEPS, PAUSE],
            cwd=cwd, env={**os.environ, **ENV, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True))
        lines.follow(index, procs[-1].stdout)
    killed = kill_when_due(lines, procs[1])
    codes = [procs[i].wait(timeout=300) for i in (0, 2)]
    return measure(lines, killed, codes)


def store_holder(rendezvous_port: int) -> int | None:
    """The pid listening on the rendezvous port: the agent that hosts torchrun's c10d store."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == rendezvous_port:
            return conn.pid
    return None


def run_torchrun(tmp: Path) -> dict:
    rendezvous = port()
    endpoint = f"127.0.0.1:{rendezvous}"
    lines, procs = Lines(), []
    for index in range(3):
        cwd = tmp / f"agent{index}"
        cwd.mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2:2", "--nproc-per-node", "1",
             "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "bench", "--max-restarts", "3",
             str(TRAIN), STEPS, PAUSE],
            cwd=cwd, env={**os.environ, **ENV, "SPARE_TRAIN_DIR": str(tmp / "ckpt")}, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True))
        lines.follow(index, procs[-1].stdout)
        if index < 2:   # the third agent comes once the job formed with two: a spare, not a member
            deadline = time.monotonic() + 60
            while index == 1 and not lines.of(1) and time.monotonic() < deadline:
                time.sleep(0.05)
    holder = store_holder(rendezvous)   # losing the store's host ends any torchrun job: the other member goes
    victim = procs[1] if holder == procs[0].pid else procs[0]
    lines.of = (lambda original, index: lambda launcher: original(index if launcher == 1 else launcher))(
        lines.of, procs.index(victim))   # type: ignore[method-assign]
    killed = kill_when_due(lines, victim)
    codes = []
    for proc in (p for p in procs if p is not victim):
        try:
            codes.append(proc.wait(timeout=300))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(None)
    return measure(lines, killed, codes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"dlaunch": [], "torchrun": []}
    for _ in range(args.repeat):
        for name, run in (("dlaunch", run_dlaunch), ("torchrun", run_torchrun)):
            with tempfile.TemporaryDirectory(prefix=f"bench-spares-{name}-") as tmp:
                results[name].append(run(Path(tmp)))
                subprocess.run(["pkill", "-f", f"{tmp}"], check=False)
    for name, runs in results.items():
        backs = [r["back"] for r in runs if r.get("back") is not None]
        print(f"{name}: training again {statistics.median(backs):.2f} s after the kill (median of {len(backs)}), "
              f"resumed at step(s) {[r.get('resumed_at') for r in runs]}, exit codes {[r['codes'] for r in runs]}"
              if backs else f"{name}: {runs}")
    ours = [r["back"] for r in results["dlaunch"] if r.get("back") is not None]
    theirs = [r["back"] for r in results["torchrun"] if r.get("back") is not None]
    if ours and theirs:
        print(f"ratio dlaunch / torchrun: {statistics.median(ours) / statistics.median(theirs):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

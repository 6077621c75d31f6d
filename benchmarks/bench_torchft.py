"""What a fault costs a TorchFT job, dlaunch's replica groups beside torchft's own launch shape, in one run.

The job: torchft's own ``train_ddp.py`` (tests/clients/torchft, CPU, gloo), 2 replica groups x 2 ranks, 120
steps with 0.1 s of sleep each, torchft's Manager timeouts at 10 s / 20 s. Rank 1 of group 1 is SIGKILLed just
after it printed step 15 (in its sleep: torchft 0.2.0's DDP hook can assert when a connection resets in the
middle of an allreduce). Measured per run, from the step lines as they arrive (each launcher's stdout read
line by line, stamped on arrival):

1. group 0's stall: the longest gap between two step lines of group 0's rank 0 after the kill (it steps on
   with fewer replicas once the lighthouse drops group 1);
2. group 1 back: from the kill to group 1's first step line after it (its restart, ``import torch``, the
   store, the quorum, healing from group 0);
3. the exit codes (every run must end 0).

The launchers:

- ``dlaunch``: ``python -m launcher run train_ddp.py --ranks 4 --replica-groups 2 --max-restarts 3 --console
  all``: one launcher, each group's store and torchft's lighthouse started by it;
- ``torchrun``: torchft's own shape (torchft/torchx.py): ``torchft_lighthouse --min_replicas 1
  --join_timeout_ms 5000`` (dlaunch's arguments), then one ``torchrun --nnodes 1 --nproc-per-node 2
  --max-restarts 3 --master-port P`` per group with ``REPLICA_GROUP_ID`` and ``NUM_REPLICA_GROUPS``.

    .venv/bin/python benchmarks/bench_torchft.py [--repeat 2]
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
TRAIN = ROOT / "tests" / "clients" / "torchft" / "train_ddp.py"
STEP = re.compile(r"step=(\d+) group=(\d) rank=(\d) participants=(\d)")
BIN = Path(sys.executable).parent
ENV = {"TORCHFT_STEPS": "120", "TORCHFT_STEP_SLEEP": "0.1", "TORCHFT_TIMEOUT_SEC": "10",
       "TORCHFT_QUORUM_TIMEOUT_SEC": "20", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
KILL_AFTER = 15


def port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lines:
    """Step lines of some processes' stdout, stamped as they arrive: [(time, group, rank, step)]."""

    def __init__(self):
        self.seen: list[tuple[float, int, int, int]] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def follow(self, stream) -> None:
        def read():
            for line in stream:
                found = STEP.search(line)
                if found:
                    with self.lock:
                        self.seen.append((time.monotonic(), int(found[2]), int(found[3]), int(found[1])))
        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        self.threads.append(thread)

    def of(self, group: int, rank: int) -> list[tuple[float, int]]:
        with self.lock:
            return [(t, step) for t, g, r, step in self.seen if g == group and r == rank]


def train_pid(parent: psutil.Process, group: int, rank: int) -> int | None:
    for child in parent.children(recursive=True):
        try:
            env = child.environ()
            if "train_ddp.py" in " ".join(child.cmdline()) and env.get("RANK") == str(rank) \
                    and env.get("REPLICA_GROUP_ID") == str(group):
                return child.pid
        except psutil.Error:
            continue
    return None


def kill_when_due(lines: Lines, parents: list[psutil.Process]) -> float | None:
    """SIGKILL group 1's rank 1 right after its step KILL_AFTER line; the moment it was killed."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        steps = lines.of(1, 1)
        if steps and steps[-1][1] >= KILL_AFTER:
            for parent in parents:
                pid = train_pid(parent, 1, 1)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    return time.monotonic()
        time.sleep(0.005)
    return None


def measure(lines: Lines, killed: float | None, codes: list[int]) -> dict:
    if killed is None:
        return {"codes": codes, "error": "group 1 never reached the kill step"}
    group0 = [t for t, _ in lines.of(0, 0) if t >= killed]
    gaps = [b - a for a, b in zip([killed, *group0], group0)]
    back = next((t - killed for t, _ in lines.of(1, 0) if t > killed + 0.5), None)
    return {"codes": codes, "stall": max(gaps) if gaps else None, "back": back}


def run_dlaunch(tmp: Path) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "run", str(TRAIN), "--ranks", "4", "--replica-groups",
                             "2", "--max-restarts", "3", "--console", "all", "--output-dir", str(tmp / "runs")],
                            cwd=tmp, env={**os.environ, **ENV, "TORCHFT_LIGHTHOUSE": "", "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = Lines()
    lines.follow(proc.stdout)
    killed = kill_when_due(lines, [psutil.Process(proc.pid)])
    code = proc.wait(timeout=300)
    return measure(lines, killed, [code])


def run_torchrun(tmp: Path) -> dict:
    lighthouse_port = port()
    lighthouse = subprocess.Popen([str(BIN / "torchft_lighthouse"), "--min_replicas", "1", "--bind",
                                   f"[::]:{lighthouse_port}", "--join_timeout_ms", "5000"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines, groups = Lines(), []
    try:
        for group in (0, 1):
            env = {**os.environ, **ENV, "REPLICA_GROUP_ID": str(group), "NUM_REPLICA_GROUPS": "2",
                   "TORCHFT_LIGHTHOUSE": f"http://127.0.0.1:{lighthouse_port}"}
            groups.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                 "--max-restarts", "3", "--master-port", str(port()), str(TRAIN)], cwd=tmp, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
            lines.follow(groups[-1].stdout)
        killed = kill_when_due(lines, [psutil.Process(p.pid) for p in groups])
        codes = [p.wait(timeout=300) for p in groups]
    finally:
        for proc in [*groups, lighthouse]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return measure(lines, killed, codes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"dlaunch": [], "torchrun": []}
    for index in range(args.repeat):
        order = [("dlaunch", run_dlaunch), ("torchrun", run_torchrun)]
        for name, run in order if index % 2 == 0 else order[::-1]:
            with tempfile.TemporaryDirectory(prefix=f"bench-torchft-{name}-") as tmp:
                results[name].append(run(Path(tmp)))
                print(name, json.dumps(results[name][-1]), flush=True)

    def median(name, key):
        values = [r[key] for r in results[name] if r.get(key) is not None]
        return statistics.median(values) if values else None

    print(f"\n{'':28}{'dlaunch':>10}{'torchrun':>10}{'ratio':>8}")
    for key, what in (("stall", "group 0's longest stall (s)"), ("back", "group 1 back training (s)")):
        d, t = median("dlaunch", key), median("torchrun", key)
        ratio = f"{d / t:.2f}" if d and t else "-"
        print(f"{what:28}{d if d is None else round(d, 2):>10}{t if t is None else round(t, 2):>10}{ratio:>8}")
    ok = all(set(r["codes"]) == {0} for runs in results.values() for r in runs)
    print("every run exited 0" if ok else "NOT every run exited 0: " + json.dumps(results))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""`dlaunch cluster --ssh` fan-out: time from the head's command to every rank running, on 1, 2, 4 and 8 hosts.

The hosts are real sshd servers on 127.0.0.2 ... 127.0.0.9 (tests/sshd_hosts.py),
so each launch pays what it pays between machines (SSH handshakes, host-key
checks, the preflight round trip, a remote launcher per host), minus the
network.  Every rank is a no-op shell (``--no-python /bin/sh -c``, no Python,
no torch) that writes the time it started running into its rank directory.

Measured per launch: ``ready`` = the latest rank's start stamp minus the moment
just before the head was spawned (what a user waits for before every rank is
running); the head's whole wall time; the spread of the hosts' start times
(summary.head.json); and the CPU time the whole machine spent meanwhile
(every process: head, sshds, login shells, remote launchers, ranks), with the
floor that CPU alone sets on this machine: cpu / cores.  Reported: medians of
--repeat launches per host count (after one untimed warm-up), and
ready(8 hosts) / ready(1 host).  Goal: <= 2x, i.e. hosts are started in
parallel, not in turn.

All simulated hosts share this machine's cores, and each one's start costs
CPU that a real cluster spends on separate machines: sshd, the user's login
shell with its rc files (every SSH command runs through it), the preflight's
``python -m launcher --version`` and the remote launcher.  When ``ready`` sits
close to the CPU floor, the head is not what serializes the hosts.

Run:  .venv/bin/python benchmarks/bench_ssh_fanout.py [--repeat N] [--ranks-per-host 1|2] [--hosts 1,2,4,8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from sshd_hosts import start_cluster  # noqa: E402  (the test fixture doubles as the benchmark's hosts)

GOAL_RATIO = 2.0
RANK = 'date +%s.%N > "$DLAUNCH_RANK_DIR/up"'


def write_table(path: Path, hosts: list[str], per_host: int) -> Path:
    servers = [{"server_id": host, "device": [{"device_id": str(d), "device_ip": f"192.0.{s + 2}.{d + 10}",
                                               "rank_id": str(s * per_host + d)} for d in range(per_host)]}
               for s, host in enumerate(hosts)]
    path.write_text(json.dumps({"version": "1.0", "server_count": str(len(hosts)), "server_list": servers,
                                "status": "completed"}))
    return path


def machine_cpu() -> float:
    times = psutil.cpu_times()
    return times.user + times.nice + times.system


def launch_once(cluster, table: Path, out: Path, run_id: str, ranks: int) -> tuple[float, float, float, float]:
    """(ready, wall, machine cpu, start spread) in seconds for one launch; exits the benchmark if it fails."""
    argv = [sys.executable, "-m", "launcher", "cluster", "/bin/sh", "--no-python", "--rank-table", str(table),
            "--ssh", "--ssh-config", str(cluster.ssh_config), "--profile", "a2", "--output-dir", str(out),
            "--run-id", run_id, "--console", "none", "--", "-c", RANK]
    cpu, start = machine_cpu(), time.time()
    result = subprocess.run(argv, cwd=out.parent, capture_output=True, text=True, timeout=120)
    wall, cpu = time.time() - start, machine_cpu() - cpu
    if result.returncode != 0:
        sys.exit(f"launch {run_id} exited {result.returncode}:\n{result.stderr}")
    stamps = [float((out / run_id / f"rank_{r:03d}" / "up").read_text()) for r in range(ranks)]
    spread = json.loads((out / run_id / "summary.head.json").read_text())["hosts_started_within_s"]
    return max(stamps) - start, wall, cpu, spread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ranks-per-host", type=int, default=1, choices=(1, 2))
    parser.add_argument("--hosts", default="1,2,4,8", help="host counts to measure (default 1,2,4,8)")
    args = parser.parse_args()
    counts = [int(c) for c in args.hosts.split(",")]
    print(f"{os.cpu_count()} cores; {args.ranks_per_host} no-op rank(s) per host; median of {args.repeat} "
          f"launches after 1 warm-up")
    ready_by_count = {}
    with tempfile.TemporaryDirectory(prefix="bench_ssh_") as tmp, \
            start_cluster(Path(tmp) / "sshd", max(counts)) as cluster:
        addresses = [host.address for host in cluster.hosts]
        for count in counts:
            table = write_table(Path(tmp) / f"rt{count}.json", addresses[:count], args.ranks_per_host)
            out = Path(tmp) / f"runs{count}"
            ranks = count * args.ranks_per_host
            launch_once(cluster, table, out, "warmup", ranks)
            timings = [launch_once(cluster, table, out, f"r{i}", ranks) for i in range(args.repeat)]
            ready, wall, cpu, spread = (statistics.median(t[i] for t in timings) for i in range(4))
            ready_by_count[count] = ready
            print(f"{count} host(s), {ranks:2d} rank(s): every rank running after {ready * 1000:5.0f} ms "
                  f"(min {min(t[0] for t in timings) * 1000:.0f}, max {max(t[0] for t in timings) * 1000:.0f}); "
                  f"head wall {wall * 1000:.0f} ms; machine cpu {cpu * 1000:.0f} ms = floor "
                  f"{cpu / os.cpu_count() * 1000:.0f} ms on {os.cpu_count()} cores; "
                  f"hosts started within {spread * 1000:.0f} ms")
    if 1 in ready_by_count and max(counts) > 1:
        ratio = ready_by_count[max(counts)] / ready_by_count[1]
        verdict = "meets" if ratio <= GOAL_RATIO else "MISSES"
        print(f"ratio {max(counts)} hosts / 1 host: {ratio:.2f}x ({verdict} the goal of <= {GOAL_RATIO:g}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

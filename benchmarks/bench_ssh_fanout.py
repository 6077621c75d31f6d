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

The machine's CPU is split into the head's own (the head process alone, all its threads, measured as every
launcher is: benchmarks/harness.py) and the rest: the simulated hosts (sshd, login shells, host launchers,
ranks) and whatever else ran meanwhile.  Reported per host: the head's CPU and its peak RSS (goals: <= 15 ms
per host, <= 64 MiB at 64 hosts), and the hosts' CPU.

Run:  .venv/bin/python benchmarks/bench_ssh_fanout.py [--repeat N] [--ranks-per-host 1|2] [--hosts 1,2,4,8]
      (--hosts 1,32,64: the head at scale; every host is an sshd on 127.0.0.x)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from sshd_hosts import start_cluster  # noqa: E402  (the test fixture doubles as the benchmark's hosts)

sys.path.insert(0, str(ROOT / "benchmarks"))
from harness import MIB, run_launcher  # noqa: E402  (the shared harness: one launcher run measured)

GOAL_RATIO = 2.0
PARALLEL_GOAL_HOSTS = 8   # beyond, the simulated hosts' CPU on this one machine sets the pace
HEAD_CPU_GOAL_MS, HEAD_RSS_GOAL_MIB = 15, 64
RANK = 'date +%s.%N > "$DLAUNCH_RANK_DIR/up"'


def write_table(path: Path, hosts: list[str], per_host: int) -> Path:
    hosts = sorted(hosts)   # HCCL's rule (profile a2): ranks follow server_id text order ('127.0.0.10' < '127.0.0.9')
    servers = [{"server_id": host, "device": [{"device_id": str(d), "device_ip": f"192.0.{s + 2}.{d + 10}",
                                               "rank_id": str(s * per_host + d)} for d in range(per_host)]}
               for s, host in enumerate(hosts)]
    path.write_text(json.dumps({"version": "1.0", "server_count": str(len(hosts)), "server_list": servers,
                                "status": "completed"}))
    return path


def machine_cpu() -> float:
    times = psutil.cpu_times()
    return times.user + times.nice + times.system


def launch_once(cluster, table: Path, out: Path, run_id: str, ranks: int) -> dict[str, float]:
    """One launch: ready, wall, machine CPU, the head's own CPU and peak RSS, the hosts' start spread (seconds,
    bytes); exits the benchmark if it fails.  The head is measured as every launcher is (harness.run_launcher):
    its own CPU from /proc/PID/stat once it has exited, before it is reaped."""
    argv = [sys.executable, "-m", "launcher", "cluster", "/bin/sh", "--no-python", "--rank-table", str(table),
            "--ssh", "--ssh-config", str(cluster.ssh_config), "--profile", "a2", "--output-dir", str(out),
            "--run-id", run_id, "--console", "none", "--connect-timeout", "120", "--", "-c", RANK]
    # 64 simulated hosts' handshakes, sshds and shells share the machine's cores: the default 10 s can pass
    cpu, start = machine_cpu(), time.time()
    run = run_launcher("dlaunch", argv, dict(os.environ), str(out.parent), timeout=300)
    cpu = machine_cpu() - cpu
    if run.exit_code != 0:
        sys.exit(f"launch {run_id} exited {run.exit_code}:\n{run.stderr}")
    stamps = [float((out / run_id / f"rank_{r:03d}" / "up").read_text()) for r in range(ranks)]
    spread = json.loads((out / run_id / "summary.head.json").read_text())["hosts_started_within_s"]
    return {"ready": max(stamps) - start, "wall": run.wall, "cpu": cpu, "head_cpu": run.cpu_own,
            "head_rss": run.peak_rss, "spread": spread}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ranks-per-host", type=int, default=1, choices=(1, 2))
    parser.add_argument("--hosts", default="1,2,4,8", help="host counts to measure (default 1,2,4,8)")
    args = parser.parse_args()
    counts = [int(c) for c in args.hosts.split(",")]
    print(f"{os.cpu_count()} cores; {args.ranks_per_host} no-op rank(s) per host; median of {args.repeat} "
          f"launches after 1 warm-up")
    ready_by_count, head_by_count, floor_by_count = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_ssh_") as tmp, \
            start_cluster(Path(tmp) / "sshd", max(counts)) as cluster:
        addresses = [host.address for host in cluster.hosts]
        # the hosts' launchers start in this directory (the head's): they run this checkout's dlaunch, as the
        # head does, not whatever the interpreter's site-packages hold
        (Path(tmp) / "launcher").symlink_to(ROOT / "launcher")
        for count in counts:
            table = write_table(Path(tmp) / f"rt{count}.json", addresses[:count], args.ranks_per_host)
            out = Path(tmp) / f"runs{count}"
            ranks = count * args.ranks_per_host
            launch_once(cluster, table, out, "warmup", ranks)
            timings = [launch_once(cluster, table, out, f"r{i}", ranks) for i in range(args.repeat)]
            med = {key: statistics.median(t[key] for t in timings) for key in timings[0]}
            ready_by_count[count] = med["ready"]
            head_by_count[count] = med["head_cpu"]
            floor_by_count[count] = med["cpu"] / (os.cpu_count() or 1)
            base = head_by_count.get(1)
            marginal = (f"; {(med['head_cpu'] - base) / (count - 1) * 1000:.1f} ms per host beyond the first"
                        if base is not None and count > 1 else "")
            hosts_cpu = med["cpu"] - med["head_cpu"]
            print(f"{count} host(s), {ranks:2d} rank(s): every rank running after {med['ready'] * 1000:5.0f} ms "
                  f"(min {min(t['ready'] for t in timings) * 1000:.0f}, max "
                  f"{max(t['ready'] for t in timings) * 1000:.0f}); head wall {med['wall'] * 1000:.0f} ms; "
                  f"machine cpu {med['cpu'] * 1000:.0f} ms = floor {med['cpu'] / os.cpu_count() * 1000:.0f} ms on "
                  f"{os.cpu_count()} cores; hosts started within {med['spread'] * 1000:.0f} ms", flush=True)
            print(f"    head: cpu {med['head_cpu'] * 1000:.0f} ms = {med['head_cpu'] / count * 1000:.1f} ms per host "
                  f"{marginal} (goal <= {HEAD_CPU_GOAL_MS:g}), peak RSS {med['head_rss'] / MIB:.1f} MiB (goal <= "
                  f"{HEAD_RSS_GOAL_MIB:g}); simulated hosts (sshd, shells, host launchers, ranks) and the rest of "
                  f"the machine: cpu {hosts_cpu * 1000:.0f} ms = {hosts_cpu / count * 1000:.0f} ms per host",
                  flush=True)
    parallel = [c for c in counts if 1 < c <= PARALLEL_GOAL_HOSTS]
    if 1 in ready_by_count and parallel:
        ratio = ready_by_count[max(parallel)] / ready_by_count[1]
        verdict = "meets" if ratio <= GOAL_RATIO else "MISSES"
        print(f"ratio {max(parallel)} hosts / 1 host: {ratio:.2f}x ({verdict} the goal of <= {GOAL_RATIO:g}x)")
    for count in (c for c in counts if c > PARALLEL_GOAL_HOSTS):
        print(f"{count} hosts: every rank running after {ready_by_count[count]:.1f} s against a CPU floor of "
              f"{floor_by_count[count]:.1f} s: the simulated hosts' own CPU on {os.cpu_count()} cores sets the pace "
              f"here (the {GOAL_RATIO:g}x goal is for up to {PARALLEL_GOAL_HOSTS} hosts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Hosts of one job without a head (execute/job): cross-host fail-fast, and the coordinator at 1,000 hosts.

Part 1, fail-fast: N real ``dlaunch cluster`` processes, one per host address 127.0.0.2 ... (2 and 16
hosts), each in its own directory with its own run directory, one rank each. Every rank is a shell
(``--no-python /bin/sh``, no Python start-up in the measurement): the last host's rank waits until every
host's ranks run, writes the time and exits 3; the others sleep. Measured: from the failing rank's stamp
to the moment the last host's dlaunch has exited (every host stopped its rank, agreed on the verdict,
wrote its summary). Median of --repeat jobs per size. Goal: < 0.1 s.

Part 2, scale: the coordinator alone in a process of its own (as the master host's dlaunch runs it),
and 1,000 simulated hosts in another: real ``Member`` objects (the protocol's own code: handshake with
HMAC proofs, heartbeats) on one selector. Measured: the coordinator's RSS before and after 1,000 hosts
joined (per host), its CPU time per second of steady heartbeats (per host), and the time from one host
sending "stop" to the last of the other 999 hearing it. Goal: < 0.5 s, RSS < 200 MiB.

There is no peer to compare with: torchrun's hosts learn of another host's failure only through their
rendezvous (or the collective's timeout); ``cluster --ssh``'s head, dlaunch's other way, is measured by
bench_ssh_fanout.py and its tests (0.16 s median from a rank's exit to the head's on 2 cores).

Part 3 (--attack MODE): 2 hosts' fail-fast while tests/programs/job_port_attacker.py, holding no secret,
attacks the master host's job port from 127.0.0.9, alternating with quiet runs: what a stranger costs a stop.

Run:  .venv/bin/python benchmarks/bench_job.py [--repeat N] [--hosts 2,16] [--simulated 1000] [--attack storm]
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.execute.job.member import Member  # noqa: E402
from launcher.execute.job.protocol import job_secret  # noqa: E402

FAIL_GOAL, BROADCAST_GOAL, RSS_GOAL_MIB = 0.1, 0.5, 200
RANK = ('if [ "$RANK" = "$FAIL_RANK" ]; then while [ ! -e "$GO" ]; do sleep 0.01; done; '
        'date +%s.%N > "$DLAUNCH_RANK_DIR/failed_at"; exit 3; else exec sleep 120; fi')


def write_table(path: Path, count: int) -> Path:
    servers = [{"server_id": f"127.0.0.{index + 2}", "device": [
        {"device_id": "0", "device_ip": f"192.0.2.{index + 10}", "rank_id": str(index)}]} for index in range(count)]
    path.write_text(json.dumps({"version": "1.0", "server_count": str(count), "server_list": servers,
                                "status": "completed"}))
    return path


def fail_fast_once(count: int, port: int, workdir: Path, attack: str | None = None) -> float:
    """Seconds from the failing rank's exit to the last host's dlaunch exit, for one job of ``count`` hosts;
    with ``attack``, while tests/programs/job_port_attacker.py attacks the master host's job port."""
    table = write_table(workdir / "rt.json", count)
    go = workdir / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAIL_RANK": str(count - 1), "GO": str(go)}
    procs, ended = [], {}
    for index in range(count):
        cwd = workdir / f"host{index}"
        cwd.mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "launcher", "cluster", "--no-python", "/bin/sh", "--rank-table", str(table),
             "--rank-start", str(index), "--run-id", "bench", "--master-port", str(port), "--profile", "structure",
             "--console", "none", "--grace-period", "5", "--", "-c", RANK],
            cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def wait(proc):
        proc.wait()
        ended[proc.pid] = time.time()

    waiters = [threading.Thread(target=wait, args=(proc,)) for proc in procs]
    for waiter in waiters:
        waiter.start()
    pid_files = [workdir / f"host{i}" / "dlaunch_runs" / "bench" / f"pids.127.0.0.{i + 2}.json" for i in range(count)]
    deadline = time.monotonic() + 120
    while not all(path.exists() for path in pid_files):
        if time.monotonic() > deadline:
            raise SystemExit("the hosts did not start within 120 s")
        time.sleep(0.05)
    time.sleep(1.0)   # every host has joined the job (they join within milliseconds of starting)
    attacker = None
    if attack:   # a stranger on the network, from its own address, for a second before the failure and after
        attacker = subprocess.Popen([sys.executable, str(ROOT / "tests" / "programs" / "job_port_attacker.py"),
                                     attack, "127.0.0.2", str(port + 1), "--source", "127.0.0.9", "--seconds", "3"],
                                    stdout=subprocess.DEVNULL)
        time.sleep(1.0)
    go.touch()
    for waiter in waiters:
        waiter.join()
    if attacker is not None:
        attacker.wait()
    codes = sorted(proc.returncode for proc in procs)
    if codes != sorted([3] + [75] * (count - 1)):
        raise SystemExit(f"unexpected exit codes {codes}")
    failed_at = float((workdir / f"host{count - 1}" / "dlaunch_runs" / "bench" / f"rank_{count - 1:03d}"
                       / "failed_at").read_text())
    return max(ended.values()) - failed_at


def one_host_once(workdir: Path) -> float:
    """The baseline: one ``dlaunch run`` whose only rank fails; seconds from its exit to dlaunch's."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAIL_RANK": "0", "GO": str(workdir / "go")}
    (workdir / "go").touch()
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "run", "--ranks", "1", "--no-python", "/bin/sh",
                             "--run-id", "bench", "--console", "none", "--", "-c", RANK],
                            cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.wait()
    ended = time.time()
    return ended - float((workdir / "dlaunch_runs" / "bench" / "rank_000" / "failed_at").read_text())


# ---------------------------------------------------------------- 1,000 simulated hosts

COORDINATOR = """
import sys, time
sys.path.insert(0, {root!r})
from launcher.execute.job.coordinator import Coordinator
from launcher.execute.job.protocol import bind_address
hosts = [f"h{{i}}" for i in range({count})]
listener = bind_address("127.0.0.1", {port})
print("ready", flush=True)
Coordinator(listener, bytes.fromhex({secret!r}), "bench", hosts, max_restarts=0, host_timeout={timeout},
            join_timeout=600).serve_forever()
"""


def simulate(count: int, port: int, host_timeout: float, steady: float) -> dict:
    secret = job_secret({}, "bench-table", "bench")
    coordinator = subprocess.Popen([sys.executable, "-c", COORDINATOR.format(
        root=str(ROOT), count=count, port=port, secret=secret.hex(), timeout=host_timeout)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert coordinator.stdout is not None and coordinator.stdout.readline().strip() == "ready"
        master = psutil.Process(coordinator.pid)
        rss_before = master.memory_info().rss
        heard: dict[int, float] = {}
        selector = selectors.DefaultSelector()
        members = []
        for index in range(count):
            member = Member("127.0.0.1", port, secret, "bench", index, host_timeout=host_timeout, join_timeout=120,
                            deliver=lambda event, i=index: event["t"] == "stop" and heard.setdefault(i, time.time()),
                            master_name="h0")
            member.register(selector)
            members.append(member)

        def run_until(done, limit):
            deadline = time.monotonic() + limit
            while not done() and time.monotonic() < deadline:
                timeout = min(member.tick() for member in members)
                ready = selector.select(min(timeout, 0.05))
                by_fd = {member.sock.fileno(): member for member in members if member.sock is not None}
                for key, mask in ready:
                    if key.fd in by_fd:
                        by_fd[key.fd].on_ready(mask)

        joined_started = time.monotonic()
        run_until(lambda: all(m.state == "joined" for m in members), 120)
        join_took = time.monotonic() - joined_started
        if not all(m.state == "joined" for m in members):
            raise SystemExit(f"only {sum(m.state == 'joined' for m in members)} of {count} hosts joined")
        cpu_before = sum(master.cpu_times()[:2])
        run_until(lambda: False, steady)
        cpu_steady = sum(master.cpu_times()[:2]) - cpu_before
        rss_after = master.memory_info().rss
        sent = time.time()
        members[count - 1].send({"t": "stop", "attempt": 0, "cause": {"kind": "failed", "rank": count - 1,
                                                                       "exit_code": 3, "end": sent}})
        run_until(lambda: len(heard) >= count - 1, 30)
        if len(heard) < count - 1:
            raise SystemExit(f"only {len(heard)} of {count - 1} hosts heard the stop")
        return {"hosts": count, "join_s": join_took, "broadcast_s": max(heard.values()) - sent,
                "rss_before_mib": rss_before / 2**20, "rss_after_mib": rss_after / 2**20,
                "rss_per_host_kib": (rss_after - rss_before) / count / 1024,
                "cpu_per_host_per_s_us": cpu_steady / steady / count * 1e6, "heartbeat_s": host_timeout / 5}
    finally:
        coordinator.kill()
        coordinator.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--hosts", default="2,16")
    parser.add_argument("--simulated", type=int, default=1000)
    parser.add_argument("--host-timeout", type=float, default=15.0)
    parser.add_argument("--steady", type=float, default=10.0, help="seconds of heartbeats to measure CPU over")
    parser.add_argument("--attack", choices=("storm", "fuzz", "hold", "slowloris"),
                        help="also measure 2 hosts' fail-fast while a stranger attacks the job port this way")
    args = parser.parse_args()
    port = 29900
    print(f"machine: {os.cpu_count()} cores; {sys.executable}")
    alone = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench_job_") as tmp:
            alone.append(one_host_once(Path(tmp)))
    baseline = statistics.median(alone)
    print(f"one host (dlaunch run), the baseline: median {baseline:.3f} s from the failing rank's exit to dlaunch's "
          f"exit (runs: {', '.join(f'{t:.3f}' for t in alone)})")
    for count in [int(c) for c in args.hosts.split(",")]:
        took = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="bench_job_") as tmp:
                took.append(fail_fast_once(count, port, Path(tmp)))
            port += 2
        median = statistics.median(took)
        print(f"fail-fast, {count:2d} hosts: median {median:.3f} s from the failing rank's exit to the last host's "
              f"dlaunch exit (runs: {', '.join(f'{t:.3f}' for t in took)}); {median / baseline:.1f}x one host; "
              f"goal < {FAIL_GOAL} s: {'met' if median < FAIL_GOAL else 'NOT met'}")
    if args.attack:
        quiet, attacked = [], []
        for _ in range(args.repeat):
            for runs, attack in ((quiet, None), (attacked, args.attack)):
                with tempfile.TemporaryDirectory(prefix="bench_job_") as tmp:
                    runs.append(fail_fast_once(2, port, Path(tmp), attack))
                port += 2
        ratio = statistics.median(attacked) / statistics.median(quiet)
        print(f"fail-fast, 2 hosts, the master's job port under a '{args.attack}' attack: median "
              f"{statistics.median(attacked):.3f} s (runs: {', '.join(f'{t:.3f}' for t in attacked)}); quiet, "
              f"alternating with it: {statistics.median(quiet):.3f} s; {ratio:.2f}x")
    found = simulate(args.simulated, port + 10, args.host_timeout, args.steady)
    print(f"{found['hosts']} simulated hosts: all joined in {found['join_s']:.2f} s; stop broadcast to all in "
          f"{found['broadcast_s'] * 1000:.1f} ms (goal < {BROADCAST_GOAL * 1000:.0f} ms: "
          f"{'met' if found['broadcast_s'] < BROADCAST_GOAL else 'NOT met'})")
    print(f"coordinator RSS {found['rss_before_mib']:.1f} MiB before, {found['rss_after_mib']:.1f} MiB with "
          f"{found['hosts']} hosts ({found['rss_per_host_kib']:.1f} KiB per host; goal < {RSS_GOAL_MIB} MiB: "
          f"{'met' if found['rss_after_mib'] < RSS_GOAL_MIB else 'NOT met'}); CPU "
          f"{found['cpu_per_host_per_s_us']:.1f} us per host per second (heartbeat every {found['heartbeat_s']:g} s)")
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Helpers for tests that start real launches: run dlaunch, find its run, find processes it left."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
RANK_PROGRAM = str(ROOT / "tests" / "programs" / "rank.py")


def dlaunch_argv(*args):
    return [sys.executable, "-m", "launcher", *map(str, args)]


def dlaunch_env(env=None) -> dict:
    """The environment a test's dlaunch runs in: this checkout first on the path, installed or not."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}


def run_dlaunch(*args, cwd=None, timeout=120, env=None, input=None):
    """Run the real CLI in a fresh interpreter, as a user would; the one way tests start it and wait."""
    return subprocess.run(dlaunch_argv(*args), cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dlaunch_env(env), input=input)


def start_dlaunch(*args, cwd, env=None, **popen):
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen(dlaunch_argv(*args), cwd=cwd, env=dlaunch_env(env), **popen)


# Ports the tests' jobs listen on come from below the kernel's ephemeral range (32768-60999 here): a port
# the kernel picked (bind to 0) is free only until it hands the same number to an outgoing connection, and a
# cluster job listens on two (the master port and its coordinator on the next one), so a kernel-picked port
# raced the gloo and ssh connections of tests running beside it.
_TEST_PORTS = (20000, 29399)   # below torch's 29400-29600 and the 30000-32767 where dlaunch run picks its own


def free_port(address: str = "127.0.0.1", span: int = 2) -> int:
    """A port P such that P .. P+span-1 are free on ``address`` now, outside the kernel's ephemeral range, and
    claimed for this test process's life (``claim_port``) so that no test beside it draws them."""
    import socket

    from launcher.host.devices import claim_port
    for _ in range(200):
        port = random.randrange(*_TEST_PORTS)
        if not all(claim_port(address, port + offset) for offset in range(span)):
            continue
        socks = []
        try:
            for offset in range(span):
                sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind((address, port + offset))
            return port
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {span} free consecutive ports on {address} in {_TEST_PORTS}")


class Hang(AssertionError):
    """A call that ran past its time (``within``)."""


def within(seconds: float, function, what: str = "it"):
    """``function()``, failing with Hang if it runs past ``seconds`` (SIGALRM: the main thread only), so a
    command that would hang fails its test instead of hanging the suite."""
    def alarm(*_):
        raise Hang(f"{what} still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return function()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def latest_run(output_dir: Path) -> Path:
    return (output_dir / "latest").resolve()


def summary(run_dir: Path, name="summary.json") -> dict:
    return json.loads((run_dir / name).read_text())


def records(rank_dir: Path, name: str) -> list[dict]:
    path = rank_dir / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# Set by the suite for each test (tests/conftest.py) and inherited by what it starts: two tests that run side by
# side under one run id (three used "two") never find, or kill, each other's ranks.
TEST_OWNER_ENV = "PYTEST_DLAUNCH_TEST_OWNER"


def processes_of_run(run_id: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose environment carries this run id and were started by this test (a process
    without the test's mark, one an sshd or a pod's clean environment started, counts by its run id alone): ranks
    and their children."""
    found = []
    mine = os.environ.get(TEST_OWNER_ENV)
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
            if env.get("DLAUNCH_RUN_ID") == run_id and env.get(TEST_OWNER_ENV, mine) == mine:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_until(predicate, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_run(run_id: str) -> None:
    """Test cleanup: never leave a failed test's processes behind."""
    for proc in processes_of_run(run_id):
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def start_hosts(tmp_path: Path, program, table: Path, run_id: str, port: int, *flags, hosts: int = 2,
                ranks_per_host: int = 2) -> list:
    """``dlaunch cluster`` once per host of ``table`` (``hosts`` of ``ranks_per_host``), each in its own directory
    ``tmp_path/host<i>``, as Slurm or a person would start them; ``flags`` go before the program's ``--``."""
    procs = []
    for index in range(hosts):
        cwd = tmp_path / f"host{index}"
        cwd.mkdir(exist_ok=True)
        procs.append(start_dlaunch("cluster", program, "--rank-table", table, "--rank-start", index * ranks_per_host,
                                   "--run-id", run_id, "--master-port", port, "--profile", "structure", *flags,
                                   cwd=cwd))
    return procs


def write_rank_table(path: Path, hosts=("127.0.0.2", "127.0.0.3"), devices_per_host: int = 8) -> Path:
    """A version 1.0 table: servers by address, ranks in server order, unique (never contacted) device IPs."""
    servers = [{"server_id": host, "host_nic_ip": "reserve",
                "device": [{"device_id": str(d), "device_ip": f"192.0.{s + 2}.{d + 10}",
                            "rank_id": str(s * devices_per_host + d)} for d in range(devices_per_host)]}
               for s, host in enumerate(hosts)]
    path.write_text(json.dumps({"version": "1.0", "server_count": str(len(hosts)), "server_list": servers,
                                "status": "completed"}))
    return path


def side_by_side(run, *arguments) -> dict:
    """``run(a)`` for every argument at once, in threads, as hosts started by hand would be: {a: result}."""
    import threading

    results = {}
    threads = [threading.Thread(target=lambda a=a: results.__setitem__(a, run(a))) for a in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results

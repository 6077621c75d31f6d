"""dlaunch as a container's PID 1 (a private PID namespace): no zombie, SIGTERM forwarded, true exit code,
and the termination message in a temporary file (never /dev/termination-log)."""

import os
import shutil
import signal
import subprocess
import time

import psutil
import pytest

from tests.launching import ROOT, dlaunch_argv, dlaunch_env, latest_run

PROGRAM = str(ROOT / "tests" / "programs" / "orphans.py")
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root and unshare for a private PID namespace")


def _start(tmp_path, how, *extra):
    argv = ["unshare", "--pid", "--fork", "--mount-proc",
            *dlaunch_argv("run", PROGRAM, "--ranks", "1", "--output-dir", tmp_path / "runs",
                          "--termination-log", tmp_path / "termination", *extra, "--", how)]
    return subprocess.Popen(argv, cwd=tmp_path, env=dlaunch_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_as_pid1_a_failure_reaps_orphans_and_writes_the_root_cause(tmp_path):
    proc = _start(tmp_path, "7")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 7, err
    run = latest_run(tmp_path / "runs")
    assert (run / "rank_000" / "zombies").read_text() == "0"
    message = (tmp_path / "termination").read_text()
    assert "rank 0" in message and "exited with code 7" in message and "last words of the rank" in message
    assert len(message.splitlines()) == 1


def test_sigterm_to_pid1_reaches_the_ranks_and_the_exit_code_says_so(tmp_path):
    proc = _start(tmp_path, "wait", "--grace-period", "20")
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "runs").glob("*/rank_000/ready")):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        unshare = psutil.Process(proc.pid)
        pid1 = unshare.children()[0]   # the forked child: PID 1 of the namespace, running dlaunch
        assert "launcher" in pid1.cmdline()
        pid1.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM: told 1 rank(s) to stop" in err
    run = latest_run(tmp_path / "runs")
    assert (run / "rank_000" / "zombies").read_text() == "0"
    assert "interrupted by SIGTERM" in (tmp_path / "termination").read_text()


def test_not_pid1_the_orphans_of_a_rank_are_reaped_while_it_runs(tmp_path):
    """dlaunch is a child subreaper outside a PID namespace too: a rank's short-lived orphans become its
    children, and it reaps them as they exit rather than leaving them as zombies until the attempt ends
    (issue 38, item 23; torchrun leaves none either, their orphans going to init)."""
    from tests.launching import run_dlaunch

    done = run_dlaunch("run", PROGRAM, "--ranks", "1", "--output-dir", tmp_path / "runs", "--", "0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (latest_run(tmp_path / "runs") / "rank_000" / "zombies").read_text() == "0"


def test_sigterm_while_waiting_for_the_operators_table_stops_pid1_at_once(tmp_path):
    """An AscendJob pod's dlaunch waits for hccl.json to be completed; the kubelet's SIGTERM then (the job
    deleted) must stop it at once with 143 and a termination message, not be dropped (PID 1 has no default
    action) until --join-timeout runs out."""
    table = tmp_path / "hccl.json"
    table.write_text('{"status": "initializing"}')
    argv = ["unshare", "--pid", "--fork", "--mount-proc",
            *dlaunch_argv("cluster", PROGRAM, "--join-timeout", "120", "--output-dir", tmp_path / "runs",
                          "--termination-log", tmp_path / "termination")]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=dlaunch_env({"RANK_TABLE_FILE": str(table)}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        waiting = proc.stderr.readline()
        assert "waiting up to 120 s (--join-timeout) for rank table" in waiting, waiting
        pid1 = psutil.Process(proc.pid).children()[0]
        started = time.monotonic()
        pid1.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert time.monotonic() - started < 10
    message = (tmp_path / "termination").read_text()
    assert message == "interrupted by SIGTERM while waiting for the job's rank table; no rank was started\n"
    assert "Traceback" not in err and not (tmp_path / "runs").exists()

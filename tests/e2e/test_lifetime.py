"""Exit codes and process lifetime under attack: a closed console, a dead or stuck watchdog, a launcher
SIGKILLed mid-spawn, ranks that start daemons.  Every process here is real; nothing may be left behind."""

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.launching import (
    RANK_PROGRAM,
    ROOT,
    dlaunch_argv,
    dlaunch_env,
    kill_run,
    latest_run,
    pid_alive,
    processes_of_run,
    records,
    run_dlaunch,
    start_dlaunch,
    summary,
    wait_until,
)


def test_closed_console_keeps_the_root_cause_exit_code(tmp_path):
    """``dlaunch run ... 2>&1 | head -1``: the console closes at once, the exit code is still rank 1's 3."""
    command = " ".join(map(str, dlaunch_argv("run", RANK_PROGRAM, "--ranks", "2", "--console", "all",
                                             "--output-dir", tmp_path / "runs", "--", "--print", "200",
                                             "--fail-rank", "1", "--code", "3", "--after", "0.3",
                                             "--sleep", "30")))
    done = subprocess.run(["bash", "-c", f'{command} 2>&1 | head -1 >/dev/null; echo "${{PIPESTATUS[0]}}"'],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "3", done.stderr
    assert summary(latest_run(tmp_path / "runs"))["exit_code"] == 3


def _watchdog_of(launcher: psutil.Process) -> psutil.Process:
    """The launcher's one child that is not a rank (ranks carry DLAUNCH_RANK_DIR)."""
    def find():
        for child in launcher.children():
            try:
                if "DLAUNCH_RANK_DIR" not in child.environ():
                    return child
            except psutil.Error:
                continue
        return None
    found = wait_until(find, timeout=10)
    assert found, "no watchdog process found"
    return found


@pytest.mark.parametrize("attack", ["SIGKILL", "SIGSTOP"])
def test_a_dead_or_stuck_watchdog_changes_nothing_of_the_outcome(tmp_path, attack):
    out = tmp_path / "runs"
    proc = start_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--run-id", "wd", "--",
                         "--fail-rank", "1", "--code", "7", "--after", "1.5", "--sleep", "30", cwd=tmp_path)
    try:
        watchdog = _watchdog_of(psutil.Process(proc.pid))
        watchdog.send_signal(getattr(signal, attack))
        _, stderr = proc.communicate(timeout=60)
    finally:
        kill_run("wd")
    assert proc.returncode == 7, stderr
    assert summary(out / "wd")["exit_code"] == 7
    assert "watchdog" in stderr and "Traceback" not in stderr
    assert not wait_until(lambda: psutil.pid_exists(watchdog.pid) and watchdog.status() != psutil.STATUS_ZOMBIE,
                          timeout=0.5)


def test_a_replaced_watchdog_still_kills_the_ranks_of_a_sigkilled_launcher(tmp_path):
    proc = start_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", tmp_path / "runs", "--run-id",
                         "wd2", "--", "--child", "--sleep", "60", cwd=tmp_path)
    try:
        launcher = psutil.Process(proc.pid)
        _watchdog_of(launcher).kill()
        assert wait_until(lambda: len(processes_of_run("wd2")) >= 4, timeout=20)   # 2 ranks, 2 children
        time.sleep(0.3)   # the launcher notices the dead watchdog and starts another
        proc.kill()
        proc.wait()
        assert wait_until(lambda: not processes_of_run("wd2"), timeout=10), processes_of_run("wd2")
    finally:
        kill_run("wd2")


def test_sigkill_at_random_moments_of_the_spawn_loop_leaves_no_rank(tmp_path):
    """The launcher is SIGKILLed 0-150 ms after its watchdog appears, while 8 ranks are being spawned, many
    times: a rank between fork and exec, or spawned but not yet registered, must still die with it."""
    rng = random.Random(12)
    survivors = {}
    for attempt in range(20):
        run_id = f"spawn{attempt}"
        proc = start_dlaunch("run", RANK_PROGRAM, "--ranks", "8", "--output-dir", tmp_path / "runs", "--run-id",
                             run_id, "--console", "none", "--", "--sleep", "60", cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            launcher = psutil.Process(proc.pid)
            wait_until(launcher.children, timeout=10, interval=0.002)
            time.sleep(rng.uniform(0, 0.15))
            proc.kill()
            proc.wait()
            if not wait_until(lambda run_id=run_id: not processes_of_run(run_id), timeout=5):
                survivors[run_id] = [p.pid for p in processes_of_run(run_id)]
        finally:
            kill_run(run_id)
    assert not survivors


@pytest.mark.parametrize("ending", ["success", "fail-fast"])
def test_a_daemon_a_rank_started_does_not_outlive_the_job(tmp_path, ending):
    out = tmp_path / "runs"
    failing = ["--fail-rank", "1", "--code", "5", "--after", "1", "--sleep", "30"]
    extra = failing if ending == "fail-fast" else ["--sleep", "0.5"]
    proc = start_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--", "--daemon", *extra,
                         cwd=tmp_path)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == (5 if ending == "fail-fast" else 0), stderr
    daemons = [records(latest_run(out) / f"rank_00{r}", "daemon.jsonl")[0]["pid"] for r in range(2)]
    try:
        alive = [pid for pid in daemons if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"daemons still running: {alive}"
    finally:
        for pid in daemons:   # cleanup only: the assertion above already judged them
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


PDEATHSIG = """
import ctypes, os
value = ctypes.c_int(-1)
ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(value), 0, 0, 0)   # PR_GET_PDEATHSIG
print("pdeathsig", value.value, "pid", os.getpid(), "parent", os.getppid(), flush=True)
"""


@pytest.mark.parametrize("no_python", [False, True])
def test_every_rank_dies_with_its_launcher_and_its_parent_is_the_launcher(tmp_path, no_python):
    """The death signal is armed in every rank (by setpriv before the exec where it exists, else in Python),
    and the wrapper execs in place: the rank's parent is dlaunch itself, its pid the one dlaunch watches."""
    script = tmp_path / "pdeathsig.py"
    script.write_text(PDEATHSIG)
    if no_python:
        target = tmp_path / "pdeathsig.sh"
        target.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
        target.chmod(0o755)
        args = ("--no-python", target)
    else:
        args = (script,)
    done = run_dlaunch("run", *args, "--ranks", "2", "--console", "all", "--output-dir", tmp_path / "out",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    pids = json.loads(next((tmp_path / "out").glob("*/pids.json")).read_text())
    lines = [line.split("pdeathsig", 1)[1].split() for line in done.stdout.splitlines() if "pdeathsig" in line]
    assert len(lines) == 2, done.stdout
    assert all(words[0] == str(int(signal.SIGKILL)) for words in lines)
    assert {words[2] for words in lines} == {str(r["pid"]) for r in pids["ranks"].values()}
    assert {words[4] for words in lines} == {str(pids["launcher_pid"])}


def test_a_nested_launch_leaves_nothing_when_the_outer_launcher_is_sigkilled(tmp_path):
    """An outer dlaunch whose rank runs dlaunch itself, whose ranks start children and a setsid daemon with an
    empty environment: SIGKILL the outer launcher, and the inner launcher, its watchdog, its ranks, their
    children and the daemons all go, although the outer watchdog kills the inner launcher before it can clean
    up (the daemons carry no marker: only the outer watchdog's view of its launcher's tree reaches them)."""
    inner_out = tmp_path / "inner_runs"
    inner = ["-u", "CUDA_VISIBLE_DEVICES",   # env(1) drops the outer rank's device: the inner job has 2 ranks
             sys.executable, "-m", "launcher", "run", RANK_PROGRAM, "--ranks", "2", "--output-dir", inner_out,
             "--run-id", "inner", "--console", "none", "--", "--daemon", "--child", "--sleep", "60"]
    proc = start_dlaunch("run", "--no-python", "env", "--ranks", "1", "--output-dir", tmp_path / "runs",
                         "--run-id", "outer", "--console", "none", "--", *inner, cwd=tmp_path,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    daemons: list[int] = []

    def left() -> list:
        return processes_of_run("outer") + processes_of_run("inner") + [pid for pid in daemons if pid_alive(pid)]

    try:
        assert wait_until(lambda: all(records(inner_out / "inner" / f"rank_00{r}", "daemon.jsonl") for r in range(2))
                          and len(processes_of_run("inner")) >= 4, timeout=30)   # 2 ranks, 2 children
        daemons = [records(inner_out / "inner" / f"rank_00{r}", "daemon.jsonl")[0]["pid"] for r in range(2)]
        outer_mark = processes_of_run("outer")[0].environ()["DLAUNCH_LAUNCHER_ID"]
        for rank in processes_of_run("inner"):   # the inner ranks stay marked for the outer watchdog too
            with contextlib.suppress(psutil.Error):
                env = rank.environ()
                assert env["DLAUNCH_LAUNCHER_IDS"].split() == [outer_mark, env["DLAUNCH_LAUNCHER_ID"]]
        assert all(pid_alive(pid) for pid in daemons) and processes_of_run("outer")   # the inner launcher
        time.sleep(1.5)   # the job runs a while, as jobs do, before its launcher is killed
        proc.kill()
        proc.wait()
        assert wait_until(lambda: not left(), timeout=10), left()
    finally:
        proc.kill()
        for pid in [*daemons, *(p.pid for p in processes_of_run("inner") + processes_of_run("outer"))]:
            with contextlib.suppress(psutil.Error, OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_process_marked_by_an_enclosing_launch_is_found_by_its_sweep():
    """A nested job's process carries the outer launch's marker in DLAUNCH_LAUNCHER_IDS: the outer watchdog's
    marker scan finds it even if it started after the watchdog last noted the tree."""
    from launcher.execute.local.reaper import marked_processes, marker_chain

    assert marker_chain({}, "b") == "b"
    assert marker_chain({"DLAUNCH_LAUNCHER_ID": "a"}, "b") == "a b"
    assert marker_chain({"DLAUNCH_LAUNCHER_ID": "b2", "DLAUNCH_LAUNCHER_IDS": "a b2"}, "c") == "a b2 c"
    assert len(marker_chain({"DLAUNCH_LAUNCHER_IDS": " ".join(map(str, range(1000)))}, "c").split()) == 16
    env = {"PATH": os.environ.get("PATH", ""), "DLAUNCH_LAUNCHER_ID": "inner-x1", "DLAUNCH_LAUNCHER_IDS":
           "outer-x1 inner-x1"}
    child = subprocess.Popen(["sleep", "30"], env=env)
    try:
        assert wait_until(lambda: child.pid in marked_processes("outer-x1"), timeout=5)
        assert child.pid in marked_processes("inner-x1") and child.pid not in marked_processes("outer")
    finally:
        child.kill()
        child.wait()


def test_the_end_of_attempt_sweep_scans_for_the_marker_only_where_it_is_no_subreaper():
    """A daemon that left the launcher's tree (reparented past a launcher that could not become subreaper) is
    found by the marker scan; a subreaper's sweep reads only its tree, where every orphan of its own lands.
    The sweeps run in a process of their own: a sweep kills its caller's whole tree."""
    script = textwrap.dedent("""
        import os, subprocess, sys, time
        from launcher.execute.local.reaper import sweep
        env = {"PATH": os.environ["PATH"], "DLAUNCH_LAUNCHER_ID": "lost-x1"}
        daemon = int(subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], env=env,
                                    capture_output=True, text=True, check=True).stdout)
        print(daemon, flush=True)   # the shell exited: its sleep is no child of this process
        time.sleep(0.2)             # its exec is done: the marker is in its environment
        print(sweep("lost-x1", keep=set(), quiet_rounds=1, subreaper=True), flush=True)
        print(sweep("lost-x1", keep=set(), quiet_rounds=1), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], env=dlaunch_env(), capture_output=True, text=True,
                          timeout=30)
    daemon, as_subreaper, by_marker = map(int, done.stdout.split())
    try:
        assert (as_subreaper, by_marker) == (0, 1), done.stderr
        assert wait_until(lambda: not psutil.pid_exists(daemon)
                          or psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE, timeout=5)
    finally:
        with contextlib.suppress(OSError):
            os.kill(daemon, signal.SIGKILL)

"""The survivors' window (--survivor-window, execute/local/notice.py) with real launches: when a rank dies, the
ranks still alive are told (a notice file, a signal), save, and the restart resumes from what they saved even
though the dead rank saved nothing (their saves are replicas). tests/programs/gasp_rank.py plays a
data-parallel rank."""

import json
import time

from tests.e2e.test_job_hosts import HOSTS
from tests.launching import (
    ROOT,
    free_port,
    kill_run,
    processes_of_run,
    run_dlaunch,
    start_hosts,
    write_rank_table,
)

GASP_RANK = str(ROOT / "tests" / "programs" / "gasp_rank.py")


def read(rank_dir, name):
    return json.loads((rank_dir / name).read_text())


def test_survivors_on_two_hosts_hear_save_and_the_restart_resumes_from_their_gasp(tmp_path):
    """2 hosts x 2 ranks; rank 3 (host 127.0.0.3) is SIGKILLed in step 25 with nothing saved since step 20.
    Ranks 0-2 hear of it (two of them on the other host) before anything stops them, save step 25, and the job
    restarts from step 25: rank 3 resumes from rank 2's replica.  How soon they hear grows with the machine's
    load: the order is asserted, not the delay."""
    table = write_rank_table(tmp_path / "rt.json", hosts=HOSTS[:2], devices_per_host=2)
    port = free_port(HOSTS[0], span=2)
    procs = []
    try:
        procs = start_hosts(tmp_path, GASP_RANK, table, "gasp", port, "--max-restarts", "1", "--survivor-window", "20",
                            "--host-timeout", "2", "--", "--fail-rank", "3", "--fail-after", "1.5")
        results = [proc.communicate(timeout=90) + (proc.returncode,) for proc in procs]
        left = processes_of_run("gasp")   # every host ended: no rank, standby or saver left behind
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        kill_run("gasp")
    assert left == [], left
    for _, stderr, code in results:
        assert code == 0, stderr
        assert "surviving rank(s) here of the failure; they have 20 s (--survivor-window) to save" in stderr, stderr
    run_dirs = [tmp_path / f"host{index}" / "dlaunch_runs" / "gasp" for index in (0, 1)]
    rank_dirs = {rank: run_dirs[rank // 2] / f"rank_{rank:03d}" for rank in range(4)}
    failed_at = read(rank_dirs[3], "failed.json")["at"]
    for rank in (0, 1, 2):
        heard = read(rank_dirs[rank], "heard.json")
        stopped = read(rank_dirs[rank], "sigterm.json")["at"]
        assert failed_at <= heard["at"] < stopped, (rank, heard["at"] - failed_at, stopped - failed_at)
        assert heard["notice"]["failed_rank"] == 3 and heard["notice"]["host"] == HOSTS[1]
        assert "died of SIGKILL" in heard["notice"]["reason"] and heard["notice"]["attempt"] == 0
    for rank in range(4):
        resumed = read(rank_dirs[rank], "resumed.json")
        assert resumed["step"] == "1_25", (rank, resumed)
        owner = 2 if rank == 3 else rank   # the dead rank's state comes from its host's survivor's replica
        assert resumed["from"] == str(rank_dirs[owner] / "ckpt" / "ckpt-1_25.pt"), (rank, resumed)
    # the window ended when every survivor had saved (each save before its SIGTERM: a host stops its own survivors
    # once they saved, while the other host's may still be saving), not when its 20 s were over
    saved = [(rank_dirs[r] / "ckpt" / "ckpt-1_25.pt").stat().st_mtime for r in (0, 1, 2)]
    sigterms = [read(rank_dirs[r], "sigterm.json")["at"] for r in (0, 1, 2)]
    assert all(at <= stop for at, stop in zip(saved, sigterms)) and max(sigterms) < failed_at + 20, (
        [at - failed_at for at in saved], [stop - failed_at for stop in sigterms])


def test_the_window_ends_at_its_time_rank_0_is_stopped_last_and_the_notice_signal_arrives(tmp_path):
    """One host, 3 ranks that hear but never say they saved: the window runs its full 1.5 s; then ranks 1 and
    2 get SIGTERM first and rank 0 only once they are gone (MindIO's controller). --notice-signal USR1 comes
    with the notice."""
    started = time.time()
    result = run_dlaunch("run", GASP_RANK, "--ranks", "3", "--profile", "structure", "--survivor-window", "1.5",
                         "--notice-signal", "USR1",
                         "--output-dir", tmp_path / "runs", "--run-id", "window", "--", "--fail-rank", "2",
                         "--fail-after", "0.5", "--no-save", cwd=tmp_path)
    assert result.returncode == 128 + 9, result.stderr   # the root cause: rank 2's SIGKILL
    rank_dirs = {rank: tmp_path / "runs" / "window" / f"rank_{rank:03d}" for rank in range(3)}
    failed_at = read(rank_dirs[2], "failed.json")["at"]
    sigterm = {rank: read(rank_dirs[rank], "sigterm.json")["at"] for rank in (0, 1)}
    for rank in (0, 1):   # the notice signal comes with the notice, inside the window: before the stop's SIGTERM
        assert failed_at <= read(rank_dirs[rank], "signal.json")["at"] < min(sigterm.values())
        assert read(rank_dirs[rank], "heard.json")["notice"]["failed_rank"] == 2
    assert sigterm[1] - failed_at >= 1.4, sigterm   # the whole window: nobody said it saved
    assert sigterm[0] > sigterm[1], sigterm           # rank 0 last
    assert time.time() - started < 30
    assert processes_of_run("window") == []           # a survivor that never said it saved is gone too


def test_without_a_window_survivors_are_stopped_at_once_and_told_nothing(tmp_path):
    result = run_dlaunch("run", GASP_RANK, "--ranks", "2", "--output-dir", tmp_path / "runs", "--run-id", "nowin",
                         "--", "--fail-rank", "1", "--fail-after", "0.3", cwd=tmp_path)
    assert result.returncode == 128 + 9, result.stderr
    rank0 = tmp_path / "runs" / "nowin" / "rank_000"
    assert not (rank0 / "heard.json").exists() and not (rank0 / "notice.json").exists()
    assert read(rank0, "sigterm.json")["at"] - read(tmp_path / "runs" / "nowin" / "rank_001", "failed.json")["at"] < 1


LISTENER = """
import os, sys, time
from launcher import checkpoint
if os.environ["RANK"] == "1":
    time.sleep(0.5)
    sys.exit(3)
listens = sys.argv[1] == "listen"
while True:
    if listens and checkpoint.notice() is not None:
        time.sleep(1.0)   # the save
        checkpoint.notice_saved()
        print("saved on notice", flush=True)
        listens = False
    time.sleep(0.05)
"""


def test_the_window_waits_for_the_ranks_that_watch_for_notices_alone(tmp_path):
    # issues 46 and 49: dlaunch cannot know before a failure whether the script saves on notice; a rank that asks
    # for a notice (checkpoint.notice()) says so once, and the window waits for such ranks only. The window is
    # 300 s and the run's bound 120 s: a window that waited for the deaf rank, or past the watcher's save, fails
    script = tmp_path / "listener.py"
    script.write_text(LISTENER)
    for mode, waited in (("deaf", False), ("listen", True)):
        result = run_dlaunch("run", script, "--ranks", "2", "--fault-tolerant", "--survivor-window", "300",
                             "--max-restarts", "0", "--warm-restarts", "none", "--console", "all", "--output-dir",
                             tmp_path / mode, "--", mode, cwd=tmp_path, timeout=120)
        assert result.returncode == 3, result.stderr
        said = "they have 300 s" if waited else "the 0 that watch for notices have 300 s"
        assert said in result.stderr, result.stderr
        assert ("saved on notice" in result.stdout) is waited, result.stdout

"""SIGUSR1/SIGUSR2 (and --forward-signals) reach every rank and the job goes on: the ranks decide."""

import signal
import time

from tests.launching import ROOT, latest_run, run_dlaunch, start_dlaunch, summary

PROGRAM = str(ROOT / "tests" / "programs" / "signal_counter.py")


def _wait_for(paths, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"not there: {[str(p) for p in paths if not p.exists()]}"
        time.sleep(0.05)


def test_usr1_usr2_and_named_signals_reach_every_rank_without_stopping_the_job(tmp_path):
    out = tmp_path / "runs"
    proc = start_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", out, "--forward-signals", "WINCH",
                         "--console", "all", cwd=tmp_path)
    try:
        _wait_for([out / "latest"])
        run = latest_run(out)
        ranks = [d for d in sorted(run.iterdir()) if d.is_dir() and d.name.startswith("rank")]
        _wait_for([run / d.name / "ready" for d in ranks] if ranks else [run / "rank_0" / "ready"])
        ranks = [d for d in sorted(run.iterdir()) if d.is_dir() and (d / "ready").exists()]
        assert len(ranks) == 2
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH):
            proc.send_signal(sig)
            time.sleep(0.3)   # one at a time: a rank's handler must see each, not a merged pending signal
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    for rank in ranks:
        assert set((rank / "got").read_text().split(",")) == {"SIGUSR1", "SIGUSR2", "SIGWINCH"}
    assert "SIGUSR1: forwarded to 2 process(es); the job goes on" in stderr
    assert summary(run)["exit_code"] == 0


def test_a_signal_that_cannot_be_forwarded_is_one_line_and_exit_2(tmp_path):
    for bad, says in (("KILL", "cannot be caught"), ("TERM", "already stops the job"), ("NOPE", "not a signal")):
        done = run_dlaunch("run", PROGRAM, "--forward-signals", bad, "--output-dir", tmp_path, cwd=tmp_path)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


def _wchan(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/wchan") as fh:
            return fh.read()
    except OSError:
        return ""


def test_a_sigterm_while_the_summary_is_written_does_not_lose_it(tmp_path):
    """srun --kill-on-bad-exit sends SIGTERM to a host's dlaunch once another host's has exited, often while
    this one is writing its summary; so can Kubernetes deleting a pod.  The end is already under way: the
    summary is written and the exit code is the run's.  Held there by a FIFO as the termination message's
    file (written just before the summary: its open waits for a reader) while the test sends SIGTERM."""
    import json
    import os

    from tests.launching import RANK_PROGRAM, wait_until

    fifo = tmp_path / "termination.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "runs"
    proc = start_dlaunch("run", RANK_PROGRAM, "--ranks", "1", "--termination-log", fifo, "--output-dir", out,
                         "--", "--fail-rank", "0", "--code", "3", cwd=tmp_path)
    try:
        assert wait_until(lambda: _wchan(proc.pid) == "wait_for_partner", timeout=60), "never opened the FIFO"
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)   # handled (or, before the fix, fatal) before the message is read
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)   # never waits for a writer that died
        os.set_blocking(reader, True)   # then reads until dlaunch closes its end (at once, if it is gone)
        with os.fdopen(reader, encoding="utf-8") as fh:
            message = fh.read()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 3, err
    assert "rank 0" in message and "code 3" in message
    assert json.loads((latest_run(out) / "summary.json").read_text())["exit_code"] == 3

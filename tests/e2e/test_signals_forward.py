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

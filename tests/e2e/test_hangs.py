"""Hang detection with real processes: a gloo all_reduce one rank never joins; heartbeats keep ranks alive."""

import os
import time

from launcher.contract import ExitCode
from launcher.execute.local import hangs
from launcher.plan.make import RankSpec
from tests.launching import RANK_PROGRAM, latest_run, processes_of_run, records, run_dlaunch, summary

TIMEOUT = 6.0


def test_rank_blocked_in_all_reduce_is_detected_with_stacks(tmp_path):
    out = tmp_path / "runs"
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "4", "--output-dir", out, "--hang-timeout", TIMEOUT,
                         "--", "--hang-in-allreduce", "3", cwd=tmp_path, timeout=180)
    assert result.returncode == ExitCode.HUNG, result.stderr
    run_dir = latest_run(out)
    info = summary(run_dir)
    cause = info["root_cause"]
    assert cause["hung"] is True and "hung: no output, heartbeat or checkpoint" in cause["reason"]
    assert "its last line" in cause["reason"] and "ready" in cause["reason"]
    assert "hung and was stopped" in result.stderr
    last_output = max(records(run_dir / f"rank_00{r}", "ready.jsonl")[0]["time"] for r in range(4))
    detected = min(os.stat(run_dir / f"rank_00{r}" / "stack.txt").st_mtime for r in range(4))
    assert TIMEOUT - 0.5 <= detected - last_output <= TIMEOUT + 1.0
    for rank in range(3):
        assert "all_reduce" in (run_dir / f"rank_00{rank}" / "stack.txt").read_text()
    assert "rank.py" in (run_dir / "rank_003" / "stack.txt").read_text()
    assert all(r["end"] for r in info["ranks"])
    assert processes_of_run(run_dir.name) == []


def test_heartbeat_keeps_a_silent_rank_alive(tmp_path):
    out = tmp_path / "runs"
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--hang-timeout", "2.5", "--",
                         "--heartbeat-for", "5", cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr


def test_silence_without_heartbeat_is_a_hang(tmp_path):
    out = tmp_path / "runs"
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--hang-timeout", "2.5", "--",
                         "--sleep", "30", cwd=tmp_path, timeout=60)
    assert result.returncode == ExitCode.HUNG
    assert "time.sleep" in (latest_run(out) / "rank_000" / "stack.txt").read_text() or \
        "rank.py" in (latest_run(out) / "rank_000" / "stack.txt").read_text()


def _spec(tmp_path, rank=0):
    rank_dir = tmp_path / f"rank_{rank}"
    (rank_dir / "ckpt").mkdir(parents=True)
    return RankSpec(rank=rank, local_rank=rank, device_id=rank, server_id="h", argv=[], cwd=str(rank_dir), env={},
                    rank_dir=str(rank_dir), log_file=str(rank_dir / "output.log"), env_log="",
                    ckpt_dir=str(rank_dir / "ckpt"), error_file="", console=False)


def test_every_sign_of_life_counts(tmp_path):
    spec = _spec(tmp_path)
    old = time.time() - 100
    watch = hangs.HangWatch(10.0, started=old)
    for path in (spec.log_file, os.path.join(spec.rank_dir, "heartbeat")):
        open(path, "w").close()
        os.utime(path, (old, old))
    os.utime(spec.ckpt_dir, (old, old))
    assert watch.find_hung([spec])[0] is spec
    for touched in (spec.log_file, os.path.join(spec.rank_dir, "heartbeat"), spec.ckpt_dir):
        os.utime(touched)
        assert watch.find_hung([spec]) is None
        os.utime(touched, (old, old))


def test_without_py_spy_the_stack_file_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(hangs, "_find_py_spy", lambda: None)
    spec = _spec(tmp_path)
    files, why = hangs.dump_stacks([(spec, os.getpid())], attempt=0)
    assert "no stack could be taken" in why
    assert "py-spy is not installed" in open(files[0]).read()

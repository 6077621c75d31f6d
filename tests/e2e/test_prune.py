"""dlaunch prune: the newest runs kept, old ones removed, a running one never touched."""

import os

from tests.launching import RANK_PROGRAM, kill_run, run_dlaunch, start_dlaunch, wait_until


def test_prune_keeps_the_newest_and_never_a_running_job(tmp_path):
    out = tmp_path / "runs"
    running = start_dlaunch("run", RANK_PROGRAM, "--ranks", "1", "--run-id", "live", "--output-dir", out, "--",
                            "--sleep", "60", cwd=tmp_path)
    try:
        assert wait_until(lambda: (out / "live" / "pids.json").exists(), timeout=20)
        for run_id in ("old1", "old2", "new1"):
            assert run_dlaunch("run", RANK_PROGRAM, "--ranks", "1", "--run-id", run_id, "--output-dir", out,
                               cwd=tmp_path).returncode == 0
        os.utime(out / "live", (1, 1))   # the oldest of all: pruned first, if it were not running
        (out / "notes").mkdir()          # not a run directory: never touched
        dry = run_dlaunch("prune", "--keep", "0", "--output-dir", out, "--dry-run", cwd=tmp_path)
        assert dry.returncode == 0 and "would remove 3 run(s)" in dry.stderr, dry.stderr
        assert all((out / r).is_dir() for r in ("old1", "old2", "new1"))
        done = run_dlaunch("prune", "--keep", "1", "--output-dir", out, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "kept live: it may be running" in done.stderr
        assert sorted(p.name for p in out.iterdir()) == ["latest", "live", "new1", "notes"]
    finally:
        running.kill()
        running.wait()
        kill_run("live")

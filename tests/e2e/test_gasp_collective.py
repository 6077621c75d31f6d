"""The dying gasp in a job that all-reduces every step (issue 46, item 2): a rank raises, its peers' collective
breaks, and the snippet of docs/checkpoints.md saves the step they reached, so the restart loses no step.

Three gloo ranks save every 10 steps; rank 1 raises at step 25 of the first attempt. Without the gasp the
restart would resume after step 20 (4 steps trained again); with it every rank resumes after step 24."""

import json

from tests.launching import ROOT, free_port, kill_run, latest_run, run_dlaunch, start_hosts, write_rank_table

PROGRAM = str(ROOT / "tests" / "programs" / "gasp_collective.py")


def test_the_documented_snippet_saves_the_step_the_survivors_reached(tmp_path):
    done = run_dlaunch("run", PROGRAM, "--ranks", "3", "--output-dir", tmp_path / "runs", "--survivor-window", "20",
                       "--max-restarts", "1", cwd=tmp_path, timeout=240)
    run = latest_run(tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert "rank 1 raised an exception" in done.stderr
    assert {(run / f"first_step.{rank}.1").read_text() for rank in range(3)} == {"25"}, done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert [a["root_cause"]["rank"] for a in summary["attempts"] if a["root_cause"]] == [1]


def test_on_two_hosts_the_survivors_of_both_save_the_step_they_reached(tmp_path):
    """Two hosts on 127.0.0.2-3 (two ranks each, one output directory as a shared filesystem): rank 1 on the first
    raises; the notice reaches the ranks of the second host through the job's link, and all four resume after the
    step they reached. The raise -> notice time on each surviving rank is printed (the issue's goal: <= 50 ms)."""
    hosts = ("127.0.0.2", "127.0.0.3")
    table = write_rank_table(tmp_path / "rt.json", hosts=hosts, devices_per_host=2)
    port, out = free_port(hosts[0], span=2), tmp_path / "runs"
    procs = []
    try:
        procs = start_hosts(tmp_path, PROGRAM, table, "gasp2hosts", port, "--output-dir", out, "--survivor-window",
                            "20", "--max-restarts", "1", "--host-timeout", "2", "--join-timeout", "60")
        ended = [proc.communicate(timeout=300) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        kill_run("gasp2hosts")
    run = out / "gasp2hosts"
    for proc, (_, stderr) in zip(procs, ended):
        assert proc.returncode == 0, stderr
    assert "rank 1 raised an exception" in ended[0][1], ended[0][1]
    assert {(run / f"first_step.{rank}.1").read_text() for rank in range(4)} == {"25"}, ended
    raised_at = float((run / "raised_at").read_text())
    latencies = {rank: 1000 * (float((run / f"notice_at.{rank}.0").read_text()) - raised_at) for rank in (0, 2, 3)}
    print("raise -> notice on each surviving rank (ms):", {rank: round(ms) for rank, ms in latencies.items()})
    assert all(ms >= 0 for ms in latencies.values())   # told after the raise, on both hosts

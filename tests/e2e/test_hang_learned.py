"""Hang timeouts learned from the job, and the rank that stopped first named across hosts (issue 37's goal).

Two real ``dlaunch cluster`` hosts on 127.0.0.2 and 127.0.0.3, 4 gloo ranks each (tests/programs/
lockstep_rank.py): every rank all-reduces every 0.2 s and reports its step with ``beat(step=N)``; at step 30
every rank spends 3 s in ``heartbeat.phase("checkpoint")``; rank 6 stops at step 50 outside any collective,
the 7 others wait for it in all_reduce.  With ``--hang-learn`` (bound 60 s) the hang is called after rank 6
stopped by the budget learned from the job (5 x the silence it showed), the 3 s save does not trip it, and the
master host names rank 6 from every host's stacks.

How long after the stop a hang is called depends on the machine's load (a 2-core machine at load 15 took
3.5 s where 3.1 s was asserted): these tests assert the order (no hang before the stop) and which budget
called it (the learned one, the message says so); benchmarks/bench_hang_learned.py measures the delay.
"""

import json
import math
import re
import threading
import time

from tests.launching import ROOT, free_port, kill_run, run_dlaunch, start_dlaunch, write_rank_table

PROGRAM = str(ROOT / "tests" / "programs" / "lockstep_rank.py")
HOSTS = ("127.0.0.2", "127.0.0.3")
# a hang called by the step budget learned from the job (hangs.budget_name), not by --hang-timeout or a phase's
CALLED_BY_LEARNED = re.compile(r" hung: no output, heartbeat or checkpoint for [\d.]+ s \(learned hang timeout "
                               r"([\d.]+) s\)")


def timed_lines(proc, lines):
    """Every stderr line of ``proc`` with the time it arrived."""
    def read():
        for line in proc.stderr:
            lines.append((time.time(), line.rstrip("\n")))
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_learned_timeout_calls_the_hang_of_rank_6_quickly_and_the_master_names_it(tmp_path):
    table = write_rank_table(tmp_path / "rt.json", HOSTS, devices_per_host=4)
    run_id, port, stopped = "learned", free_port(HOSTS[0]), tmp_path / "stopped"
    procs, lines, readers = [], [[], []], []
    try:
        for index in (0, 1):
            cwd = tmp_path / f"host{index}"
            cwd.mkdir()
            procs.append(start_dlaunch(
                "cluster", PROGRAM, "--rank-table", table, "--rank-start", index * 4, "--run-id", run_id,
                "--profile", "structure", "--master-port", port, "--hang-learn", "--hang-timeout", "60",
                "--grace-period", "2", "--host-timeout", "5", "--", "--save-at", "30", "--save-seconds", "3",
                "--stop-rank", "6", "--stop-at", "50", "--stopped-file", stopped, cwd=cwd))
            readers.append(timed_lines(procs[-1], lines[index]))
        codes = [proc.wait(timeout=150) for proc in procs]
        for reader in readers:
            reader.join(timeout=10)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        kill_run(run_id)
    said = ["\n".join(line for _, line in host) for host in lines]
    assert codes[1] == 124 or codes[0] == 124, said
    called = min(at for host in lines for at, line in host if " hung: " in line)
    run_dirs = [tmp_path / f"host{index}" / "dlaunch_runs" / run_id for index in (0, 1)]
    learned = [json.loads((run_dir / f"hang_timeouts.{host}.json").read_text())
               for run_dir, host in zip(run_dirs, HOSTS)]
    silence = max(clock["silence_s"] for clock in learned)
    took = called - float(stopped.read_text())
    print(f"learned silence {silence:.3f} s, budget {max(c['step_budget_s'] for c in learned):.2f} s; "
          f"hang called {took:.2f} s after rank 6 stopped")
    assert took > 0, said   # no hang before rank 6 stopped: the 3 s save (longer than the step budget) was no hang
    first = next(line for host in lines for at, line in host if at == called)
    budget = CALLED_BY_LEARNED.search(first)   # called by what the job taught, not by the 60 s bound
    assert budget and any(math.isclose(float(budget[1]), clock["step_budget_s"], rel_tol=0.01) for clock in learned
                          ), (first, learned)
    assert all(clock["phases_s"].get("checkpoint", 0) >= 2.5 for clock in learned), learned   # the save: seen
    # py-spy may catch one rank of a loaded machine with no Python frame (blame.read_state: no stack): 6 others
    assert re.search(r"rank 6 on host 127\.0\.0\.3 stopped first: its stack is in no collective while the [67] "
                     r"others wait in one", said[0]), said[0]
    summary = (run_dirs[0] / "job_stacks" / "stopped_first.txt").read_text().splitlines()
    assert summary[0].startswith("rank 6 on host 127.0.0.3 stopped first")
    rows = {int(line.split()[1]): line for line in summary[1:]}
    assert sorted(rows) == list(range(8)) and "in no collective" in rows[6]
    others = [rows[rank] for rank in rows if rank != 6]
    # a loaded machine may catch one waiting rank outside its all_reduce (still in its 0.2 s sleep, or leaving
    # the call): rank 6 is named all the same, as the oldest sign of life of those outside a collective
    assert sum("in a collective" not in row for row in others) <= 1, summary
    assert all(int(rows[rank].split("last step ")[1].split(",")[0]) >= 45 for rank in rows), summary
    status = run_dlaunch("status", run_dirs[0], cwd=tmp_path, timeout=30).stdout   # the master's run directory
    assert "rank 6 on host 127.0.0.3 stopped first: its stack is in no collective" in status, status
    steps = status.split("last steps: ")[1].split(" (")[0].split(", ")
    assert len(steps) == 8 and steps[6].endswith("*"), status
    assert sum(s.endswith(("*", "?")) for rank, s in enumerate(steps) if rank != 6) <= 1, status
    made = run_dlaunch("report", run_dirs[0], "-o", tmp_path / "report.html", cwd=tmp_path, timeout=60)
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "report.html").read_text()
    hang = page[page.index('<section class="hang"'):]
    hang = hang[:hang.index("</section>")]
    assert "<strong>rank 6 on host 127.0.0.3 stopped first:" in hang and hang.count("<tr") == 9, hang
    assert re.findall(r'<tr class="flagged"><td class="num">(\d+)</td>', hang) == ["6"], hang
    for run_dir, host in zip(run_dirs, HOSTS):   # the job's verdict, on every host, names rank 6
        cause = json.loads((run_dir / f"summary.{host}.json").read_text())["job"]["root_cause"]
        assert (cause["rank"], cause["host"], cause["stopped_first"]) == (6, "127.0.0.3", True), cause


def test_a_restart_applies_what_the_first_attempt_learned_from_its_first_step(tmp_path):
    """Attempt 0 learns the budget (steps every 0.2 s) and fails at step 25; attempt 1 has it from its first
    step: its ranks stopping at step 3 (rank 1 first) are called hung by that budget (about a second), not by the
    bound's 60 s, with no warm-up.  No rank of attempt 1 reports a step after its third, so attempt 1 cannot learn
    a budget of its own (5 warm-up steps, then 10): a learned budget there is attempt 0's."""
    stopped = tmp_path / "stopped"
    proc = start_dlaunch("run", ROOT / "tests/programs/paced_steps.py", "--ranks", "2", "--output-dir",
                         tmp_path / "runs", "--run-id", "carried", "--hang-learn", "--hang-timeout", "60",
                         "--max-restarts", "1", "--", "--fail-at", "25", "--stop-at", "3", "--stop-all",
                         "--stopped-file", stopped, cwd=tmp_path)
    lines = []
    reader = timed_lines(proc, lines)
    try:
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_run("carried")
    reader.join(timeout=10)
    said = "\n".join(line for _, line in lines)
    assert code == 124, said
    called, first = min((at, line) for at, line in lines if " hung: " in line)
    learned = json.loads((tmp_path / "runs" / "carried" / "hang_timeouts.json").read_text())
    assert learned["counted_steps"] >= 10 and learned["step_budget_s"] < learned["bound_s"], learned
    # attempt 1 stopped at its step 3, never able to learn a budget of its own: a hang called by the learned
    # timeout, after the stop, is attempt 0's budget applied from the first step (else: --hang-timeout, 60 s)
    budget = CALLED_BY_LEARNED.search(first)
    assert budget and math.isclose(float(budget[1]), learned["step_budget_s"], rel_tol=0.01), (first, learned)
    assert called > float(stopped.read_text()), said


def test_survivors_saving_in_silence_longer_than_the_learned_timeout_are_not_called_hung(tmp_path):
    """--hang-learn with --survivor-window: 4 ranks learn a ~1 s budget, rank 3 exits 3 at step 30, and the
    other three, told by the notice, save for 3 s without a sign of life (no output, heartbeat or checkpoint
    file). The window is theirs: no hang is called, every survivor's save completes, and the exit code stays
    rank 3's."""
    out = tmp_path / "runs"
    result = run_dlaunch("run", PROGRAM, "--ranks", "4", "--output-dir", out, "--hang-learn", "--hang-timeout", "60",
                         "--survivor-window", "10", "--", "--fail-rank", "3", "--fail-at", "30",
                         "--save-on-notice", "3", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "hang timeout learned: " in result.stderr and " hung" not in result.stderr, result.stderr
    learned = json.loads(next((out / "latest").glob("hang_timeouts*.json")).read_text())
    assert learned["step_budget_s"] < 3, learned   # the saves outlast it
    logs = [(out / "latest" / f"rank_{rank:03d}" / "output.log").read_text() for rank in range(3)]
    assert all("saved on notice" in log for log in logs), result.stderr

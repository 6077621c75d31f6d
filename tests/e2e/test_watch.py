"""dlaunch status and dlaunch logs on real runs, looked at from a second process as a user would."""

import json
import os
import re
import signal
import threading
import time

import pytest

from tests.launching import ROOT, kill_run, latest_run, pid_alive, run_dlaunch, start_dlaunch, wait_until

PROGRAM = str(ROOT / "tests" / "programs" / "watch_rank.py")


@pytest.fixture
def out(tmp_path):
    return tmp_path / "runs"


def status_json(*args, cwd):
    result = run_dlaunch("status", "--json", *args, cwd=cwd, timeout=30)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _wait_running(run_dir, count, cwd):
    def ready():
        if not (run_dir / "plan.json").exists():
            return None
        snap = status_json(run_dir, cwd=cwd)
        return snap if [r["state"] for r in snap["ranks"]] == ["running"] * count else None

    snap = wait_until(ready, timeout=30, interval=0.1)
    assert snap, "ranks did not all start"
    return snap


def test_status_of_a_live_8_rank_job_then_of_the_finished_one(tmp_path, out):
    # once the test says go, rank 7 exits 0, then rank 5 fails with 7: the others are stopped with SIGTERM
    go = tmp_path / "go"
    proc = start_dlaunch("run", PROGRAM, "--ranks", "8", "--output-dir", out, "--run-id", "live", "--",
                         "--sleep", "60", "--go-file", go, "--exit", "7:0:0", "--exit", "5:7:1", cwd=tmp_path)
    run_dir = out / "live"
    watch = None
    try:
        snap = _wait_running(run_dir, 8, tmp_path)
        assert [r["rank"] for r in snap["ranks"]] == list(range(8))
        assert not snap["finished"] and snap["status"] == "running"
        pids = {r["rank"]: r["pid"] for r in snap["ranks"]}
        assert all(pid_alive(pid) for pid in pids.values())
        for row in snap["ranks"]:
            assert (row["host"], row["device_id"], row["attempt"]) == (snap["hosts"][0], row["rank"], 0)
            assert row["last_line"] == f"rank {row['rank']} started (attempt 0)"
            assert row["rss_bytes"] > 1_000_000 and row["cpu_percent"] is not None
            assert 0 <= row["idle_seconds"] < 30
        watch = start_dlaunch("status", "--output-dir", out, "--watch", "--interval", "0.3", cwd=tmp_path)

        # the table people read, found from the output directory's latest link
        text = run_dlaunch("status", "--output-dir", out, cwd=tmp_path)
        assert text.returncode == 0, text.stderr
        rows = [line for line in text.stdout.splitlines() if re.match(r"\s*\d+\s", line)]
        assert len(rows) == 8 and all(" running " in row for row in rows), text.stdout
        assert "run live (" in text.stdout and ": running;" in text.stdout

        # without the pids file the launcher publishes, ranks are found by their environment
        pids_file = run_dir / "pids.json"
        assert wait_until(pids_file.exists, timeout=10), "the launcher publishes pids.json"
        published = json.loads(pids_file.read_text())
        assert {int(rank): entry["pid"] for rank, entry in published["ranks"].items()} == pids
        pids_file.rename(run_dir / "pids.hidden")
        try:
            again = status_json(run_dir, cwd=tmp_path)
        finally:
            (run_dir / "pids.hidden").rename(pids_file)
        assert {r["rank"]: r["pid"] for r in again["ranks"] if r["state"] == "running"} == pids

        # silence past --hang-after is called hung while the rank still runs
        time.sleep(max(0.0, 0.8 - min(r["idle_seconds"] for r in again["ranks"])))
        hung = status_json(run_dir, "--hang-after", "0.5", "--rank", "0-3", cwd=tmp_path)
        assert [r["rank"] for r in hung["ranks"]] == [0, 1, 2, 3]
        assert all(r["state"] == "hung" and r["alive"] and "no output" in r["hung_reason"] for r in hung["ranks"])

        # Ctrl-C ends --watch and --follow quietly, with exit 0
        for argv in (["status", run_dir, "--watch", "--interval", "0.2"], ["logs", run_dir, "--follow"]):
            viewer = start_dlaunch(*argv, cwd=tmp_path)
            assert viewer.stdout.readline()  # it is up and has shown something
            viewer.send_signal(signal.SIGINT)
            assert viewer.wait(timeout=10) == 0, (argv, viewer.stderr.read())
            viewer.stdout.close()
            viewer.stderr.close()

        go.touch()
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 7, stderr
        final = status_json(out, cwd=tmp_path)
        states = {r["rank"]: r["state"] for r in final["ranks"]}
        assert states == {0: "died of SIGTERM", 1: "died of SIGTERM", 2: "died of SIGTERM",
                          3: "died of SIGTERM", 4: "died of SIGTERM", 5: "exited 7", 6: "died of SIGTERM",
                          7: "exited 0"}
        assert (final["status"], final["finished"], final["exit_code"]) == ("failed", True, 7)
        assert [c["rank"] for c in final["root_causes"]] == [5]
        assert {r["rank"]: r["pid"] for r in final["ranks"]} == pids
        assert final["ranks"][5]["last_line"] == "rank 5 exits with code 7"

        # --watch refreshed and stopped by itself when the run finished, with its verdict and exit code;
        # into a pipe, as plain snapshots
        shown, werr = watch.communicate(timeout=20)
        assert watch.returncode == 7, (werr, shown[-1500:])
        assert shown.count("run live (") >= 2 and "\x1b[" not in shown
        assert "exited 7" in shown and "run live finished: failed, exit code 7" in shown.split("run live (")[-1]
    finally:
        if watch and watch.poll() is None:
            watch.kill()
        proc.kill()
        kill_run("live")


def test_status_reports_a_hang_the_launcher_caught(tmp_path, out):
    result = run_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", out, "--hang-timeout", "1",
                         "--grace-period", "1", "--", "--sleep", "30", cwd=tmp_path)
    assert result.returncode == 124, result.stderr
    snap = status_json("--output-dir", out, cwd=tmp_path)
    hung = [r for r in snap["ranks"] if r["state"] == "hung"]
    assert len(hung) >= 1 and "hung" in hung[0]["hung_reason"]
    text = run_dlaunch("status", latest_run(out), cwd=tmp_path).stdout
    assert "root cause (host" in text and "hung" in text


def test_status_errors(tmp_path):
    result = run_dlaunch("status", tmp_path / "nowhere", cwd=tmp_path)
    assert result.returncode == 2 and "no run directory" in result.stderr
    result = run_dlaunch("logs", cwd=tmp_path)
    assert result.returncode == 2 and "no run directory at dlaunch_runs" in result.stderr
    (tmp_path / "empty").mkdir()
    result = run_dlaunch("status", tmp_path / "empty", cwd=tmp_path)
    assert result.returncode == 2 and "not a dlaunch run directory" in result.stderr


def _reader(stream, lines):
    for line in stream:
        lines.append((time.time(), line.rstrip("\n")))


def test_logs_follow_sees_new_lines_within_a_second(tmp_path, out):
    proc = start_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", out, "--run-id", "ticks", "--",
                         "--tick", "0.2", "--count", "15", cwd=tmp_path)
    follow = None
    try:
        assert wait_until(lambda: (out / "ticks" / "rank_001" / "output.log").exists(), timeout=30)
        follow = start_dlaunch("logs", out / "ticks", "--follow", cwd=tmp_path)
        lines: list = []
        reader = threading.Thread(target=_reader, args=(follow.stdout, lines), daemon=True)
        reader.start()
        assert proc.wait(timeout=60) == 0
        assert follow.wait(timeout=10) == 0, follow.stderr.read()   # stops by itself: the run is over
        reader.join(10)
        assert not reader.is_alive()   # its output ended with it
    finally:
        proc.kill()
        if follow and follow.poll() is None:
            follow.kill()
        kill_run("ticks")
    first_seen = lines[0][0]
    delays = []
    for rank in (0, 1):
        mine = [(seen, text) for seen, text in lines if text.startswith(f"[rank{rank}]: ")]
        body = [text[len(f"[rank{rank}]: "):] for _, text in mine]
        assert body[0] == f"rank {rank} started (attempt 0)" and body[-1] == f"rank {rank} done"
        assert len(body) == 17 and all(re.fullmatch(rf"tick {i} at \d+\.\d+", body[i + 1]) for i in range(15))
        for seen, text in mine:
            match = re.search(r"tick \d+ at (\d+\.\d+)$", text)
            if match and float(match.group(1)) > first_seen:  # written after the follow was already running
                delays.append(seen - float(match.group(1)))
    assert len(delays) >= 10, lines
    assert max(delays) < 1.0, sorted(delays)
    print(f"logs --follow delays over {len(delays)} lines: median {sorted(delays)[len(delays) // 2]:.3f} s, "
          f"max {max(delays):.3f} s")


def test_logs_prints_chosen_ranks_and_attempts(tmp_path, out):
    result = run_dlaunch("run", PROGRAM, "--ranks", "3", "--profile", "a2", "--output-dir", out,
                         "--max-restarts", "1", "--", "--tick", "0.01", "--count", "5", "--exit", "1:3:0.5",
                         "--fail-on-attempt", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = latest_run(out)

    def logs(*args):
        done = run_dlaunch("logs", run_dir, *args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines(), done.stderr

    lines, _ = logs()  # every rank's newest attempt, rank by rank
    assert [line.split(":")[0] for line in lines] == ["[rank0]"] * 7 + ["[rank1]"] * 7 + ["[rank2]"] * 7
    assert lines[0] == "[rank0]: rank 0 started (attempt 1)"
    lines, _ = logs("--rank", "1", "--attempt", "0")
    assert lines[0] == "[rank1]: rank 1 started (attempt 0)" and lines[-1] == "[rank1]: rank 1 exits with code 3"
    lines, notes = logs("--rank", "1,2", "--attempt", "all", "-n", "1")
    assert lines == ["[rank1]: rank 1 exits with code 3", "[rank1]: rank 1 done",
                     "[rank2]: rank 2 done", "[rank2]: rank 2 done"]
    assert "rank 1: attempt 0 (output.log)" in notes and "rank 1: attempt 1 (output.1.log)" in notes
    lines, _ = logs("--rank", "2", "-n", "0", "--follow")  # a finished run: nothing new, returns at once
    assert lines == []
    bad = run_dlaunch("logs", run_dir, "--rank", "9", cwd=tmp_path)
    assert bad.returncode == 2 and "has no rank 9 (its ranks: 0-2)" in bad.stderr
    bad = run_dlaunch("logs", run_dir, "--attempt", "5", cwd=tmp_path)
    assert bad.returncode == 2 and "no log of attempt 5" in bad.stderr


def test_status_json_of_a_restarted_run_names_the_attempt(tmp_path, out):
    assert run_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", out, "--max-restarts", "1", "--",
                       "--exit", "0:5:0.2", "--fail-on-attempt", "0", cwd=tmp_path).returncode == 0
    snap = status_json("--output-dir", out, cwd=tmp_path)
    assert [(r["state"], r["attempt"]) for r in snap["ranks"]] == [("exited 0", 1), ("exited 0", 1)]
    assert snap["ranks"][0]["log"].endswith(os.path.join("rank_000", "output.1.log"))


def test_tail_offsets_and_partial_lines(tmp_path):
    import io

    from launcher.base.lines import tail_offset as _tail_offset
    from launcher.observe.logs import _Tail
    from launcher.rundir.read import RankRef

    log = tmp_path / "output.log"
    log.write_bytes(b"a\nbb\nccc\n")
    assert [_tail_offset(str(log), n) for n in (0, 1, 2, 3, 9)] == [9, 5, 2, 0, 0]
    log.write_bytes(b"a\nbb\nccc")                      # the last line not ended yet
    assert [_tail_offset(str(log), n) for n in (1, 2)] == [5, 2]
    assert _tail_offset(str(tmp_path / "absent"), 3) == 0

    tail = _Tail(RankRef(rank=4, local_rank=0, host="h", device_id=4, rank_dir=str(tmp_path), suffix=""), 0)
    out = io.BytesIO()
    assert tail.read(out) and out.getvalue() == b"[rank4]: a\n[rank4]: bb\n"
    with open(log, "ab") as fh:
        fh.write(b"c\nd")
    assert tail.read(out) and out.getvalue().endswith(b"[rank4]: bb\n[rank4]: cccc\n")
    assert not tail.read(out)
    assert tail.read(out, final=True) and out.getvalue().endswith(b"[rank4]: d\n")


def test_a_run_whose_launcher_was_killed_is_over_without_a_summary(tmp_path, out):
    proc = start_dlaunch("run", PROGRAM, "--ranks", "2", "--output-dir", out, "--run-id", "lost", "--",
                         "--sleep", "60", cwd=tmp_path)
    try:
        snap = _wait_running(out / "lost", 2, tmp_path)
        proc.kill()   # SIGKILL: no summary; its watchdog kills the ranks
        proc.wait(10)
        assert wait_until(lambda: not any(pid_alive(r["pid"]) for r in snap["ranks"]), timeout=10)
        after = status_json(out / "lost", cwd=tmp_path)
        assert (after["finished"], after["status"]) == (True, "ended without a summary (launcher gone)")
        assert [(r["state"], r["pid"]) for r in after["ranks"]] == [("ended", r["pid"]) for r in snap["ranks"]]
        follow = run_dlaunch("logs", out / "lost", "--follow", cwd=tmp_path, timeout=30)   # it ends: nothing to follow
        assert follow.returncode == 1   # over, but not a success
        assert "ended without a summary (launcher gone)" in follow.stderr
        assert follow.stdout.splitlines() == ["[rank0]: rank 0 started (attempt 0)",
                                              "[rank1]: rank 1 started (attempt 0)"]
    finally:
        proc.kill()
        kill_run("lost")

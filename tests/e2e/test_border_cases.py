"""Issue 45's list, each shape of hostile outside text through a real ``dlaunch run`` (launcher/base/border.py):
a rank's step lines and heartbeat, a user's step pattern, MindCluster's reset file, a notice a rank replaced by
a directory, nvidia-smi's memory reading between attempts, a health checker's answer. Each ends with the
exit code its meaning documents, no traceback and a summary; where dlaunch must not be blocked (a FIFO) it
obeys SIGTERM (143).

The ranks are tests/programs/border_rank.py, which makes the hostile text itself (the plan dlaunch writes
stays ordinary); a rank that must be seen by a periodic look (the step reader looks twice a second, the reset
file is read once a second) keeps running a moment after it wrote."""

import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time

import psutil
import pytest

from tests.launching import ROOT, kill_run, run_dlaunch, start_dlaunch, wait_until

PROGRAM = ROOT / "tests" / "programs" / "border_rank.py"
MIB = 1 << 20


def run_id(tmp_path) -> str:
    """Each test's own run id: a cleanup's kill_run must never reach a job another worker runs meanwhile."""
    return "border-" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:10]


def run_dir(tmp_path):
    return tmp_path / "runs" / run_id(tmp_path)


def argv(tmp_path, *flags, ranks=1, args=()):
    return ["run", "--ranks", ranks, "--output-dir", tmp_path / "runs", "--run-id", run_id(tmp_path), *flags,
            PROGRAM, "--", *args]


def launch(tmp_path, *flags, ranks=1, args=(), env=None, timeout=60):
    return run_dlaunch(*argv(tmp_path, *flags, ranks=ranks, args=args), cwd=tmp_path, env=env, timeout=timeout)


def ended(tmp_path, result, code):
    """The exit code asked for, no traceback, and a summary that says the same code."""
    assert result.returncode == code, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert json.loads((run_dir(tmp_path) / "summary.json").read_text())["exit_code"] == code


def attempts(tmp_path, rank=0) -> list[str]:
    return (run_dir(tmp_path) / f"rank_{rank:03d}" / "runs.txt").read_text().split()


class Started:
    """A dlaunch started with Popen (to signal it while it runs); killed with every process of its run after."""

    def __init__(self, tmp_path, *args, **popen):
        self.tmp_path = tmp_path
        self.proc = start_dlaunch(*args, cwd=tmp_path, **popen)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        kill_run(run_id(self.tmp_path))

    def wait_for(self, path, timeout=30):
        """Until ``path`` exists (dlaunch still running); fails at once if dlaunch ended first."""
        assert wait_until(lambda: path.exists() or self.proc.poll() is not None, timeout=timeout), f"no {path}"
        assert self.proc.poll() is None, self.proc.communicate()[1][-3000:]

    def terminated(self, timeout=30):
        """SIGTERM, then dlaunch's exit: 143, no traceback, the summary written (a dlaunch blocked in a read
        fails here instead of hanging the suite)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, stderr = self.proc.communicate(timeout=timeout)
        except Exception:
            raise AssertionError(f"dlaunch did not obey SIGTERM within {timeout} s (blocked in a read?)") from None
        assert self.proc.returncode == 143, (self.proc.returncode, stderr[-3000:])
        assert "Traceback" not in stderr, stderr[-3000:]
        assert json.loads((run_dir(self.tmp_path) / "summary.json").read_text())["exit_code"] == 143
        return stderr


# ---------------------------------------------------------------- 1: a step number of 5,000 digits


def test_a_megatron_line_with_a_5000_digit_iteration_is_no_traceback_and_status_and_report_read_the_run(tmp_path):
    result = launch(tmp_path, args=["--megatron-digits", "5000", "--sleep", "1.5"])
    ended(tmp_path, result, 0)
    status = run_dlaunch("status", run_dir(tmp_path), cwd=tmp_path, timeout=30)
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr[-3000:]
    assert "exited 0" in status.stdout, status.stdout
    report = run_dlaunch("report", run_dir(tmp_path), "-o", tmp_path / "r.html", cwd=tmp_path, timeout=60)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr[-3000:]
    assert (tmp_path / "r.html").read_text().lstrip().lower().startswith("<!doctype html")


# ---------------------------------------------------------------- 2: a user's step pattern


def test_a_step_pattern_whose_step_group_matches_a_superscript_two_goes_on(tmp_path):
    result = launch(tmp_path, "--step-pattern", r"(?P<step>\S+) took (?P<ms>\d+) ms",
                    args=["--line", "\u00b2 took 5 ms", "--sleep", "1.5"])
    ended(tmp_path, result, 0)


def test_a_catastrophic_step_pattern_is_refused_at_the_start_in_one_line(tmp_path):
    """``(x+x+)+y`` on a line of 40 x takes 2^40 steps: refused before anything starts (exit 2), never tried."""
    result = launch(tmp_path, "--step-pattern", "(?P<ms>(x+x+)+y)", args=["--x-line", "40", "--sleep", "1.5"],
                    timeout=30)
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "(x+x+)+y" in line]
    assert len(said) == 1 and "repeats a repetition or an alternative without bound" in said[0], result.stderr
    assert not run_dir(tmp_path).exists()   # nothing started


# ---------------------------------------------------------------- 3: the heartbeat file


def test_a_heartbeat_of_3000_open_brackets_goes_on(tmp_path):
    result = launch(tmp_path, args=["--heartbeat-brackets", "3000", "--sleep", "1.5"])
    ended(tmp_path, result, 0)


def test_a_heartbeat_made_a_fifo_does_not_block_dlaunch(tmp_path):
    with Started(tmp_path, *argv(tmp_path, args=["--heartbeat-fifo", "--sleep", "60"])) as started:
        started.wait_for(run_dir(tmp_path) / "rank_000" / "fifo.made")
        started.terminated()


# ---------------------------------------------------------------- 4: MindCluster's reset file


def write_reset(path, text: str) -> None:
    """As the kubelet swaps a ConfigMap's files: a new file renamed over the old."""
    path.with_suffix(".tmp").write_text(text)
    path.with_suffix(".tmp").rename(path)


ORDINARY_RESET = json.dumps({"RankList": [], "UpdateTime": 1, "RetryTime": 0, "FaultFlushing": False,
                             "GracefulExit": 0, "RestartFaultProcess": False})
HOSTILE_RESETS = {
    "3000 brackets": "[" * 3000,
    "GracefulExit Infinity": '{"GracefulExit": Infinity}',
    "RankId superscript two": json.dumps({"RankList": [{"RankId": "\u00b2", "Status": "fault"}]}, ensure_ascii=False),
    "RankId of 5000 digits": json.dumps({"RankList": [{"RankId": "9" * 5000, "Status": "fault"}]}),
    "RankList a number": '{"RankList": 5}',
}


def reset_job(tmp_path):
    """A one-rank job following ``reset.json`` until ``stop`` exists; returns (reset, stop, argv)."""
    reset, stop = tmp_path / "reset.json", tmp_path / "stop"
    write_reset(reset, ORDINARY_RESET)
    return reset, stop, argv(tmp_path, "--reset-config", reset, args=["--until", stop])


@pytest.mark.parametrize("shape", list(HOSTILE_RESETS))
def test_a_hostile_reset_file_is_no_order_and_the_job_goes_on(tmp_path, shape):
    reset, stop, args = reset_job(tmp_path)
    with Started(tmp_path, *args) as started:
        started.wait_for(run_dir(tmp_path) / "rank_000" / "runs.txt")
        write_reset(reset, HOSTILE_RESETS[shape])
        time.sleep(1.5)   # the reset file is read once a second
        assert started.proc.poll() is None, started.proc.communicate()[1][-3000:]
        stop.touch()
        _, stderr = started.proc.communicate(timeout=60)
    assert started.proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    assert json.loads((run_dir(tmp_path) / "summary.json").read_text())["exit_code"] == 0


def test_a_reset_file_made_a_fifo_does_not_block_dlaunch(tmp_path):
    reset, stop, args = reset_job(tmp_path)
    with Started(tmp_path, *args) as started:
        started.wait_for(run_dir(tmp_path) / "rank_000" / "runs.txt")
        fifo = tmp_path / "reset.fifo"
        os.mkfifo(fifo)
        fifo.rename(reset)
        time.sleep(1.5)   # read once a second: dlaunch has looked at the FIFO
        started.terminated()


def _no_more_address_space(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_reset_file_linked_to_dev_zero_is_not_read_and_memory_stays_bounded(tmp_path):
    """/dev/zero never ends: a reader that follows the link without a bound eats memory until it dies. dlaunch
    runs under a 1 GiB address-space limit (so a regression fails here, not on the machine) and its RSS is
    watched while it runs."""
    reset, stop, args = reset_job(tmp_path)
    with Started(tmp_path, *args, preexec_fn=_no_more_address_space(1 << 30)) as started:
        started.wait_for(run_dir(tmp_path) / "rank_000" / "runs.txt")
        link = tmp_path / "reset.link"
        link.symlink_to("/dev/zero")
        link.rename(reset)
        watched = psutil.Process(started.proc.pid)
        largest = 0
        for _ in range(30):   # 1.5 s: the reset file is read once a second
            try:
                largest = max(largest, watched.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        stop.touch()
        _, stderr = started.proc.communicate(timeout=60)
    assert started.proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    assert largest < 500 * MIB, f"dlaunch's RSS reached {largest // MIB} MiB"
    assert json.loads((run_dir(tmp_path) / "summary.json").read_text())["exit_code"] == 0


# ---------------------------------------------------------------- 5: a directory where a notice belongs


def test_a_notice_saved_directory_does_not_stop_the_restart(tmp_path):
    """Rank 1 makes notice.saved a directory and fails (exit 3) in each attempt, rank 0 surviving: the
    restart starts the second attempt (the directory left as it is, said in one line), and the job ends with
    the failed rank's code."""
    result = launch(tmp_path, "--survivor-window", "1", "--max-restarts", "1", ranks=2,
                    args=["--notice-saved-dir", "--sleep", "0.5", "--fail", "3", "--fail-rank", "1",
                          "--until", tmp_path / "never"])
    ended(tmp_path, result, 3)
    assert attempts(tmp_path, 1) == ["0", "1"]
    assert "notice.saved is a directory: left as it is" in result.stderr, result.stderr[-3000:]


# ---------------------------------------------------------------- 6: nvidia-smi's memory reading


def test_a_5000_digit_nvidia_smi_memory_reading_between_attempts_is_no_traceback(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "nvidia-smi.calls"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                   f'case "$*" in *--query-gpu=index,memory.used*) echo "0, {"9" * 5000}";; *) exit 1;; esac\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    result = launch(tmp_path, "--max-restarts", "1", args=["--fail", "3", "--fail-on-attempt", "0"],
                    env={"PATH": f"{bin_dir}:/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "0"})
    ended(tmp_path, result, 0)   # the last attempt's code
    assert attempts(tmp_path) == ["0", "1"]
    assert "--query-gpu=index,memory.used" in calls.read_text()   # the release wait asked it


# ---------------------------------------------------------------- 7: a health checker's answer


def checker(tmp_path, text: str) -> str:
    """A --health-check command printing ``text``."""
    path = tmp_path / "checker.py"
    path.write_text(f"import sys\nsys.stdout.write({text!r})\n")
    return f"{sys.executable} {path}"


@pytest.mark.parametrize("answer", ["[" * 5000 + "\n", '{"fail_count": -5}\n'], ids=["5000 brackets", "negative"])
def test_a_health_checker_answer_that_is_no_count_makes_the_host_unfit(tmp_path, answer):
    result = launch(tmp_path, "--health-check", checker(tmp_path, answer))
    ended(tmp_path, result, 92)
    assert "gave no usable answer" in result.stderr, result.stderr[-3000:]
    assert not (run_dir(tmp_path) / "rank_000" / "runs.txt").exists()   # no rank started


@pytest.fixture
def dribbling_service():
    """A health service on a Unix socket that sends one byte every half second, for ever (until the test
    ends); its path is short (a Unix socket's path has at most 107 bytes)."""
    folder = tempfile.mkdtemp(prefix="b45-")
    path = os.path.join(folder, "health.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    server.settimeout(0.2)
    done = threading.Event()

    def dribble(conn):
        with conn:
            while not done.wait(0.5):
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    def serve():
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=dribble, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join(timeout=5)
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_health_service_that_never_finishes_its_answer_makes_the_host_unfit_within_the_bound(tmp_path,
                                                                                                dribbling_service):
    """The gate's checker has 10 s in all (GateSettings.timeout, not per byte): exit 92, not a hang. A
    dlaunch that waited per read would still be waiting when the 45 s here run out."""
    result = launch(tmp_path, "--health-check", f"unix:{dribbling_service}", timeout=45)
    ended(tmp_path, result, 92)
    assert "did not finish its answer within" in result.stderr, result.stderr[-3000:]

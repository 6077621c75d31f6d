"""Hosts of one job started per host (by hand, as Slurm or an operator would) talk over the master address.

Real ``dlaunch cluster`` processes on 127.0.0.x, each host in its own working directory with its own run
directory (nothing shared): a rank failing on one host stops every host; a host SIGKILLed, SIGSTOPped or
never arriving is noticed within --host-timeout / --join-timeout; a late host is fine; a process without
the job's secret can neither join nor stop it. Short timeouts keep the file fast.
"""

import json
import os
import signal
import subprocess
import time

import pytest

from launcher.contract import ExitCode
from tests.launching import RANK_PROGRAM, kill_run, processes_of_run, run_dlaunch, start_dlaunch, wait_until

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


def write_table(path, count):
    servers = [{"server_id": host, "host_nic_ip": "reserve",
                "device": [{"device_id": "0", "device_ip": f"192.0.2.{index + 10}", "rank_id": str(index)}]}
               for index, host in enumerate(HOSTS[:count])]
    path.write_text(json.dumps({"version": "1.0", "server_count": str(count), "server_list": servers,
                                "status": "completed"}))
    return path


class Job:
    """A job of ``count`` one-rank hosts, each started in its own directory under ``tmp_path``."""

    def __init__(self, tmp_path, count, port, run_id, host_timeout=1.0, join_timeout=8.0):
        self.tmp_path, self.port, self.run_id = tmp_path, port, run_id
        self.table = write_table(tmp_path / "rt.json", count)
        self.timeouts = ("--host-timeout", str(host_timeout), "--join-timeout", str(join_timeout))
        self.procs: dict[int, subprocess.Popen] = {}

    def cwd(self, index):
        path = self.tmp_path / f"host{index}"
        path.mkdir(exist_ok=True)
        return path

    def start(self, index, *script_args, env=None, extra=()):
        self.procs[index] = start_dlaunch(
            "cluster", RANK_PROGRAM, "--rank-table", self.table, "--rank-start", index, "--run-id", self.run_id,
            "--master-port", self.port, "--profile", "structure", "--grace-period", "2", *self.timeouts, *extra, "--",
            *script_args, cwd=self.cwd(index), env=env)
        return self.procs[index]

    def wait(self, index, timeout=30):
        stdout, stderr = self.procs[index].communicate(timeout=timeout)
        return self.procs[index].returncode, stderr

    def summary(self, index):
        run_dir = self.cwd(index) / "dlaunch_runs" / self.run_id
        return json.loads((run_dir / f"summary.{HOSTS[index]}.json").read_text())

    def started(self, index):
        """This host's ranks are running (its dlaunch has joined or is joining the job)."""
        return (self.cwd(index) / "dlaunch_runs" / self.run_id / f"pids.{HOSTS[index]}.json").exists()

    def cleanup(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        kill_run(self.run_id)


@pytest.fixture
def jobs():
    made = []
    yield lambda *a, **k: made.append(Job(*a, **k)) or made[-1]
    for job in made:
        job.cleanup()


def test_a_failing_rank_stops_every_host_and_every_host_tells_the_same_verdict(tmp_path, jobs):
    job = jobs(tmp_path, 3, 29711, "failfast")
    for index in range(3):
        job.start(index, "--fail-rank", "2", "--after", "1", "--sleep", "60")
    codes = {index: job.wait(index) for index in range(3)}
    assert codes[2][0] == 3, codes[2][1]
    for index in (0, 1):
        code, stderr = codes[index]
        assert code == ExitCode.STOPPED_BY_PEER, stderr
        assert "rank 2 on host 127.0.0.4 exited with code 3" in stderr
    verdicts = [job.summary(index)["job"] for index in range(3)]
    assert verdicts[0] == verdicts[1] == verdicts[2]
    assert verdicts[0]["status"] == "failed" and verdicts[0]["exit_code"] == 3
    assert verdicts[0]["root_cause"]["rank"] == 2 and verdicts[0]["root_cause"]["host"] == "127.0.0.4"
    assert verdicts[0]["host_exit_codes"] == {"127.0.0.2": ExitCode.STOPPED_BY_PEER,
                                                       "127.0.0.3": ExitCode.STOPPED_BY_PEER, "127.0.0.4": 3}
    assert job.summary(0)["stopped_by"]["cause"]["rank"] == 2
    for index in (0, 2):   # no shared run directory: each host's own status tells the job's verdict
        status = run_dlaunch("status", job.cwd(index) / "dlaunch_runs" / "failfast", cwd=tmp_path).stdout
        assert "failed, exit code 3" in status and "root cause: rank 2 (host 127.0.0.4" in status, status
    assert processes_of_run("failfast") == []


def test_a_job_that_succeeds_everywhere_exits_0_everywhere_even_with_a_late_host(tmp_path, jobs):
    job = jobs(tmp_path, 2, 29714, "late")
    job.start(0, "--sleep", "4")   # as a rank blocked in its first collective until the late host comes
    time.sleep(2)
    job.start(1, "--sleep", "0.5")
    for index in (0, 1):
        code, stderr = job.wait(index)
        assert code == 0, stderr
        assert job.summary(index)["job"]["status"] == "succeeded"
        assert job.summary(index)["job"]["host_exit_codes"] == {"127.0.0.2": 0, "127.0.0.3": 0}


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP])
def test_a_host_whose_dlaunch_is_killed_or_stopped_is_lost_and_the_others_stop(tmp_path, jobs, stop):
    job = jobs(tmp_path, 2, 29717 if stop == signal.SIGKILL else 29720, f"lost{stop}")
    for index in (0, 1):
        job.start(index, "--sleep", "60")
    assert wait_until(lambda: job.started(0) and job.started(1), timeout=20)
    time.sleep(0.5)   # both have joined
    lost_at = time.monotonic()
    os.kill(job.procs[1].pid, stop)
    code, stderr = job.wait(0)
    took = time.monotonic() - lost_at
    assert code == ExitCode.HOST_LOST, stderr
    assert "host 127.0.0.3 was lost" in stderr
    assert ("sent nothing for" if stop == signal.SIGSTOP else "closed its connection") in stderr
    assert took < 30   # not the ranks' 60 s sleep: --host-timeout (1 s) and the grace period (2 s) on a loaded machine
    assert job.summary(0)["job"]["lost_hosts"].keys() == {"127.0.0.3"}


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP])
def test_the_master_host_dying_or_stopping_stops_the_other_hosts(tmp_path, jobs, stop):
    """SIGKILL closes the master's connections at once; SIGSTOP (a machine that stops answering) is noticed by
    its silence after --host-timeout (1 s here)."""
    job = jobs(tmp_path, 2, 29723 if stop == signal.SIGKILL else 29753, f"master{stop}")
    for index in (0, 1):
        job.start(index, "--sleep", "60")
    assert wait_until(lambda: job.started(0) and job.started(1), timeout=20)
    time.sleep(0.5)
    lost_at = time.monotonic()
    os.kill(job.procs[0].pid, stop)
    code, stderr = job.wait(1)
    took = time.monotonic() - lost_at
    assert code == ExitCode.HOST_LOST, stderr
    if stop == signal.SIGKILL:
        assert "host 127.0.0.2 was lost: the master host 127.0.0.2 closed the job's connection" in stderr
    else:
        assert "host 127.0.0.2 was lost" in stderr and "sent nothing for" in stderr
    assert took < 30   # not the ranks' 60 s sleep: --host-timeout (1 s) and the grace period (2 s) on a loaded machine


def test_a_host_that_never_arrives_stops_the_job_at_the_join_timeout(tmp_path, jobs):
    job = jobs(tmp_path, 2, 29726, "never", join_timeout=2.0)
    job.start(0, "--sleep", "60")
    code, stderr = job.wait(0)
    assert code == ExitCode.HOST_LOST, stderr
    assert "host 127.0.0.3 was lost: never joined the job within 2 s" in stderr


def test_a_process_without_the_jobs_secret_can_neither_join_nor_stop_it(tmp_path, jobs):
    job = jobs(tmp_path, 2, 29729, "secret", join_timeout=4.0)
    master = job.start(0, "--sleep", "60", env={"DLAUNCH_JOB_SECRET": "the-jobs-secret"})
    job.start(1, "--fail-rank", "1", "--sleep", "60", env={"DLAUNCH_JOB_SECRET": "a-guess"})
    code, stderr = job.wait(1)
    assert code in (3, ExitCode.HOST_LOST), stderr
    assert "refused this host: wrong job secret" in stderr
    assert master.poll() is None   # the stranger's failure did not stop the job
    assert "the-jobs-secret" not in " ".join(map(str, master.args))   # never on a command line ps shows
    code, stderr = job.wait(0)
    assert code == ExitCode.HOST_LOST and "never joined" in stderr, stderr
    assert "job coordinator: refused 127.0.0.1:" in stderr and "wrong job secret" in stderr


RESTARTING_RANK = """
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  echo saved > "$DLAUNCH_CKPT_DIR/ckpt-1_1.pt"
  if [ "$RANK" = 0 ]; then echo saved > "$DLAUNCH_CKPT_DIR/ckpt-1_2.pt"; exec sleep 60; fi
  sleep 1; exit 3
fi
echo "$TORCHELASTIC_RESTART_COUNT $DLAUNCH_RESUME_STEP $DLAUNCH_RESUME_FROM" > "$DLAUNCH_RANK_DIR/resumed"
"""


def test_a_restart_is_one_for_the_whole_job_and_resumes_from_the_step_every_host_has(tmp_path, jobs):
    """Rank 1 (host 127.0.0.3) fails in attempt 0 after saving step 1_1; rank 0 saved 1_1 and 1_2. Every host
    restarts together; both resume from 1_1, the newest step on every rank of every host (no shared run
    directory: each host knows only its own ranks' checkpoints)."""
    job = jobs(tmp_path, 2, 29732, "restarts")
    for index in (0, 1):
        job.procs[index] = start_dlaunch(
            "cluster", "--no-python", "/bin/sh", "--rank-table", job.table, "--rank-start", index, "--run-id",
            "restarts", "--master-port", job.port, "--profile", "structure", "--grace-period", "2", *job.timeouts,
            "--max-restarts", "2", "--", "-c", RESTARTING_RANK, cwd=job.cwd(index))
    for index in (0, 1):
        code, stderr = job.wait(index)
        assert code == 0, stderr
        assert "rank 1 on host 127.0.0.3 exited with code 3; restarting the job on every host (restart 1 of 2)" \
            in stderr
        rank_dir = job.cwd(index) / "dlaunch_runs" / "restarts" / f"rank_{index:03d}"
        count, step, path = (rank_dir / "resumed").read_text().split()
        assert (count, step, path) == ("1", "1_1", str(rank_dir / "ckpt" / "ckpt-1_1.pt"))
        host_summary = job.summary(index)
        assert [a["exit_code"] for a in host_summary["attempts"]] == [ExitCode.STOPPED_BY_PEER if index == 0 else 3, 0]
        assert host_summary["job"]["status"] == "succeeded"


def test_a_hang_on_one_host_stops_the_job_with_every_hosts_stacks_on_the_master_host(tmp_path, jobs):
    """Rank 1 (host 127.0.0.3) goes silent; rank 0 keeps beating its heartbeat. Host 127.0.0.3 judges the
    hang, and the master host's run directory (not shared) ends up with both ranks' stacks."""
    job = jobs(tmp_path, 2, 29735, "hang")
    job.timeouts += ("--hang-timeout", "3")
    for index in (0, 1):
        job.start(index, "--heartbeat-for", "60", "--heartbeat-ranks", "0", "--sleep", "60")
    (code0, stderr0), (code1, stderr1) = job.wait(0, timeout=60), job.wait(1, timeout=60)
    assert code1 == 124, stderr1
    assert code0 == ExitCode.STOPPED_BY_PEER, stderr0
    assert "rank 1 on host 127.0.0.3 hung and was stopped" in stderr0
    stacks = job.cwd(0) / "dlaunch_runs" / "hang" / "job_stacks"
    assert f"every rank's stack, from every host: {stacks}" in stderr0
    for rank, host in ((0, "127.0.0.2"), (1, "127.0.0.3")):
        text = (stacks / f"rank_{rank:03d}.txt").read_text()
        assert text.startswith(f"# rank {rank} on host {host}") and "rank.py" in text, text
    assert job.summary(0)["job"]["root_cause"]["hung"] is True


def test_a_signal_to_one_hosts_dlaunch_stops_the_whole_job(tmp_path, jobs):
    job = jobs(tmp_path, 2, 29738, "preempted")
    for index in (0, 1):
        job.start(index, "--sleep", "60")
    assert wait_until(lambda: job.started(0) and job.started(1), timeout=20)
    time.sleep(0.5)
    job.procs[1].send_signal(signal.SIGTERM)   # one pod preempted
    (code0, stderr0), (code1, stderr1) = job.wait(0), job.wait(1)
    assert code1 == 128 + signal.SIGTERM, stderr1
    assert code0 == ExitCode.STOPPED_BY_PEER, stderr0
    assert "dlaunch on host 127.0.0.3 was interrupted by SIGTERM" in stderr0, stderr0
    assert job.summary(0)["job"]["status"] == job.summary(1)["job"]["status"] == "interrupted"


def test_the_job_port_taken_on_the_master_host_is_refused_before_anything_starts(tmp_path, jobs):
    import socket

    job = jobs(tmp_path, 2, 29741, "portbusy")
    with socket.socket() as busy:
        busy.bind(("127.0.0.2", 29742))
        busy.listen()
        code, stderr = job.start(0, "--sleep", "60") and job.wait(0)
    assert code == 2 and "cannot listen on 127.0.0.2:29742 for the job's coordinator (--job-port)" in stderr, stderr
    assert not (job.cwd(0) / "dlaunch_runs" / "portbusy").exists()


REWRITING_RANK = """
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  if [ "$RANK" = 1 ]; then
    while [ ! -e "$TABLE.go" ]; do sleep 0.05; done   # both hosts have read the first table
    sed -i s/192.0.2.10/192.0.2.99/ "$TABLE"; exit 3
  fi
  exec sleep 60
fi
echo "$RANK_TABLE_FILE" > "$DLAUNCH_RANK_DIR/table_file"
"""


def test_a_rank_table_rewritten_between_attempts_is_used_by_the_next_one_on_every_host(tmp_path, jobs):
    job = jobs(tmp_path, 2, 29744, "rewrite")
    for index in (0, 1):
        job.procs[index] = start_dlaunch(
            "cluster", "--no-python", "/bin/sh", "--rank-table", job.table, "--rank-start", index, "--run-id",
            "rewrite", "--master-port", job.port, "--profile", "structure", *job.timeouts, "--max-restarts", "1",
            "--", "-c", REWRITING_RANK, cwd=job.cwd(index), env={"TABLE": str(job.table)})
    assert wait_until(lambda: job.started(0) and job.started(1), timeout=30)
    (tmp_path / "rt.json.go").touch()
    for index in (0, 1):
        code, stderr = job.wait(index)
        assert code == 0, stderr
        assert f"the rank table {job.table} was rewritten: restart 1 uses it" in stderr
        run_dir = job.cwd(index) / "dlaunch_runs" / "rewrite"
        used = (run_dir / f"rank_{index:03d}" / "table_file").read_text().strip()
        assert used == str(run_dir / f"rank_table.{HOSTS[index]}.1.json")
        assert "192.0.2.99" in open(used).read()
        assert "192.0.2.99" not in (run_dir / f"rank_table.{HOSTS[index]}.json").read_text()


def test_a_device_address_rewritten_while_the_hosts_start_is_still_one_job(tmp_path, jobs):
    """An operator re-addressing a device's NIC between two hosts' starts (ascend-operator rewrites hccl.json)
    changes no server and no rank: the hosts still share the job's secret and form one job."""
    job = jobs(tmp_path, 2, 29756, "readdress")
    job.start(0, "--sleep", "2")
    assert wait_until(lambda: job.started(0), timeout=20)
    job.table.write_text(job.table.read_text().replace("192.0.2.10", "192.0.2.77"))
    job.start(1, "--sleep", "2")
    for index in (0, 1):
        code, stderr = job.wait(index)
        assert code == 0, stderr
        assert "wrong job secret" not in stderr


LATE_RESTART_RANK = """
echo > "$SHARED/rank$RANK.attempt$TORCHELASTIC_RESTART_COUNT"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 0 ]; then exit 3; fi   # fails at start-up
if [ "$RANK" = 0 ]; then   # its first collective: it waits for rank 1, of whatever attempt
  while [ -z "$(ls "$SHARED" | grep rank1)" ]; do sleep 0.05; done
fi
echo "$TORCHELASTIC_RESTART_COUNT" > "$DLAUNCH_RANK_DIR/attempt"
"""


def test_a_host_that_joins_after_the_job_restarted_takes_part_in_the_restart(tmp_path, jobs):
    """Rank 0 fails at start-up and the job restarts before host 127.0.0.3 arrives. Once, that host ran its
    ranks for attempt 0, its reports were discarded, and every dlaunch waited for a verdict forever; now it is
    told the job's attempt on joining, and its ranks restart into it."""
    job = jobs(tmp_path, 2, 29759, "laterestart")
    shared = tmp_path / "shared"
    shared.mkdir()

    def start(index):
        job.procs[index] = start_dlaunch(
            "cluster", "--no-python", "/bin/sh", "--rank-table", job.table, "--rank-start", index, "--run-id",
            "laterestart", "--master-port", job.port, "--profile", "structure", *job.timeouts, "--max-restarts",
            "1", "--", "-c", LATE_RESTART_RANK, cwd=job.cwd(index), env={"SHARED": str(shared)})

    start(0)
    assert wait_until(lambda: (shared / "rank0.attempt1").exists(), timeout=30)   # the job is in attempt 1
    start(1)
    stderrs = {}
    for index in (0, 1):
        code, stderrs[index] = job.wait(index)
        assert code == 0, stderrs[index]
        assert job.summary(index)["job"]["status"] == "succeeded"
        rank_dir = job.cwd(index) / "dlaunch_runs" / "laterestart" / f"rank_{index:03d}"
        assert (rank_dir / "attempt").read_text().strip() == "1"
    stderr1 = stderrs[1]
    assert "this host joined the job at its attempt 1 (it restarted before this host joined): this host's " \
           "ranks restart to take part in it" in stderr1, stderr1
    assert [a["attempt"] for a in job.summary(1)["attempts"]] == [0, 1]


def test_the_job_port_equal_to_the_master_port_is_refused_in_one_line(tmp_path, jobs):
    job = jobs(tmp_path, 2, 29762, "sameport")
    code, stderr = job.start(0, "--sleep", "1", extra=("--job-port", "29762")) and job.wait(0)
    assert code == 2 and stderr.strip().splitlines() == [
        "dlaunch: error: --job-port 29762 is the master port, where rank 0's store listens: give another (by "
        "default the job port is MASTER_PORT + 1)"], stderr
    assert not (job.cwd(0) / "dlaunch_runs" / "sameport").exists()

"""The slurm template under a real Slurm: slurmctld, two slurmd and munged on loopback, all in a temp dir.

Debian's slurm-wlm runs two slurmd on one host (``slurmd -N n1`` / ``-N n2``, one port each), so a
2-node job is real: sbatch reads the #SBATCH lines, srun starts one dlaunch cluster per node, and
each node's share of the rank table comes from its SLURM_NODEID. Without cgroups: proctrack/linuxproc,
task/none, no accounting. Everything lives in the test's temp dir (config, state, spool, logs,
munge key and socket); the daemons are this test's children and are stopped at the end. The
Debian packages are installed only when missing (scripts/test.sh installs them too).
"""

import json
import os
import re
import signal
import socket
import subprocess
import time

import psutil
import pytest

from tests.e2e.test_scripts import two_server_table
from tests.launching import RANK_PROGRAM, ROOT, kill_run, processes_of_run, records, run_dlaunch, wait_until

NEEDED = {"slurm-wlm": ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/bin/sinfo",
                        "/usr/bin/scancel"),
          "munge": ("/usr/sbin/munged",)}
NODES = ("n1", "n2")
JOB_NAME = "dlaunch 'job' \"#1\" $(touch pwned)"


def ensure_packages():
    missing = [pkg for pkg, files in NEEDED.items() if not all(os.path.exists(f) for f in files)]
    if not missing:
        return
    if os.geteuid() != 0:
        pytest.skip(f"Debian packages {missing} are missing and installing them needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        result = subprocess.run(install, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot install {missing}: {result.stderr.strip()[-300:]}")


def free_ports(count):
    socks = [socket.socket() for _ in range(count)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


class Cluster:
    def __init__(self, root):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "PYTHONPATH": str(ROOT)}
        self.daemons = []

    def start(self):
        root, host = self.root, socket.gethostname().split(".")[0]
        munge = root / "munge"
        munge.mkdir(mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.socket = munge / "socket"
        for name in ("state", "log", *(f"spool/{n}" for n in NODES)):
            (root / name).mkdir(parents=True)
        (root / "plugstack.conf").write_text("")
        ctld_port, *node_ports = free_ports(1 + len(NODES))
        nodes = "\n".join(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs=2 State=UNKNOWN"
                          for n, p in zip(NODES, node_ports))
        self.conf.write_text(f"""\
ClusterName=dlaunchtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.%n.log
PlugStackConfig={root}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=3
{nodes}
PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")
        self._daemon(["/usr/sbin/munged", "-F", "-f", f"--socket={self.socket}", f"--key-file={key}",
                      f"--pid-file={munge}/pid", f"--seed-file={munge}/seed", f"--log-file={munge}/log"], "munged")
        assert wait_until(self.socket.exists, timeout=10), self.logs()
        self._daemon(["/usr/sbin/slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
        for node in NODES:
            self._daemon(["/usr/sbin/slurmd", "-D", "-f", str(self.conf), "-N", node], f"slurmd.{node}")
        assert wait_until(self.idle, timeout=40, interval=0.3), self.logs()

    def _daemon(self, argv, name):
        with open(self.root / "log" / f"{name}.out", "w") as out:
            self.daemons.append(subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                                 start_new_session=True))

    def idle(self):
        result = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env, capture_output=True, text=True)
        states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
        return all(states.get(node) == "idle" for node in NODES)

    def logs(self):
        parts = []
        for path in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "log"]:
            if path.exists():
                parts.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)

    def sbatch(self, script, cwd, timeout=60):
        """Submit and wait for the job's end: (its exit code, as ``sbatch --wait`` gives it, and its id).

        Polled here every 0.1 s: ``sbatch --wait`` polls with a back-off that grows to seconds."""
        job = self.submit(script, cwd)
        deadline = time.monotonic() + timeout
        while (state := self.state(job)) in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            assert time.monotonic() < deadline, f"job {job} still {state} after {timeout} s" + self.logs()
            time.sleep(0.1)
        shown = subprocess.run(["scontrol", "show", "job", job], env=self.env, capture_output=True, text=True).stdout
        code, killed_by = map(int, re.search(r"\bExitCode=(\d+):(\d+)", shown).groups())
        return subprocess.CompletedProcess([], code or (128 + killed_by if killed_by else 0)), job

    def submit(self, script, cwd):
        """sbatch without waiting: the job id."""
        result = subprocess.run(["sbatch", "--parsable", f"--chdir={cwd}", f"--output={cwd}/slurm-%j.out",
                                 str(script)], env=self.env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr + self.logs()
        return result.stdout.strip().split(";")[0]

    def state(self, job):
        result = subprocess.run(["scontrol", "show", "job", job], env=self.env, capture_output=True, text=True)
        found = re.search(r"JobState=(\S+)", result.stdout)
        return found.group(1) if found else None

    def stop(self):
        subprocess.run(["scancel", "--full", "--user", "root"], env=self.env, capture_output=True)
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 10
        for proc in self.daemons:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for proc in psutil.process_iter():  # job step daemons this cluster started, if any outlived it
            try:
                if proc.name() == "slurmstepd" and proc.environ().get("SLURM_CONF") == str(self.conf):
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    ensure_packages()
    if os.geteuid() != 0:
        pytest.skip("the test cluster runs slurmd as root")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def render_job(tmp_path, *script_args, options=()):
    table = two_server_table(tmp_path / "rt4.json")
    result = run_dlaunch("script", "slurm", RANK_PROGRAM, "--rank-table", table, "--profile", "a2",
                         "--output-dir", tmp_path / "runs", "--job-name", JOB_NAME, "--time", "5", "--grace-period",
                         "2", *options, "-o", tmp_path / "job.sbatch", "--", *script_args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path / "job.sbatch"


def test_two_node_job_each_node_runs_its_share_from_slurm_nodeid(slurm, tmp_path):
    job = render_job(tmp_path, "--dump-env", "--allreduce")
    result, job_id = slurm.sbatch(job, tmp_path)
    run_dir = tmp_path / "runs" / f"slurm-{job_id}"
    try:
        assert result.returncode == 0, (tmp_path / f"slurm-{job_id}.out").read_text() + slurm.logs()
        for rank in range(4):
            rank_dir = run_dir / f"rank_{rank:03d}"
            env = json.loads((rank_dir / "env.json").read_text())
            node = rank // 2
            assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                        "GROUP_WORLD_SIZE", "RANK_SIZE", "DEVICE_ID", "MASTER_ADDR",
                                        "MASTER_PORT", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_JOB_NAME")} == {
                "RANK": str(rank), "LOCAL_RANK": str(rank % 2), "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
                "GROUP_RANK": str(node), "GROUP_WORLD_SIZE": "2", "RANK_SIZE": "4", "DEVICE_ID": str(rank % 2),
                "MASTER_ADDR": "127.0.0.2", "MASTER_PORT": "29500", "SLURM_NODEID": str(node),
                "SLURMD_NODENAME": NODES[node], "SLURM_JOB_NAME": JOB_NAME}
            assert env["RANK_TABLE_FILE"] == str(run_dir / f"rank_table.127.0.0.{node + 2}.json")
            assert records(rank_dir, "allreduce.jsonl") == [{"sum": 10.0, "world": 4}]  # one job across nodes
        for server in ("127.0.0.2", "127.0.0.3"):
            assert json.loads((run_dir / f"summary.{server}.json").read_text())["status"] == "succeeded"
        assert not list(tmp_path.rglob("pwned"))
    finally:
        kill_run(f"slurm-{job_id}")


def test_a_failing_rank_on_one_node_ends_the_whole_job(slurm, tmp_path):
    job = render_job(tmp_path, "--fail-rank", "3", "--code", "3", "--after", "1", "--sleep", "60")
    started = time.monotonic()
    result, job_id = slurm.sbatch(job, tmp_path)
    try:
        assert result.returncode != 0  # srun's: the highest of the nodes' codes (143: n1 was terminated)
        assert time.monotonic() - started < 40
        output = (tmp_path / f"slurm-{job_id}.out").read_text()
        assert "rank 3 (host 127.0.0.3, device 1) exited with code 3" in output, output
        host = json.loads((tmp_path / "runs" / f"slurm-{job_id}" / "summary.127.0.0.3.json").read_text())
        assert host["status"] == "failed" and host["exit_code"] == 3
        assert wait_until(lambda: not processes_of_run(f"slurm-{job_id}"), timeout=15)
    finally:
        kill_run(f"slurm-{job_id}")


# The two nodes' dlaunch form one job over the master address (execute/job, docs/multi-host.md): the node
# whose rank did not fail is stopped by the job, sooner than by srun, and says why (exit 75).
def test_a_failing_rank_on_one_node_stops_the_other_with_the_jobs_verdict(slurm, tmp_path):
    job = render_job(tmp_path, "--fail-rank", "3", "--code", "3", "--after", "1", "--sleep", "60")
    started = time.monotonic()
    result, job_id = slurm.sbatch(job, tmp_path)
    try:
        assert time.monotonic() - started < 40
        output = (tmp_path / f"slurm-{job_id}.out").read_text()
        assert "rank 3 on host 127.0.0.3 exited with code 3" in output, output
        run_dir = tmp_path / "runs" / f"slurm-{job_id}"
        summaries = {host: json.loads((run_dir / f"summary.{host}.json").read_text())
                     for host in ("127.0.0.2", "127.0.0.3")}
        assert summaries["127.0.0.3"]["exit_code"] == 3
        assert summaries["127.0.0.2"]["exit_code"] == 75, output
        assert summaries["127.0.0.2"]["job"] == summaries["127.0.0.3"]["job"]
        assert summaries["127.0.0.2"]["job"]["root_cause"]["rank"] == 3
        assert wait_until(lambda: not processes_of_run(f"slurm-{job_id}"), timeout=15)
    finally:
        kill_run(f"slurm-{job_id}")


# A job Slurm requeues (preemption, a failed node; here scontrol requeue) starts its batch script again with
# the same job id and SLURM_RESTART_COUNT=1: its ranks resume from the newest step all four ranks saved in the
# first attempt's run directory, which stays as it was; the second attempt has a directory of its own.
def test_a_requeued_job_resumes_from_the_first_attempts_newest_complete_step(slurm, tmp_path):
    job = render_job(tmp_path, "--dump-env", "--save-steps", "3", "--fresh-sleep", "120",
                     options=("--requeue", "--signal", "USR1@60"))
    assert "\n#SBATCH --signal=B:USR1@60\n#SBATCH --requeue\n" in job.read_text()
    job_id = slurm.submit(job, tmp_path)
    first, second = tmp_path / "runs" / f"slurm-{job_id}", tmp_path / "runs" / f"slurm-{job_id}.requeue1"
    try:
        saved = [first / f"rank_{rank:03d}" / "ckpt" / "ckpt-0_3.pt" for rank in range(4)]
        assert wait_until(lambda: all(path.exists() for path in saved), timeout=60), slurm.logs()
        first_env = json.loads((first / "rank_000" / "env.json").read_text())
        assert "DLAUNCH_RESUME_STEP" not in first_env and "SLURM_RESTART_COUNT" not in first_env
        requeue = subprocess.run(["scontrol", "requeue", job_id], env=slurm.env, capture_output=True, text=True)
        assert requeue.returncode == 0, requeue.stderr
        # a requeued job waits two minutes (BeginTime) before it may start again: not in a test
        assert wait_until(lambda: slurm.state(job_id) == "PENDING", timeout=30, interval=0.2), slurm.state(job_id)
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=slurm.env, check=True)
        ended = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
        assert wait_until(lambda: slurm.state(job_id) in ended, timeout=60, interval=0.3), slurm.logs()
        output = (tmp_path / f"slurm-{job_id}.out").read_text()
        assert slurm.state(job_id) == "COMPLETED", output
        for rank in range(4):
            env = json.loads((second / f"rank_{rank:03d}" / "env.json").read_text())
            assert (env["SLURM_JOB_ID"], env["SLURM_RESTART_COUNT"], env["DLAUNCH_RESUME_STEP"]) == (
                job_id, "1", "0_3")
            assert env["DLAUNCH_RESUME_FROM"] == str(first / f"rank_{rank:03d}" / "ckpt" / "ckpt-0_3.pt")
            assert records(second / f"rank_{rank:03d}", "saved.jsonl") == []   # steps 1-3 were not redone
            assert records(first / f"rank_{rank:03d}", "saved.jsonl") == [{"step": s} for s in (1, 2, 3)]
            assert (first / f"rank_{rank:03d}" / "output.log").exists()   # the first attempt's files stay
        assert json.loads((first / "rank_000" / "env.json").read_text()) == first_env
        assert json.loads((first / "plan.127.0.0.2.json").read_text())["run_id"] == f"slurm-{job_id}"
        assert f"Slurm requeued this job (SLURM_RESTART_COUNT=1): resuming from ckpt-0_3 of {first}" in output
        for server in ("127.0.0.2", "127.0.0.3"):
            assert json.loads((second / f"summary.{server}.json").read_text())["status"] == "succeeded"
    finally:
        subprocess.run(["scancel", job_id], env=slurm.env, capture_output=True)
        kill_run(f"slurm-{job_id}")
        kill_run(f"slurm-{job_id}.requeue1")


# The same rule without a Slurm cluster, for dlaunch run with --run-id (its --dry-run shows the ranks' env):
# the newest earlier attempt with a complete step wins; with none anywhere, a fresh start that says so.
def test_under_slurm_restart_count_run_resumes_the_newest_earlier_attempt_or_starts_afresh(tmp_path):
    runs = tmp_path / "runs"
    for run_id, steps in (("job", {0: [1, 2], 1: [1, 2]}), ("job.requeue1", {0: [3, 4], 1: [3]})):
        for rank, saved in steps.items():
            ckpt = runs / run_id / f"rank_{rank:03d}" / "ckpt"
            ckpt.mkdir(parents=True)
            for step in saved:
                (ckpt / f"ckpt-0_{step}.pt").write_text("x")
    slurm_env = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "2"}

    def dry(run_id, env):
        return run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", runs, "--run-id", run_id,
                           "--dry-run", cwd=tmp_path, env=env)

    resumed = dry("job", slurm_env)
    assert resumed.returncode == 0, resumed.stderr
    assert (f"Slurm requeued this job (SLURM_RESTART_COUNT=2): resuming from ckpt-0_3 of {runs / 'job.requeue1'}"
            in resumed.stderr)
    assert "DLAUNCH_RESUME_STEP=0_3" in resumed.stdout and str(runs / "job.requeue2" / "rank_001") in resumed.stdout
    fresh = dry("other", slurm_env)
    assert fresh.returncode == 0, fresh.stderr
    assert (f"Slurm requeued this job (SLURM_RESTART_COUNT=2): starting afresh, no checkpoint step that every "
            f"rank completed in {runs / 'other.requeue1'} or the attempts before it") in fresh.stderr
    assert "DLAUNCH_RESUME" not in fresh.stdout and str(runs / "other.requeue2") in fresh.stdout
    unknown = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", runs, "--dry-run", cwd=tmp_path,
                          env=slurm_env)
    assert "without --run-id its first attempt's run directory is unknown: starting afresh" in unknown.stderr
    for first_attempt in ({"SLURM_JOB_ID": "77"}, {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "0"}):
        plain = dry("job", first_attempt)
        assert "DLAUNCH_RESUME" not in plain.stdout and "requeue" not in plain.stdout + plain.stderr

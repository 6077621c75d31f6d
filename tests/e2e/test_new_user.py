"""What a new user trips over: the common slips get messages that name the mistake and the fix, help says
the real defaults, the plan shows everything, and hosts of one job land in one run directory."""

import json
import os
import signal
import subprocess
import time

from tests.conftest import RANK_TABLES, dlaunch
from tests.e2e.test_scripts import SCRIPTS, run_script, seeds_env
from tests.launching import (
    RANK_PROGRAM,
    free_port,
    kill_run,
    latest_run,
    run_dlaunch,
    side_by_side,
    start_dlaunch,
    wait_until,
    write_rank_table,
)

TABLE_16 = RANK_TABLES / "rank_table_16pcs.json"


# ---------------------------------------------------------------- 1: a multi-host table given to run


def test_run_refuses_a_table_that_spans_hosts_and_says_what_to_run(tmp_path):
    result = dlaunch("run", "train.py", "--rank-table", TABLE_16, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for fragment in ("spans 2 hosts", "dlaunch run starts one host", "dlaunch cluster train.py --rank-table",
                     "--rank-start 8", "--ssh"):
        assert fragment in result.stderr, result.stderr
    assert "--rank-start" not in dlaunch("run", "--help").stdout
    assert "--rank-start" in dlaunch("cluster", "--help").stdout


# ---------------------------------------------------------------- 2: common slips


def test_script_arguments_before_the_separator_get_the_fix(tmp_path):
    result = dlaunch("run", "train.py", "--ranks", "4", "--epochs", "3", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: dlaunch run SCRIPT")
    assert "unrecognized arguments: --epochs 3" in result.stderr
    assert "go after --, e.g. dlaunch run train.py --ranks 4 -- --epochs 3" in result.stderr


def test_a_misspelt_option_gets_did_you_mean(tmp_path):
    result = dlaunch("run", "train.py", "--ranks", "4", "--grace-perod", "3", cwd=tmp_path)
    assert result.returncode == 2 and "did you mean --grace-period?" in result.stderr
    assert result.stderr.startswith("usage: dlaunch run SCRIPT")


def test_resume_that_took_the_script_says_so(tmp_path):
    result = dlaunch("run", "--resume", "examples/train_cifar.py", "--ranks", "8", cwd=tmp_path)
    assert result.returncode == 2
    assert "--resume took examples/train_cifar.py as its run directory" in result.stderr
    assert "usage: dlaunch run" in result.stderr


# ---------------------------------------------------------------- 5: hints and help that are true


def test_profile_hints_name_only_profiles_that_accept_the_table(tmp_path):
    strict = dlaunch("run", RANK_PROGRAM, "--ranks", "3", "--profile", "atlas910", "--dry-run", cwd=tmp_path)
    assert strict.returncode == 2 and "--profile a2 or structure would accept it" in strict.stderr
    relaxed = dlaunch("run", RANK_PROGRAM, "--ranks", "9", "--profile", "a2", "--dry-run", cwd=tmp_path)
    assert relaxed.returncode == 2 and "--profile structure would accept it" in relaxed.stderr
    assert "a2 or" not in relaxed.stderr


def test_cluster_without_a_table_says_ssh_needs_one_too(tmp_path):
    result = dlaunch("cluster", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "--rank-table FILE --ssh" in result.stderr and "--rank-start K" in result.stderr


def test_help_shows_the_real_defaults():
    cluster = dlaunch("cluster", "--help").stdout
    assert "default 29500" in " ".join(cluster.split())
    run = dlaunch("run", "--help").stdout
    assert "default: a free port" in " ".join(run.split())


# ---------------------------------------------------------------- 6: the plan shows everything


def test_dry_run_and_plan_json_show_env_variables_masked(tmp_path):
    env_file = tmp_path / "vars.env"
    env_file.write_text("FROM_FILE=1\nDB_PASSWORD=hunter2\n")
    args = ["run", RANK_PROGRAM, "--ranks", "2", "--env", "EXTRA=yes", "--env-file", env_file,
            "--output-dir", tmp_path / "runs"]
    shown = dlaunch(*args, "--dry-run", cwd=tmp_path)
    assert shown.returncode == 0
    for line in ("EXTRA=yes", "FROM_FILE=1", "DB_PASSWORD='****'"):
        assert line in shown.stdout
    assert "hunter2" not in shown.stdout
    assert run_dlaunch(*args, cwd=tmp_path).returncode == 0
    plan = json.loads((latest_run(tmp_path / "runs") / "plan.json").read_text())
    env = plan["ranks"][0]["env"]
    assert (env["EXTRA"], env["FROM_FILE"], env["DB_PASSWORD"]) == ("yes", "1", "****")


# ---------------------------------------------------------------- 7: config show


def test_config_show_infers_cluster_and_takes_flags():
    shown = dlaunch("config", "show", "--config", "configs/two_hosts_16dev_ssh.yaml")
    assert shown.returncode == 0, shown.stderr
    assert "settings of dlaunch cluster" in shown.stdout
    flagged = dlaunch("config", "show", "--ranks", "4", "--json")
    assert json.loads(flagged.stdout)["ranks"] == {"value": 4, "source": "command line"}


# ---------------------------------------------------------------- 8: hosts sharing a filesystem


def test_run_cluster_sh_hosts_given_one_job_name_share_one_run_directory(tmp_path):
    table = write_rank_table(tmp_path / "rt4.json", ("127.0.0.2", "127.0.0.3"), 2)
    port = free_port("127.0.0.2")   # not the default 29500, which another test's job may hold meanwhile

    def host(start):
        return run_script(SCRIPTS / "run_cluster.sh", "/data", table, "4", str(start), "job42", "--profile", "a2",
                          "--master-port", str(port), cwd=tmp_path, env=seeds_env())

    for result in side_by_side(host, 0, 2).values():
        assert result.returncode == 0, result.stderr
    runs = [p.name for p in (tmp_path / "dlaunch_runs").iterdir() if p.name != "latest"]
    assert runs == ["job42"]
    status = json.loads(dlaunch("status", "--json", tmp_path / "dlaunch_runs" / "job42", cwd=tmp_path).stdout)
    assert (status["status"], len(status["ranks"]), len(status["hosts"]), status["missing_hosts"]) == (
        "succeeded", 4, 2, [])


def test_a_host_waiting_for_peers_says_so_and_status_names_who_never_came(tmp_path):
    """Only the first host of a two-host job starts: its ranks block in gloo's rendezvous."""
    table = write_rank_table(tmp_path / "rt4.json", ("127.0.0.2", "127.0.0.3"), 2)
    out = tmp_path / "runs"
    proc = start_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table, "--rank-start", "0", "--profile", "a2",
                         "--master-port", free_port("127.0.0.2"), "--run-id", "alone", "--output-dir", out,
                         "--waiting-notice", "1", "--grace-period", "1",
                         "--", "--allreduce", cwd=tmp_path)
    try:
        assert wait_until(lambda: (out / "alone" / "pids.127.0.0.2.json").exists(), timeout=30)
        status = json.loads(dlaunch("status", "--json", out / "alone", cwd=tmp_path).stdout)
        assert status["missing_hosts"] == [{"host": "127.0.0.3", "count": 2, "ranks": "2-3"}]
        shown = dlaunch("status", out / "alone", cwd=tmp_path).stdout
        assert "2 of 4 rank(s) on 1 of 2 host(s)" in shown and "never reported: 127.0.0.3 (ranks 2-3)" in shown
        time.sleep(4)   # the notice comes 1 s into the silence (after the ranks' start-up)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        kill_run("alone")
    assert "waiting for their peers: host(s) 127.0.0.3 (ranks 2-3) have not written their plan" in stderr, stderr
    assert proc.returncode == 128 + signal.SIGTERM


# ---------------------------------------------------------------- 9: generated scripts from anywhere


def test_a_generated_script_runs_the_same_from_another_directory(tmp_path):
    made, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    made.mkdir()
    elsewhere.mkdir()
    (made / "train.py").write_text("import os; print('rank', os.environ['RANK'])\n")
    assert run_dlaunch("script", "run.sh", "train.py", "--ranks", "2", "-o", "run.sh", cwd=made).returncode == 0
    assert "made absolute" in (made / "run.sh").read_text()
    result = subprocess.run(["bash", str(made / "run.sh")], cwd=elsewhere, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(RANK_TABLES.parent)})
    assert result.returncode == 0, result.stderr
    assert (elsewhere / "dlaunch_runs").is_dir() and "[rank0]: rank 0" in result.stdout


# ---------------------------------------------------------------- 11: small things


def test_status_in_a_pipe_is_plain_and_whole(tmp_path):
    out = tmp_path / "runs"
    long_line = "y" * 300
    program = tmp_path / "long.py"
    program.write_text(f"print({long_line!r})\n")
    single = run_dlaunch("run", program, "--ranks", "1", "--output-dir", out, cwd=tmp_path)
    assert single.returncode == 0 and "stopped the other" not in single.stderr
    shown = dlaunch("status", "--output-dir", out, cwd=tmp_path).stdout
    assert long_line in shown   # not cut at a width: a pipe has none
    watched = dlaunch("status", "--watch", "--output-dir", out, cwd=tmp_path).stdout
    assert "\x1b[" not in watched and "finished: succeeded, exit code 0" in watched


def test_one_wording_for_a_rank_killed_by_a_signal(tmp_path):
    out = tmp_path / "runs"
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--max-restarts", "1", "--",
                         "--fail-rank", "1", "--kill-self", "SIGABRT", "--fail-on-attempt", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "rank 1 died of SIGABRT (exit 134); restarting all ranks" in result.stderr

"""dlaunch run with real processes: the env contract, gloo, fail-fast, signals, no orphans, run directories."""

import json
import os
import re
import signal
import time

import pytest

from tests.launching import (
    RANK_PROGRAM,
    kill_run,
    latest_run,
    pid_alive,
    processes_of_run,
    records,
    run_dlaunch,
    start_dlaunch,
    summary,
    wait_until,
)


@pytest.fixture
def out(tmp_path):
    return tmp_path / "runs"


def test_env_contract_on_4_ranks(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "4", "--output-dir", out, "--master-port", "29613",
                         "--run-id", "envtest", "--", "--dump-env",
                         cwd=tmp_path, env={"MY_API_TOKEN": "hunter2", "OMP_NUM_THREADS": ""})
    assert result.returncode == 0, result.stderr
    run_dir = out / "envtest"
    table = json.loads((run_dir / "rank_table.json").read_text())
    assert [d["device_id"] for d in table["server_list"][0]["device"]] == ["0", "1", "2", "3"]
    for rank in range(4):
        rank_dir = run_dir / f"rank_00{rank}"
        env = json.loads((rank_dir / "env.json").read_text())
        expected = {
            "DEVICE_ID": str(rank), "RANK_ID": str(rank), "RANK_SIZE": "4",
            "RANK_TABLE_FILE": str(run_dir / "rank_table.json"),
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(rank), "ROLE_NAME": "default",
            "ROLE_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29613",
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "envtest",
            "TORCHELASTIC_ERROR_FILE": str(rank_dir / "error.json"), "CUDA_VISIBLE_DEVICES": None,
            "TORCHELASTIC_USE_AGENT_STORE": "False", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
            "DLAUNCH_RUN_ID": "envtest", "DLAUNCH_RUN_DIR": str(run_dir), "DLAUNCH_RANK_DIR": str(rank_dir),
            "DLAUNCH_CKPT_DIR": str(rank_dir / "ckpt"), "MY_API_TOKEN": "hunter2",
        }
        assert {k: env.get(k) for k in expected} == expected
        assert (rank_dir / "ckpt").is_dir()
        assert records(rank_dir, "pids.jsonl")[0]["cwd"] == str(tmp_path)  # the launch directory, as torchrun
        env_log = (rank_dir / "env.log").read_text()
        assert "MY_API_TOKEN=****" in env_log and "hunter2" not in env_log
        assert f"RANK={rank}\n" in env_log
    assert "hunter2" not in (run_dir / "plan.json").read_text()


def test_env_log_is_its_owners_alone_whatever_the_umask(tmp_path, out):
    """Masking knows only secret-looking names (GITHUB_PAT is not one): env.log is 0600, the log keeps its mode."""
    saved = os.umask(0)   # the launcher inherits it: everything it makes would be readable by everyone
    try:
        result = run_dlaunch("run", "--no-python", "/bin/true", "--ranks", "1", "--output-dir", out, "--run-id",
                             "envmode", cwd=tmp_path, env={"GITHUB_PAT": "ghp_notmasked"})
    finally:
        os.umask(saved)
    assert result.returncode == 0, result.stderr
    rank_dir = out / "envmode" / "rank_000"
    assert "GITHUB_PAT=ghp_notmasked\n" in (rank_dir / "env.log").read_text()
    assert [(rank_dir / name).stat().st_mode & 0o777 for name in ("env.log", "output.log")] == [0o600, 0o644]


def test_omp_threads_defaults_to_1_only_when_unset(tmp_path, out):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    os.environ.pop("OMP_NUM_THREADS", None)
    try:
        assert run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--", "--dump-env",
                           cwd=tmp_path).returncode == 0
        first = json.loads((latest_run(out) / "rank_000" / "env.json").read_text())
        assert first["OMP_NUM_THREADS"] == "1"
        assert run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--", "--dump-env",
                           cwd=tmp_path, env={"OMP_NUM_THREADS": "3"}).returncode == 0
        second = json.loads((latest_run(out) / "rank_000" / "env.json").read_text())
        assert second["OMP_NUM_THREADS"] == "3"
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_gloo_all_reduce_across_8_ranks(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "8", "--output-dir", out, "--", "--allreduce",
                         cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr
    run_dir = latest_run(out)
    sums = [records(run_dir / f"rank_00{r}", "allreduce.jsonl")[0] for r in range(8)]
    assert sums == [{"sum": 36.0, "world": 8}] * 8


def test_fail_fast_exit_code_and_no_process_left(tmp_path, out):
    started = time.monotonic()
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "4", "--output-dir", out, "--", "--fail-rank", "2",
                         "--code", "3", "--after", "0.5", "--sleep", "60", "--child", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert time.monotonic() - started < 30
    run_dir = latest_run(out)
    info = summary(run_dir)
    assert info["status"] == "failed" and info["exit_code"] == 3
    cause = info["root_cause"]
    assert (cause["rank"], cause["device_id"], cause["exit_code"]) == (2, 2, 3)
    assert "rank 2 fails now with code 3" in cause["log_tail"]
    assert "rank 2 (host 127.0.0.1, device 2) exited with code 3" in result.stderr
    assert "rank 2 fails now with code 3" in result.stderr
    assert {r["rank"]: r["signal"] for r in info["ranks"] if r["rank"] != 2} == {0: "SIGTERM", 1: "SIGTERM",
                                                                                 3: "SIGTERM"}
    assert processes_of_run(info["run_id"]) == []


def test_rank_killed_by_signal_gives_128_plus_n(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--", "--fail-rank", "1",
                         "--kill-self", "SIGKILL", "--sleep", "60", cwd=tmp_path)
    assert result.returncode == 128 + signal.SIGKILL
    cause = summary(latest_run(out))["root_cause"]
    assert (cause["rank"], cause["signal"]) == (1, "SIGKILL")
    assert "died of SIGKILL" in result.stderr


def test_rank_exiting_0_early_does_not_stop_the_others(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--", "--exit-early-rank",
                         "0", "--sleep", "1", cwd=tmp_path)
    assert result.returncode == 0
    assert "rank 1 done" in (latest_run(out) / "rank_001" / "output.log").read_text()


def _wait_for_pids(run_dir_parent, ranks, with_children=False):
    def ready():
        run_dir = latest_run(run_dir_parent) if (run_dir_parent / "latest").exists() else None
        if not run_dir:
            return None
        pids = [records(run_dir / f"rank_00{r}", "pids.jsonl") for r in range(ranks)]
        need = 2 if with_children else 1
        return (run_dir, pids) if all(len(p) >= need for p in pids) else None

    found = wait_until(ready, timeout=30)
    assert found, "ranks did not start"
    return found


def test_launcher_sigkill_leaves_no_rank_or_child_alive(tmp_path, out):
    proc = start_dlaunch("run", RANK_PROGRAM, "--ranks", "4", "--output-dir", out, "--", "--sleep", "120",
                         "--child", cwd=tmp_path)
    run_dir, pids = _wait_for_pids(out, 4, with_children=True)
    all_pids = [entry["pid"] for rank in pids for entry in rank]
    assert len(all_pids) == 8 and all(pid_alive(p) for p in all_pids)
    try:
        proc.kill()
        proc.wait(10)
        assert wait_until(lambda: not any(pid_alive(p) for p in all_pids), timeout=10), \
            [p for p in all_pids if pid_alive(p)]
        assert processes_of_run(run_dir.name) == []
    finally:
        kill_run(run_dir.name)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_to_launcher_reaches_every_rank(tmp_path, out, sig):
    name = signal.Signals(sig).name
    proc = start_dlaunch("run", RANK_PROGRAM, "--ranks", "4", "--output-dir", out, "--", "--sleep", "60",
                         "--trap", name, cwd=tmp_path)
    run_dir, _ = _wait_for_pids(out, 4)
    try:
        time.sleep(0.3)  # let every rank install its handler
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 128 + sig, stderr
        for rank in range(4):
            assert records(run_dir / f"rank_00{rank}", "signals.jsonl") == [{"signal": name, "rank": rank}]
        assert summary(run_dir)["interrupted_by"] == name
        assert f"interrupted by {name}" in stderr
    finally:
        kill_run(run_dir.name)


def test_grace_period_lets_ranks_finish_their_save(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "4", "--output-dir", out, "--grace-period", "5", "--",
                         "--fail-rank", "0", "--after", "1.5", "--sleep", "60", "--trap", "SIGTERM",
                         "--trap-delay", "1.0", cwd=tmp_path)
    assert result.returncode == 3
    run_dir = latest_run(out)
    for rank in (1, 2, 3):
        assert records(run_dir / f"rank_00{rank}", "signals.jsonl") == [{"signal": "SIGTERM", "rank": rank}]


def test_grace_period_ends_with_sigkill(tmp_path, out):
    started = time.monotonic()
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--grace-period", "0.5", "--",
                         "--fail-rank", "0", "--after", "1.5", "--sleep", "60", "--trap", "SIGTERM",
                         "--trap-delay", "30",
                         cwd=tmp_path)
    assert result.returncode == 3
    assert time.monotonic() - started < 15
    ranks = {r["rank"]: r for r in summary(latest_run(out))["ranks"]}
    assert ranks[1]["signal"] == "SIGKILL"


def test_second_run_leaves_the_first_untouched(tmp_path, out):
    def snapshot(run_dir):
        return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}

    assert run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, cwd=tmp_path).returncode == 0
    first = latest_run(out)
    before = snapshot(first)
    assert run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, cwd=tmp_path).returncode == 0
    second = latest_run(out)
    assert second != first
    assert snapshot(first) == before
    assert (second / "rank_001" / "ckpt") != (first / "rank_001" / "ckpt")


def test_reusing_a_run_id_is_refused_without_touching_it(tmp_path, out):
    assert run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--run-id", "same",
                       cwd=tmp_path).returncode == 0
    log = (out / "same" / "rank_000" / "output.log").read_text()
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--run-id", "same", cwd=tmp_path)
    assert result.returncode == 2
    assert "already has rank_000" in result.stderr
    assert (out / "same" / "rank_000" / "output.log").read_text() == log


def test_max_restarts_restarts_all_ranks_and_keeps_old_logs(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--max-restarts", "2", "--",
                         "--fail-rank", "1", "--fail-on-attempt", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "restarting all ranks (restart 1 of 2)" in result.stderr
    run_dir = latest_run(out)
    info = summary(run_dir)
    assert [a["exit_code"] for a in info["attempts"]] == [3, 0]
    rank1 = run_dir / "rank_001"
    assert "fails now" in (rank1 / "output.log").read_text()
    assert "rank 1 done" in (rank1 / "output.1.log").read_text()
    assert "TORCHELASTIC_RESTART_COUNT=1" in (rank1 / "env.1.log").read_text()


def test_max_restarts_gives_up_with_the_last_root_cause(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--max-restarts", "1", "--",
                         "--fail-rank", "0", "--code", "7", cwd=tmp_path)
    assert result.returncode == 7
    assert len(summary(latest_run(out))["attempts"]) == 2


def test_dry_run_starts_nothing(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--dry-run", "--", "--x",
                         cwd=tmp_path, env={"DB_PASSWORD": "pw123"})
    assert result.returncode == 0
    assert not out.exists()
    assert "rank 1 (local 1, device 1)" in result.stdout
    assert re.search(r"command: .*rank\.py --x", result.stdout)
    assert "DLAUNCH_CKPT_DIR=" in result.stdout and "pw123" not in result.stdout


def test_options_before_or_after_the_script(tmp_path, out):
    for argv in (["run", RANK_PROGRAM, "--ranks", "2"], ["run", "--ranks", "2", RANK_PROGRAM]):
        result = run_dlaunch(*argv, "--output-dir", out, "--dry-run", cwd=tmp_path)
        assert result.returncode == 0 and "2 rank(s)" in result.stdout


def test_script_arguments_after_double_dash_arrive_untouched(tmp_path, out):
    probe = tmp_path / "argv.py"
    probe.write_text("import json, os, sys\n"
                     "path = os.path.join(os.environ['DLAUNCH_RANK_DIR'], 'argv.json')\n"
                     "open(path, 'w').write(json.dumps(sys.argv[1:]))\n")
    weird = ["--ranks", "9", "a b", "$(touch pwned)", "'\"", "--", ""]
    result = run_dlaunch("run", probe, "--ranks", "1", "--output-dir", out, "--", *weird, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((latest_run(out) / "rank_000" / "argv.json").read_text()) == weird
    assert not (tmp_path / "pwned").exists()


def test_module_and_no_python_modes(tmp_path, out):
    pkg = tmp_path / "mymod.py"
    pkg.write_text("import os; print('module rank', os.environ['RANK'])\n")
    result = run_dlaunch("run", "-m", "mymod", "--ranks", "2", "--console", "all", "--cwd", "launch",
                         "--output-dir", out, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "[rank1]: module rank 1" in result.stdout
    result = run_dlaunch("run", "--no-python", "sh", "--ranks", "2", "--console", "all", "--output-dir", out, "--",
                         "-c", "echo shell rank $RANK", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[rank0]: shell rank 0" in result.stdout and "[rank1]: shell rank 1" in result.stdout


def test_cwd_rank_runs_each_rank_in_its_rank_directory(tmp_path, out):
    assert run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--cwd", "rank", "--output-dir", out,
                       cwd=tmp_path).returncode == 0
    for rank in range(2):
        rank_dir = latest_run(out) / f"rank_00{rank}"
        assert records(rank_dir, "pids.jsonl")[0]["cwd"] == str(rank_dir)
        assert (rank_dir / "output.log").exists() and (rank_dir / "ckpt").is_dir()


def test_console_shows_rank_0_by_default_and_logs_keep_everything(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "4", "--output-dir", out, "--", "--print", "50",
                         cwd=tmp_path)
    assert result.returncode == 0
    assert {line.split("]")[0] for line in result.stdout.splitlines()} == {"[rank0"}
    for rank in range(3):
        log = (latest_run(out) / f"rank_00{rank}" / "output.log").read_text()
        assert f"rank {rank} line 49 " in log


@pytest.mark.parametrize("console,shown", [("all", {0, 1, 2, 3}), ("none", set()), ("1,2", {1, 2})])
def test_console_selection_and_whole_lines(tmp_path, out, console, shown):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "4", "--console", console, "--output-dir", out, "--",
                         "--print", "40", "--torn-lines", cwd=tmp_path)
    assert result.returncode == 0
    pattern = re.compile(r"^\[rank(\d)\]: rank (\d) line \d+ x{50}$|^\[rank(\d)\]: rank \d done$")
    seen = set()
    for line in result.stdout.splitlines():
        match = pattern.match(line)
        assert match, f"split or foreign line: {line!r}"
        if match.group(1):
            assert match.group(1) == match.group(2)
            seen.add(int(match.group(1)))
    assert seen == shown


@pytest.mark.parametrize("argv,fragment", [
    (["--ranks", "3", "--profile", "atlas910"], "R1 device-count"),   # asked for: on CPU too
    (["--devices", "2-5", "--profile", "atlas910"], "R2 device-half"),
    (["--ranks", "0"], "at least 1"),
    (["--console", "zero"], "bad --console"),
    (["--console", "5"], "job has 2 ranks"),
    (["--run-id", "../escape"], "bad --run-id"),
    (["--rank-table", "/nonexistent.json"], "cannot read"),
    (["--ranks", "2", "--master-port", "70000"], "70000 is out of range: give a whole number from 1 to 65535"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, out, argv, fragment):
    if "--ranks" not in argv and "--devices" not in argv and "--rank-table" not in argv:
        argv = [*argv, "--ranks", "2"]
    result = run_dlaunch("run", RANK_PROGRAM, *argv, "--output-dir", out, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr
    lines = result.stderr.strip().splitlines()   # one error line, after the command's usage when argparse found it
    assert len(lines) == 1 or (len(lines) == 2 and lines[0].startswith("usage:")), lines
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_missing_script_and_unknown_option_exit_2(tmp_path, out):
    result = run_dlaunch("run", tmp_path / "nope.py", "--ranks", "2", "--output-dir", out, cwd=tmp_path)
    assert result.returncode == 2 and "script not found" in result.stderr and not out.exists()
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--epochs", "3", cwd=tmp_path)
    assert result.returncode == 2 and "--epochs" in result.stderr


@pytest.mark.parametrize("argv, env", [
    (["--ranks", "3"], {}), (["--ranks", "6"], {}), (["--devices", "2-5"], {}),
    ([], {"CUDA_VISIBLE_DEVICES": "0,1,2"}),
])
def test_cpu_and_gpu_jobs_of_any_size_run_without_hccls_rules(tmp_path, out, argv, env):
    """HCCL's 1/2/4/8 rules are an NPU's; torchrun --nproc-per-node 3 runs, so does dlaunch run --ranks 3."""
    result = run_dlaunch("run", RANK_PROGRAM, *argv, "--output-dir", out, cwd=tmp_path,
                         env=env)
    assert result.returncode == 0, result.stderr
    assert "--profile atlas910) do not apply" in result.stderr and result.stderr.count("do not apply") == 1


def test_npu_jobs_keep_hccls_rules(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "3", "--dry-run", "--output-dir", out, cwd=tmp_path,
                         env={"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"})
    assert result.returncode == 2 and "R1 device-count" in result.stderr


def test_relaxed_profile_allows_3_ranks(tmp_path, out):
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "3", "--profile", "a2", "--output-dir", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_rank_table_file_runs_its_devices(tmp_path, out):
    from tests.conftest import RANK_TABLES

    result = run_dlaunch("run", RANK_PROGRAM, "--rank-table", RANK_TABLES / "rank_table_2pcs.json",
                         "--output-dir", out, "--", "--dump-env", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    env = json.loads((latest_run(out) / "rank_001" / "env.json").read_text())
    assert (env["DEVICE_ID"], env["LOCAL_RANK"], env["CUDA_VISIBLE_DEVICES"]) == ("5", "1", "4,5")

"""The restart cycle's budget (execute/budget.py) with real launches: a crash loop stops with 93 ("do not
requeue") on every host, in the summary and the termination message; failures that move forward keep
restarting. Ranks are shells that save checkpoints the way launcher.checkpoint names them."""

import json
import os

from launcher.contract import ExitCode
from tests.e2e.test_job_hosts import HOSTS, Job
from tests.launching import ROOT, run_dlaunch, start_dlaunch

SAME_STEP = """
echo saved > "$DLAUNCH_CKPT_DIR/ckpt-1_30.pt"
if [ "$RANK" = 1 ]; then   # crashes at step 30, every attempt, once rank 0 saved step 30 too (step 30 complete)
  while [ ! -e "${RANK0_CKPT:-$DLAUNCH_RUN_DIR/rank_000/ckpt}/ckpt-1_30.pt" ]; do sleep 0.02; done
  exit 3
fi
sleep 30
"""

MOVING_ON = """
step=$((TORCHELASTIC_RESTART_COUNT + 1))
echo saved > "$DLAUNCH_CKPT_DIR/ckpt-1_$step.pt"   # each attempt gets one step further
[ "$RANK" = 0 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 5 ] && exec sleep 30
while [ ! -e "$DLAUNCH_RUN_DIR/rank_000/ckpt/ckpt-1_$step.pt" ]; do sleep 0.02; done   # rank 0 saved it too
[ "$TORCHELASTIC_RESTART_COUNT" -lt 5 ] && exit 3
exit 0
"""


def test_a_rank_that_crashes_at_the_same_step_stops_after_three_cycles_with_93(tmp_path):
    log = tmp_path / "termination-log"
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--max-restarts", "10", "--grace-period",
                         "1", "--termination-log", log, "--output-dir", tmp_path / "runs", "--run-id", "loop", "--",
                         "-c", SAME_STEP, cwd=tmp_path)
    assert result.returncode == ExitCode.NO_PROGRESS, result.stderr
    assert "incomplete" not in result.stderr, result.stderr   # rank 1 crashed only once step 30 was complete
    assert result.stderr.count("restarting all ranks") == 3   # attempt 0 made step 30; 1, 2, 3 made nothing new
    assert ("not restarting: 3 attempt(s) in a row failed without a new complete checkpoint (still ckpt-1_30; "
            "--restarts-without-progress 3)") in result.stderr
    summary = json.loads((tmp_path / "runs" / "loop" / "summary.json").read_text())
    assert summary["exit_code"] == 93 and len(summary["attempts"]) == 4
    assert summary["no_restart"].startswith("3 attempt(s) in a row failed")
    message = log.read_text()
    assert "restarts stopped: 3 attempt(s) in a row" in message and "exit code 93: do not requeue" in message


def test_failures_that_move_forward_keep_restarting_to_the_end(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--max-restarts", "10", "--grace-period",
                         "1", "--restarts-without-progress", "1", "--output-dir", tmp_path / "runs", "--", "-c",
                         MOVING_ON, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("restarting all ranks") == 5


def test_a_crash_loop_without_checkpoints_stops_at_the_failure_rate(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "1", "--max-restarts", "10",
                         "--max-failures-per-hour", "2", "--output-dir", tmp_path / "runs", "--", "-c", "exit 4",
                         cwd=tmp_path)
    assert result.returncode == ExitCode.NO_PROGRESS, result.stderr
    assert "not restarting: 3 failures within an hour (--max-failures-per-hour 2): a crash loop" in result.stderr


def test_a_crash_loop_across_two_hosts_ends_with_93_on_every_host(tmp_path):
    job = Job(tmp_path, 2, 29765, "hostloop")
    rank0_ckpt = job.cwd(0) / "dlaunch_runs" / "hostloop" / "rank_000" / "ckpt"   # host 0's: rank 1 waits for it
    try:
        for index in (0, 1):
            job.procs[index] = start_dlaunch(
                "cluster", "--no-python", "/bin/sh", "--rank-table", job.table, "--rank-start", index, "--run-id",
                "hostloop", "--master-port", job.port, "--profile", "structure", "--grace-period", "1",
                *job.timeouts, "--max-restarts", "10", "--restarts-without-progress", "2", "--", "-c", SAME_STEP,
                cwd=job.cwd(index), env={"RANK0_CKPT": str(rank0_ckpt)})
        for index in (0, 1):
            code, stderr = job.wait(index, timeout=60)
            assert code == ExitCode.NO_PROGRESS, stderr
            assert "not restarting the job: 2 attempt(s) in a row failed without a new complete checkpoint" in stderr
            summary = job.summary(index)
            assert summary["exit_code"] == 93 and len(summary["attempts"]) == 3, summary
            assert summary["job"]["exit_code"] == 93 and summary["job"]["root_cause"]["host"] == HOSTS[1]
    finally:
        job.cleanup()


RELEASE_RANK = """
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  if [ "$RANK" = 1 ]; then date +%s.%N > "$DLAUNCH_RANK_DIR/failed_at"; touch "$EXITED"; exit 3; fi
  exec sleep 30
fi
date +%s.%N > "$DLAUNCH_RANK_DIR/restarted_at"
"""


def release_job(tmp_path, *flags, released_after=None):
    """Two NPU ranks (ASCEND_RT_VISIBLE_DEVICES=0,1) restarted once, with the stand-in npu-smi on PATH saying
    both devices hold 3000 MiB until ``released_after`` seconds after rank 1 exited (never: None)."""
    state = tmp_path / "npu_state.json"
    exited = tmp_path / "exited"
    rule = {"released": {"after": str(exited), "seconds": released_after}} if released_after is not None else {}
    state.write_text(json.dumps({"hbm": {"0": 3000, "1": 3000}, **rule}))
    env = {"ASCEND_RT_VISIBLE_DEVICES": "0,1", "NPU_SMI_STATE": str(state), "EXITED": str(exited),
           "PATH": f"{ROOT / 'tests' / 'programs'}:{os.environ['PATH']}"}
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--max-restarts", "1", "--grace-period",
                         "1", *flags, "--output-dir", tmp_path / "runs", "--run-id", "release", "--", "-c",
                         RELEASE_RANK, cwd=tmp_path, env=env)
    run_dir = tmp_path / "runs" / "release"
    failed = float((run_dir / "rank_001" / "failed_at").read_text()) if result.returncode == 0 else None
    restarted = float((run_dir / "rank_000" / "restarted_at").read_text()) if result.returncode == 0 else None
    calls = (tmp_path / "npu_state.json.calls").read_text().splitlines() if (tmp_path / "npu_state.json.calls"
                                                                           ).exists() else []
    return result, (restarted - failed if failed else None), calls


def test_a_restart_waits_until_the_devices_memory_is_released(tmp_path):
    result, gap, calls = release_job(tmp_path, released_after=1.5)
    assert result.returncode == 0, result.stderr
    assert ("waiting up to 15 s for the last attempt's device memory to be released (device 0: 3000 MiB, device 1: "
            "3000 MiB)") in result.stderr
    assert "devices released after" in result.stderr
    assert gap >= 1.5 and len(calls) >= 2, (gap, calls)


def test_devices_never_released_delay_a_restart_by_the_timeout_and_say_so(tmp_path):
    result, gap, _ = release_job(tmp_path, "--device-release-timeout", "1")
    assert result.returncode == 0, result.stderr
    assert ("devices still hold memory after 1 s (device 0: 3000 MiB, device 1: 3000 MiB; --device-release-timeout): "
            "restarting anyway") in result.stderr
    assert 1.0 <= gap, gap


def test_a_cpu_job_asks_no_driver(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--max-restarts", "1", "--output-dir",
                         tmp_path / "runs", "--", "-c", '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 3; exit 0',
                         cwd=tmp_path, env={"NPU_SMI_STATE": str(tmp_path / "none.json"),
                                            "PATH": f"{ROOT / 'tests' / 'programs'}:{os.environ['PATH']}"})
    assert result.returncode == 0, result.stderr
    assert "device memory" not in result.stderr and not (tmp_path / "none.json.calls").exists()


# A stand-in nvidia-smi: two GPUs; its memory query says both hold 3000 MiB the first time it is asked, none after.
NVIDIA_SMI = """#!/bin/sh
case "$1" in
  -L) echo "GPU 0: Stand-in GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)"
      echo "GPU 1: Stand-in GPU (UUID: GPU-11111111-1111-1111-1111-111111111111)";;
  --query-gpu=*) echo "$1" >> "$GPU_CALLS"
      if [ "$(wc -l < "$GPU_CALLS")" = 1 ]; then echo "0, 3000"; echo "1, 3000"; else echo "0, 0"; echo "1, 0"; fi;;
  *) exit 9;;
esac
"""


def test_ranks_n_on_a_gpu_host_waits_for_its_gpus_without_cuda_visible_devices(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(NVIDIA_SMI)
    (tools / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "GPU_CALLS": str(tmp_path / "gpu_calls")}
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--max-restarts", "1", "--grace-period",
                         "1", "--output-dir", tmp_path / "runs", "--", "-c",
                         '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ] && exit 3; exit 0',
                         cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    asked = result.stderr.index("waiting up to 15 s for the last attempt's device memory to be released "
                                "(device 0: 3000 MiB, device 1: 3000 MiB)")
    assert asked < result.stderr.index("devices released after"), result.stderr
    assert len((tmp_path / "gpu_calls").read_text().splitlines()) >= 2

"""Visible devices: an inherited CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES is the set a job may use.

The pure rules (``launcher.host.devices``) are tested directly; the launches check what real ranks receive.
"""

import json
import os

import pytest

from launcher.host import devices
from tests.launching import RANK_PROGRAM, latest_run, records, run_dlaunch, write_rank_table


def run_clean(*args, cwd, env=None):
    """run_dlaunch with neither visible-devices variable inherited from the test's own environment."""
    saved = {var: os.environ.pop(var) for var in (devices.CUDA_VAR, devices.ASCEND_VAR) if var in os.environ}
    try:
        return run_dlaunch(*args, cwd=cwd, env=env)
    finally:
        os.environ.update(saved)


# ---------------------------------------------------------------- the pure rules


# ---------------------------------------------------------------- real launches


def test_cuda_local_rank_lands_on_an_allowed_gpu(tmp_path):
    """With CUDA_VISIBLE_DEVICES=4,5, ``cuda:LOCAL_RANK`` of every rank is physical GPU 4 or 5, the one the plan
    names: CUDA numbers the visible list from 0, so device LOCAL_RANK is that list's LOCAL_RANK-th entry."""
    out = tmp_path / "runs"
    result = run_clean("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--", "--dump-env",
                       cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": "4,5"})
    assert result.returncode == 0, result.stderr
    run_dir = latest_run(out)
    plan = json.loads((run_dir / "plan.json").read_text())
    landed = {}
    for spec in plan["ranks"]:
        env = json.loads((run_dir / f"rank_00{spec['rank']}" / "env.json").read_text())
        physical = int(env["CUDA_VISIBLE_DEVICES"].split(",")[int(env["LOCAL_RANK"])])
        assert physical == spec["device_id"]
        landed[spec["rank"]] = physical
    assert landed == {0: 4, 1: 5}
    table = json.loads((run_dir / "rank_table.json").read_text())
    assert [d["device_id"] for d in table["server_list"][0]["device"]] == ["4", "5"]


@pytest.mark.parametrize("args,message", [
    (["--ranks", "3"], "--ranks 3, but CUDA_VISIBLE_DEVICES=4,5 allows only 2 device(s)"),
    (["--devices", "0,1"], "--devices 0,1 names device 0, which CUDA_VISIBLE_DEVICES=4,5 does not allow"),
])
def test_devices_outside_the_allowed_set_are_refused(tmp_path, args, message):
    result = run_clean("run", RANK_PROGRAM, *args, "--output-dir", tmp_path / "runs", cwd=tmp_path,
                       env={"CUDA_VISIBLE_DEVICES": "4,5"})
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_rank_table_devices_outside_the_allowed_set_are_refused(tmp_path):
    table = write_rank_table(tmp_path / "rt.json", hosts=("127.0.0.1",), devices_per_host=2)
    result = run_clean("run", RANK_PROGRAM, "--rank-table", table, "--output-dir", tmp_path / "runs",
                       cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": "4,5"})
    assert result.returncode == 2
    assert "names device 0, which CUDA_VISIBLE_DEVICES=4,5 does not allow" in result.stderr


def test_ranks_auto_is_one_rank_per_allowed_device_and_the_default(tmp_path):
    out = tmp_path / "runs"
    result = run_clean("run", RANK_PROGRAM, "--output-dir", out, cwd=tmp_path,
                       env={"CUDA_VISIBLE_DEVICES": "7,6,5,4"})
    assert result.returncode == 0, result.stderr
    plan = json.loads((latest_run(out) / "plan.json").read_text())
    assert [spec["device_id"] for spec in plan["ranks"]] == [7, 6, 5, 4]
    assert plan["world_size"] == 4


def test_ranks_auto_without_devices_runs_one_cpu_rank(tmp_path):
    """As torchrun's default, one process on a host without GPUs or NPUs (said on the console)."""
    if os.path.exists("/dev/davinci0"):
        pytest.skip("this host has NPUs")
    for given in (["--ranks", "auto"], []):
        out = tmp_path / f"runs{len(given)}"
        result = run_clean("run", RANK_PROGRAM, *given, "--output-dir", out, cwd=tmp_path,
                           env={"PATH": os.path.dirname(os.__file__)})   # no nvidia-smi on this PATH
        assert result.returncode == 0, result.stderr
        assert "found no device" in result.stderr and "starting one rank on the CPU" in result.stderr
        assert json.loads((latest_run(out) / "plan.json").read_text())["world_size"] == 1


def test_ascend_visible_subset_gives_logical_device_id_and_physical_table(tmp_path):
    out = tmp_path / "runs"
    result = run_clean("run", RANK_PROGRAM, "--devices", "6,7", "--output-dir", out, "--", "--dump-env",
                       cwd=tmp_path, env={"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"})
    assert result.returncode == 0, result.stderr
    run_dir = latest_run(out)
    env = [json.loads((run_dir / f"rank_00{r}" / "env.json").read_text()) for r in range(2)]
    assert [e["DEVICE_ID"] for e in env] == ["2", "3"]          # what the Ascend runtime calls 6 and 7
    assert all(e["ASCEND_RT_VISIBLE_DEVICES"] == "4,5,6,7" for e in env)   # left as the user set it
    table = json.loads((run_dir / "rank_table.json").read_text())
    assert [d["device_id"] for d in table["server_list"][0]["device"]] == ["6", "7"]   # HCCL: physical
    assert records(run_dir / "rank_000", "pids.jsonl")[0]["cwd"] == str(tmp_path)

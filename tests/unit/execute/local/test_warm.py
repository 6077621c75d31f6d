"""The pure parts of warm restarts (execute/local/warm.py): a rank's module list as the launcher takes it, and
the environment a standby starts with (the next attempt's, as far as it is known)."""

import os

from launcher.execute.local.warm import MAX_NAMES, parse_module_list, read_module_list, standby_environment
from launcher.plan.make import RankSpec


def test_a_module_list_keeps_dotted_identifiers_in_order_and_skips_the_rest():
    text = "torch\ntorch._dynamo\n\n  numpy  \nnot a name\n../etc\nx.1y\n²\n" + "a" * 201 + "\nzlib\n"
    assert parse_module_list(text) == ["torch", "torch._dynamo", "numpy", "zlib"]
    assert len(parse_module_list("m\n" * (MAX_NAMES + 10))) == MAX_NAMES


def test_a_module_list_that_is_not_a_regular_file_is_none(tmp_path):
    assert read_module_list(str(tmp_path / "missing")) is None
    os.mkfifo(tmp_path / "fifo")
    assert read_module_list(str(tmp_path / "fifo")) is None
    (tmp_path / "real").write_text("torch\n")
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert read_module_list(str(tmp_path / "link")) is None
    assert read_module_list(str(tmp_path / "real")) == ["torch"]


def test_a_standby_starts_with_the_next_attempts_environment_as_far_as_it_is_known():
    rank_dir = "/runs/r/rank_001"
    env = {"RANK": "1", "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_ERROR_FILE": f"{rank_dir}/error.1.json",
           "DLAUNCH_MODULES_FILE": f"{rank_dir}/modules.1.txt", "DLAUNCH_RESUME_FROM": "/ckpt/old.pt",
           "DLAUNCH_RESUME_STEP": "0_6", "MASTER_PORT": "30001"}
    spec = RankSpec(rank=1, local_rank=1, device_id=1, server_id="0", argv=["python", "t.py"], cwd="/", env=env,
                    rank_dir=rank_dir, log_file=f"{rank_dir}/output.1.log", env_log=f"{rank_dir}/env.1.log",
                    ckpt_dir=f"{rank_dir}/ckpt", error_file=f"{rank_dir}/error.1.json", console=False)
    assert standby_environment(spec, 1) == {
        "RANK": "1", "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_ERROR_FILE": f"{rank_dir}/error.2.json",
        "DLAUNCH_MODULES_FILE": f"{rank_dir}/modules.2.txt", "MASTER_PORT": "30001"}
    assert spec.env["TORCHELASTIC_RESTART_COUNT"] == "1"   # the running attempt's own is not touched

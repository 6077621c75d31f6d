"""End-to-end tests of examples/train_cifar.py, the bundled dlaunch example job.

They run the real script in real processes (single process, then two ranks
under torchrun) on tiny synthetic data, because what matters to dlaunch is the
script's contract: its environment variables, its MindSpore-style output and
its checkpoint files.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_cifar.py"
LOSS_LINE = re.compile(r"^epoch: (\d+) step: (\d+), loss is (\d+\.\d+(?:e-\d+)?)$")
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
               "RANK_ID", "RANK_SIZE", "DEVICE_ID", "DLAUNCH_CKPT_DIR", "DATA_PATH")


def load_example():
    """Import the script as a module (examples/ is not a package; its shared data writer lives beside it)."""
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("train_cifar", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


def clean_env(tmp: Path, **extra: str) -> dict:
    """Environment without inherited launcher variables, caching data under ``tmp``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(OMP_NUM_THREADS="1", DLAUNCH_RUN_DIR=str(tmp / "run"), **extra)
    return env


def run(cmd: list, tmp: Path, env: dict) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def loss_values(stdout: str) -> list:
    return [float(m.group(3)) for m in map(LOSS_LINE.match, stdout.splitlines()) if m]


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """One single-process training run shared by the tests that inspect it."""
    tmp = tmp_path_factory.mktemp("single")
    ckpt_dir = tmp / "ckpt"
    env = clean_env(tmp, DLAUNCH_CKPT_DIR=str(ckpt_dir))
    cmd = [sys.executable, str(SCRIPT), "--samples", "256", "--epochs", "2", "--log-every", "2"]
    return run(cmd, tmp, env), ckpt_dir


def test_single_process_loss_falls(single_run):
    result, _ = single_run
    losses = loss_values(result.stdout)
    # 256 samples / batch 32 = 8 steps per epoch, a line every 2 steps, 2 epochs.
    assert len(losses) == 8, result.stdout
    assert losses[-1] < losses[0], losses
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"epoch: 2 accuracy: [01]\.\d+", lines[-2]), lines[-2]
    assert lines[-1] == "training finished"


def test_single_process_checkpoints(single_run):
    _, ckpt_dir = single_run
    names = sorted(p.name for p in ckpt_dir.iterdir())
    assert names == ["resnet-1_8.pt", "resnet-2_8.pt"]  # no temp files left behind
    for epoch, name in enumerate(names, start=1):
        state = torch.load(ckpt_dir / name, weights_only=True)
        assert set(state) >= {"model", "optimizer", "epoch"}
        assert state["epoch"] == epoch
        assert "fc.weight" in state["model"]  # bare module, no DDP "module." prefix
        assert state["optimizer"]["state"], "optimizer state (momentum) saved"


def test_reader_parses_hand_written_records(tmp_path):
    example = load_example()
    first = bytes([3]) + bytes(range(256)) * 12  # 3072 pixel bytes: 0..255 repeated
    second = bytes([9]) + bytes([10]) * 1024 + bytes([20]) * 1024 + bytes([30]) * 1024
    path = tmp_path / "two.bin"
    path.write_bytes(first + second)

    indices, labels, images = example.load_shard([path], shard_id=0, num_shards=1)
    assert indices.tolist() == [0, 1]
    assert labels.tolist() == [3, 9]
    assert images.shape == (2, 3, 32, 32) and images.dtype == torch.uint8
    assert images[0, 0, 0, :4].tolist() == [0, 1, 2, 3]  # row-major within a channel
    assert images[0, 0, 7, 31].item() == 255  # pixel 255 of the red plane
    assert images[0, 1, 0, 0].item() == 0  # green plane starts at byte 1024
    assert [images[1, c].unique().tolist() for c in range(3)] == [[10], [20], [30]]

    _, shard_labels, _ = example.load_shard([path], shard_id=1, num_shards=2)
    assert shard_labels.tolist() == [9]
    path.write_bytes(first + second[:-1])
    with pytest.raises(ValueError, match="whole number"):
        example.load_shard([path], shard_id=0, num_shards=1)


def test_two_ranks_under_torchrun_use_disjoint_shards(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "2", str(SCRIPT),
           "--samples", "256", "--epochs", "1", "--log-every", "2", "--print-shard"]
    result = run(cmd, tmp_path, clean_env(tmp_path))

    shards = {}
    for line in result.stdout.splitlines():
        match = re.match(r"^shard: rank=(\d) world_size=2 size=\d+ indices=([\d,]+)$", line)
        if match:
            shards[int(match.group(1))] = {int(i) for i in match.group(2).split(",")}
    assert sorted(shards) == [0, 1], result.stdout
    assert not shards[0] & shards[1]
    assert shards[0] | shards[1] == set(range(256))

    # 128 samples per rank / batch 32 = 4 steps, a line every 2 steps, per rank.
    assert len(loss_values(result.stdout)) == 4, result.stdout
    assert result.stdout.count("training finished") == 2
    for rank in (0, 1):
        assert (tmp_path / f"ckpt_{rank}" / "resnet-1_4.pt").is_file()

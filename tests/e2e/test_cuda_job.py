"""A real CUDA job, where this host has NVIDIA GPUs (skipped elsewhere: CI has none; run on a GPU machine).

What last round's rule for CUDA_VISIBLE_DEVICES promises, checked with CUDA itself rather than with the
plan: with nothing inherited, ``--ranks auto`` starts one rank per GPU that ``nvidia-smi -L`` lists, leaves
the variable unset (as torchrun does), and ``cuda:LOCAL_RANK`` of rank i is GPU i; an inherited
CUDA_VISIBLE_DEVICES is the set the job may use and ``cuda:LOCAL_RANK`` lands on the GPU it names.  Each
rank runs an NCCL all-reduce, so the collective itself is part of the check.
"""

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.launching import ROOT, latest_run, run_dlaunch

CUDA_RANK = ROOT / "tests" / "programs" / "cuda_rank.py"
pytestmark = pytest.mark.skipif(not shutil.which("nvidia-smi"), reason="no NVIDIA GPU on this host")


def gpu_uuids() -> list[str]:
    """Every GPU's UUID in nvidia-smi's order (its index), without the ``GPU-`` prefix torch leaves out."""
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(UUID: GPU-([0-9a-f-]+)\)", listing)


def launch(tmp_path, env: dict, *args) -> list[dict]:
    saved = os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        result = run_dlaunch("run", CUDA_RANK, *args, "--output-dir", tmp_path / "runs", cwd=tmp_path,
                             env=env, timeout=300)
    finally:
        if saved is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    assert result.returncode == 0, result.stderr
    run_dir = latest_run(tmp_path / "runs")
    return sorted((json.loads(path.read_text()) for path in run_dir.glob("rank_*/cuda.json")),
                  key=lambda record: record["rank"])


def test_one_rank_per_gpu_with_nothing_inherited(tmp_path):
    uuids = gpu_uuids()
    records = launch(tmp_path, {})
    assert [r["rank"] for r in records] == list(range(len(uuids)))
    assert all(r["cuda_visible_devices"] is None for r in records)   # unset, as torchrun leaves it
    assert [r["uuid"] for r in records] == uuids                      # cuda:LOCAL_RANK is GPU LOCAL_RANK
    assert all(r["sum"] == len(uuids) for r in records)


def test_inherited_visible_devices_pick_the_gpu(tmp_path):
    uuids = gpu_uuids()
    last = len(uuids) - 1
    records = launch(tmp_path, {"CUDA_VISIBLE_DEVICES": str(last)})
    assert len(records) == 1 and records[0]["cuda_visible_devices"] == str(last)
    assert records[0]["uuid"] == uuids[last] and records[0]["sum"] == 1

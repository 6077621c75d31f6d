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
import sys
import textwrap

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


def test_synchronous_save_of_cuda_tensors_loads_back_on_their_device(tmp_path):
    """A synchronous ``checkpoint.save`` stages device tensors through pinned buffers (stage.capture with
    devices_only): the file must still load as a ``torch.save`` of the original would, each tensor on the
    device it came from, views sharing storage, and the same buffers serving the next save."""
    program = textwrap.dedent(f"""
        import torch
        from launcher import checkpoint
        from launcher.checkpoint import writer
        state = {{"w": torch.randn(1000, device="cuda"), "b": torch.arange(10), "step": 3}}
        state["view"] = state["w"][10:20]
        for step in (1, 2):
            path = checkpoint.save(state, 1, step, directory={str(tmp_path)!r})
            loaded = torch.load(path, map_location=None)
            assert loaded["w"].is_cuda and not loaded["b"].is_cuda and loaded["step"] == 3
            assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["b"], state["b"])
            assert loaded["view"].untyped_storage().data_ptr() == loaded["w"].untyped_storage().data_ptr()
        assert writer.active().pool.kept == 4000   # one pinned buffer, reused by the second save
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr

"""The memory tier's rank side with real processes and real torch.distributed (gloo, 2 ranks), no dlaunch: a
rank's memory save survives its SIGKILL (the slot's record and archive verify, load, equal the state, and
``checkpoint.load`` of a restarted rank reads it from memory), a save killed mid-copy leaves the previous step
newest and whole, and a forked child of a rank never writes the rank's slots."""

import contextlib
import os
import signal
import subprocess
import sys

import pytest
import torch

from launcher import checkpoint
from launcher.checkpoint import memory, tier
from tests.launching import ROOT, free_port, wait_until

PROGRAM = str(ROOT / "tests" / "programs" / "memory_rank.py")
sys.path.insert(0, str(ROOT / "tests" / "programs"))
from memory_rank import state_at  # noqa: E402


def same(a, b):
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            same(a[key], b[key])
    else:
        assert a == b


def expected(rank, step):
    return state_at(torch, rank, step, float(sum(r + step for r in range(2))))


@pytest.fixture
def ranks(tmp_path):
    """Start the 2 ranks of a gloo job (``start(*args)``), each with its memory slots under tmp_path; all killed
    at the end."""
    procs = []

    def start(*args):
        port = free_port()
        for rank in range(2):
            slots = tmp_path / "memory" / f"rank_{rank:03d}" / "slots"
            slots.mkdir(parents=True)
            env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                   "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                   "DLAUNCH_MEMORY_SLOTS": str(slots), "DLAUNCH_CKPT_DIR": str(tmp_path / f"ckpt_{rank}")}
            for name in ("DLAUNCH_MEMORY_BUDGET", "DLAUNCH_RESUME_FROM", memory.OWNER_ENV):
                env.pop(name, None)
            procs.append(subprocess.Popen([sys.executable, PROGRAM, "--progress", str(tmp_path / f"progress_{rank}"),
                                           *map(str, args)], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        return procs

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def progress(tmp_path, rank):
    path = tmp_path / f"progress_{rank}"
    return path.read_text().split("\n") if path.exists() else []


def kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL


def slots_of(tmp_path, rank):
    return tmp_path / "memory" / f"rank_{rank:03d}" / "slots"


def test_a_memory_save_survives_sigkill_of_the_rank(ranks, tmp_path, monkeypatch):
    procs = ranks("--steps", 3, "--fork-child")
    assert wait_until(lambda: all("saved 3" in progress(tmp_path, r) for r in range(2)), timeout=120), \
        [proc.stderr.read() for proc in procs if proc.poll() is not None]
    kill(procs[1])
    slots = slots_of(tmp_path, 1)
    record = tier.read_record(str(slots))
    assert (record.slot, record.generation, record.step, record.name) == (0, 3, 3, "ckpt-0_3.pt")
    slot = slots / "slot-0"
    assert os.path.getsize(slot) == record.length and slot.read_bytes().endswith(tier.comment(3))
    for options in (dict(), dict(mmap=True), dict(weights_only=True)):
        same(torch.load(slot, **options), expected(1, 3))
    # the restarted rank 1 (this process, as it) resumes that step from memory
    monkeypatch.setenv("DLAUNCH_MEMORY_SLOTS", str(slots))
    monkeypatch.setenv("DLAUNCH_RESUME_FROM", str(tmp_path / "ckpt_1" / "ckpt-0_3.pt"))   # never on disk
    same(checkpoint.load(), expected(1, 3))
    assert checkpoint.memory_step() == (0, 3)
    # rank 0's forked child saved to disk, never into its parent's slots
    kill(procs[0])
    assert tier.read_record(str(slots_of(tmp_path, 0))).step == 3
    assert torch.load(tmp_path / "ckpt_0" / "ckpt-0_99.pt") == {"child": True}
    assert "child process" in procs[0].stderr.read()


def test_a_save_killed_mid_copy_leaves_the_previous_step_newest(ranks, tmp_path, monkeypatch):
    procs = ranks("--steps", 3, "--block-rank", 1, "--block-step", 3)
    assert wait_until(lambda: "blocking 3" in progress(tmp_path, 1), timeout=120), \
        [proc.stderr.read() for proc in procs if proc.poll() is not None]
    slots = slots_of(tmp_path, 1)
    written = slots / "slot-0"                      # step 3's slot, its tensors copied, its archive unfinished
    kill(procs[1])
    record = tier.read_record(str(slots))
    assert (record.slot, record.generation, record.step) == (1, 2, 2)
    assert os.path.getsize(written) < (64 << 20) + (16 << 20)   # the file grew into its mapping as it was written
    assert not written.read_bytes().endswith(tier.comment(3))
    written_now = written.read_bytes()
    assert state_at(torch, 1, 3, 0)["big"].numpy().tobytes()[:4096] in written_now   # step 3's tensors were copied
    same(torch.load(slots / "slot-1", weights_only=True), expected(1, 2))
    monkeypatch.setenv("DLAUNCH_MEMORY_SLOTS", str(slots))
    monkeypatch.setenv("DLAUNCH_RESUME_FROM", str(tmp_path / "ckpt_1" / "ckpt-0_2.pt"))
    same(checkpoint.load(), expected(1, 2))
    monkeypatch.setenv("DLAUNCH_RESUME_FROM", str(tmp_path / "ckpt_1" / "ckpt-0_3.pt"))
    with pytest.raises(FileNotFoundError):          # step 3 is in no verified slot, and not on disk
        checkpoint.load()

"""The memory tier with real processes (issue 48): a SIGKILLed rank resumes from its memory step, an unmodified
nanoGPT-style ``torch.save`` script resumes from its memory directory, and a SIGKILLed dlaunch's area is
persisted and freed by ``dlaunch prune`` or by the next dlaunch of the run. Every area lives in the test's own
memory root (never /dev/shm); the suite's conftest fails any test that leaves one."""

import json
import os
import signal
import sys

import torch

from launcher.checkpoint import tier
from tests.launching import ROOT, kill_run, pid_alive, run_dlaunch, start_dlaunch, summary, wait_until

PROGRAMS = ROOT / "tests" / "programs"
MEMORY_RANK = str(PROGRAMS / "keeper_rank.py")
NANOGPT = str(PROGRAMS / "nanogpt_memory.py")


def memory_flags(root):
    return ["--memory-ckpt", "--memory-root", str(root), "--ranks", "2", "--console", "all", "--grace-period", "2"]


def reached(rank_dir, name):
    """The pid a rank wrote once it reached its step (None before)."""
    path = rank_dir / name
    return int(path.read_text()) if path.exists() and path.read_text() else None


def start(tmp_path, run_id, *args):
    root = tmp_path / "shm"
    root.mkdir(exist_ok=True)
    proc = start_dlaunch("run", *memory_flags(root), "--run-id", run_id, "--output-dir", tmp_path / "runs", *args,
                         cwd=tmp_path)
    return proc, root, tmp_path / "runs" / run_id


def finish(proc, run_id, timeout=120):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_run(run_id)
        proc.kill()
    return out, err


def test_a_sigkilled_rank_resumes_from_its_memory_step_persisted_by_dlaunch(tmp_path):
    proc, root, run = start(tmp_path, "mem-a", "--max-restarts", "1", MEMORY_RANK, "--", "--reach", "3",
                            "--steps", "5", "--disk-at", "1")
    try:
        victim = wait_until(lambda: reached(run / "rank_001", "reached.1"), 90)
        assert victim and wait_until(lambda: reached(run / "rank_000", "reached.0"), 30)
        assert [path.name for path in root.iterdir()] == [tier.area_name("mem-a", proc.pid)]
        # both tiers known while it runs: step 3 in every rank's memory, step 1 on disk
        listed = run_dlaunch("ckpt", "list", run, "--json")
        rows = {(row["kind"], row["label"]): row for row in json.loads(listed.stdout)}
        assert rows[("memory", "ckpt-0_3")]["ranks"] == [0, 1] and rows[("memory", "ckpt-0_3")]["newest_complete"]
        assert rows[("per-rank", "ckpt-0_1")]["complete"], listed.stdout
        status = run_dlaunch("status", run)
        assert "memory tier: newest step per rank 0: ckpt-0_3, 1: ckpt-0_3; newest complete in memory or on " \
               "disk: ckpt-0_3 (on disk alone: ckpt-0_1)" in status.stdout, status.stdout + status.stderr
        os.kill(victim, signal.SIGKILL)
    finally:
        out, err = finish(proc, "mem-a")
    assert proc.returncode == 0, out + err
    assert "rank 1: persisted its memory step 0_3" in err and "rank 0: persisted its memory step 0_3" in err
    # the restart resumed from the step the ranks reached in memory (3), not the last disk save (1)
    for rank in (0, 1):
        assert f"[rank{rank}]: resumed step 0_3 from {run}/rank_00{rank}/ckpt/ckpt-0_3.pt (holds 3)" in out, out
        assert torch.load(run / f"rank_00{rank}" / "ckpt" / "ckpt-0_3.pt")["step"] == 3   # dlaunch wrote it
    assert summary(run)["newest_complete_checkpoint"] == "ckpt-0_5"   # the last steps, persisted at the end
    assert list(root.iterdir()) == []   # freed at dlaunch's exit


def test_a_torch_save_script_resumes_from_its_memory_directory(tmp_path):
    # the one change a user makes: the script's output directory is $DLAUNCH_MEMORY_DIR, said by the rank's shell
    command = f'exec {sys.executable} {NANOGPT} --out_dir "$DLAUNCH_MEMORY_DIR" --reach 4 --max_iters 6'
    proc, root, run = start(tmp_path, "mem-b", "--max-restarts", "1", "--no-python", "sh", "--", "-c", command)
    try:
        victim = wait_until(lambda: reached(run / "rank_001", "reached"), 90)
        assert victim
        os.kill(victim, signal.SIGKILL)
    finally:
        out, err = finish(proc, "mem-b")
    assert proc.returncode == 0, out + err
    # every rank resumed from the iteration rank 0 saved in the host's memory directory: 4, where rank 1 was
    # killed (no step lost); rank 1 reads the file rank 0 wrote, as nanoGPT's ranks do from a shared out_dir
    assert "[rank1]: resuming from iter 4 in" in out and "/rank_000/files/ckpt.pt" in out, out
    mirrored = torch.load(run / "rank_000" / "ckpt" / "memory" / "ckpt.pt")   # the host's directory's mirror
    assert mirrored["iter_num"] == 6 and set(mirrored) == {"model", "optimizer", "iter_num"}
    assert not (run / "rank_001" / "ckpt" / "memory").exists()
    assert list(root.iterdir()) == []
    # a new dlaunch of the run (--resume; another host alike): the memory directory filled from the mirror first
    command = command.replace("--max_iters 6", "--max_iters 7")
    done = run_dlaunch("run", *memory_flags(root), "--resume", run, "--output-dir", tmp_path / "runs",
                       "--no-python", "sh", "--", "-c", command, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[rank1]: resuming from iter 6 in" in done.stdout and "iter 7:" in done.stdout, done.stdout
    assert "resuming from the files the ranks kept in memory" in done.stderr


def test_a_sigkilled_dlaunchs_area_is_persisted_and_freed_by_prune_and_by_the_next_dlaunch(tmp_path):
    for run_id, freed_by in (("mem-c", "prune"), ("mem-d", "next")):
        proc, root, run = start(tmp_path, run_id, MEMORY_RANK, "--", "--reach", "2", "--disk-at")
        try:
            assert wait_until(lambda run=run: reached(run / "rank_001", "reached.1"), 90)
            assert wait_until(lambda run=run: reached(run / "rank_000", "reached.0"), 30)
            ranks = [reached(run / f"rank_00{rank}", f"reached.{rank}") for rank in (0, 1)]
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            assert wait_until(lambda ranks=ranks: not any(map(pid_alive, ranks)), 30)   # the watchdog killed the ranks
        finally:
            finish(proc, run_id)
        area = root / tier.area_name(run_id, proc.pid)
        assert area.is_dir() and not (run / "rank_000" / "ckpt" / "ckpt-0_2.pt").exists()
        if freed_by == "prune":
            done = run_dlaunch("prune", "--memory-root", root, "--output-dir", tmp_path / "runs")
            assert done.returncode == 0 and f"freed the memory area {area}" in done.stderr, done.stderr
        else:   # the same run id again: its area persisted and freed before the run directory refuses it
            done = run_dlaunch("run", *memory_flags(root), "--run-id", run_id, "--output-dir", tmp_path / "runs",
                               MEMORY_RANK, cwd=tmp_path)
            assert done.returncode == 2 and f"freed the memory area {area}" in done.stderr, done.stderr
            assert "choose another --run-id" in done.stderr
        assert not area.exists() and list(root.iterdir()) == []
        for rank in (0, 1):   # what the area held, on disk first
            assert torch.load(run / f"rank_00{rank}" / "ckpt" / "ckpt-0_2.pt")["step"] == 2
            assert torch.load(run / "rank_000" / "ckpt" / "memory" / f"ckpt.{rank}.pt")["step"] == 2   # the host's
    # what dlaunch persisted is the step a --resume of the run starts from
    done = run_dlaunch("run", *memory_flags(root), "--resume", run, "--output-dir", tmp_path / "runs", MEMORY_RANK,
                       "--", "--steps", "2", cwd=tmp_path)
    assert done.returncode == 0 and "[rank1]: resumed step 0_2 from" in done.stdout, done.stdout + done.stderr


def test_a_rank_restarted_alone_finds_the_file_its_kill_tore_restored_from_the_mirror(tmp_path):
    """--restart-policy rank: rank 0 dies half-way through rewriting ``ckpt.pt`` in the host's memory directory
    while rank 1 runs on; restarted in place (no new attempt), it reads the whole step 3 that dlaunch mirrored,
    not the torn step 4 (before, only a new attempt restored torn files)."""
    proc, root, run = start(tmp_path, "mem-e", "--restart-policy", "rank", "--max-restarts", "1",
                            str(PROGRAMS / "torn_in_place.py"))
    out, err = finish(proc, "mem-e")
    assert proc.returncode == 0, out + err
    assert "[rank0]: resumed step 3" in out, out + err
    assert "rank 0: restored ckpt.pt into its memory directory from " in err and "before the restart in place" in err
    assert list(root.iterdir()) == []

"""dlaunch ckpt list/merge/reshard on a real 4-rank model-parallel gloo run of examples/model_parallel.py.

The run saves per-rank slices (save_sliced) and, with --integrated, the full state gathered by rank 0
(save_integrated): merging the slices must give exactly the integrated checkpoint.  Its replicated
layers start different on every rank and are made equal by broadcast_parameters, so every merge that
passes the replicated-tensor check also shows the broadcast worked.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from launcher import checkpoint
from launcher.errors import UsageError
from launcher.observe import ckpt as ckpttool
from tests.launching import ROOT, latest_run, run_dlaunch

EXAMPLE = str(ROOT / "examples" / "model_parallel.py")


@pytest.fixture(scope="module")
def mp_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("mp")
    result = run_dlaunch("run", EXAMPLE, "--ranks", "4", "--output-dir", base / "runs", "--run-id", "mp",
                         "--", "--integrated", cwd=base, timeout=180)
    assert result.returncode == 0, result.stderr
    return base / "runs" / "mp"


def leaves(state):
    return dict(checkpoint.leaves(state))


def assert_same(a, b):
    a, b = leaves(a), leaves(b)
    assert a.keys() == b.keys()
    for name in a:
        if torch.is_tensor(a[name]):
            assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name
        else:
            assert a[name] == b[name], name


def copy_run(mp_run, tmp_path):
    return shutil.copytree(mp_run, tmp_path / "copy", symlinks=True)


def test_list_run_shows_steps_ranks_and_integrated(mp_run):
    rows = ckpttool.list_run(str(mp_run))
    assert [(r["kind"], r["label"], r["ranks"], r["complete"], r["sliced"]) for r in rows] == [
        ("per-rank", "mp-1_10", [0, 1, 2, 3], True, True), ("per-rank", "mp-2_10", [0, 1, 2, 3], True, True),
        ("integrated", "mp-1_10", [0], True, False), ("integrated", "mp-2_10", [0], True, False)]
    assert all(r["bytes"] > 0 for r in rows)
    text = ckpttool.format_list(rows)
    assert re.search(r"per-rank\s+mp-2_10\s+0-3\s+[\d.]+ KB\s+complete, sliced", text), text
    # the listing needs no torch
    code = ("import sys, launcher.observe.ckpt as t; t.format_list(t.list_run(sys.argv[1])); "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code, str(mp_run)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode == 0
    with pytest.raises(UsageError, match="no run directory"):
        ckpttool.list_run(str(mp_run / "nope"))


def test_merge_of_the_slices_equals_the_integrated_save(mp_run, tmp_path):
    report = ckpttool.merge(str(mp_run), str(tmp_path / "full.pt"))
    assert report == {"step": "mp-2_10", "ranks": 4, "tensors": 8, "sliced": 2, "replicated": 6,
                      "bytes": os.path.getsize(tmp_path / "full.pt"), "output": str(tmp_path / "full.pt")}
    merged = torch.load(tmp_path / "full.pt")
    assert merged["model"]["fc1.weight"].shape == (32, 64)
    assert_same(merged, torch.load(mp_run / "integrated" / "mp-2_10.pt"))
    for label in ("mp-1_10", "1_10"):
        out = tmp_path / f"{label}.pt"
        assert ckpttool.merge(str(mp_run), str(out), step=label)["step"] == "mp-1_10"
        assert_same(torch.load(out), torch.load(mp_run / "integrated" / "mp-1_10.pt"))
    with pytest.raises(UsageError, match="exists; nothing was written"):
        ckpttool.merge(str(mp_run), str(tmp_path / "full.pt"))
    with pytest.raises(UsageError, match="no checkpoint '7_7'"):
        ckpttool.merge(str(mp_run), str(tmp_path / "x.pt"), step="7_7")


def test_reshard_4_to_2_then_merge_equals_the_original_merge(mp_run, tmp_path):
    ckpttool.merge(str(mp_run), str(tmp_path / "from4.pt"))
    report = ckpttool.reshard(str(mp_run), 2, str(tmp_path / "two"))
    assert (report["from_ranks"], report["ranks"], report["sliced"]) == (4, 2, 2)
    slice1 = torch.load(tmp_path / "two" / "rank_001" / "ckpt" / "mp-2_10.pt")
    assert slice1["model"]["fc1.weight"].shape == (32, 32)
    rows = ckpttool.list_run(str(tmp_path / "two"))
    assert [(r["label"], r["ranks"], r["complete"], r["sliced"]) for r in rows] == [("mp-2_10", [0, 1], True, True)]
    ckpttool.merge(str(tmp_path / "two"), str(tmp_path / "from2.pt"))
    assert_same(torch.load(tmp_path / "from2.pt"), torch.load(tmp_path / "from4.pt"))
    with pytest.raises(UsageError, match=r"'model.fc1.weight' for 3 ranks: its split dim 1 has size 64"):
        ckpttool.reshard(str(mp_run), 3, str(tmp_path / "three"))
    with pytest.raises(UsageError, match="already exists"):
        ckpttool.reshard(str(mp_run), 2, str(tmp_path / "two"))


def test_a_resharded_checkpoint_resumes_training(mp_run, tmp_path):
    """Epoch 1 of the 4-rank run, resharded for 1 rank, continues into the same epoch 2."""
    ckpttool.reshard(str(mp_run), 1, str(tmp_path / "one"), step="mp-1_10")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLAUNCH_CKPT_DIR": str(tmp_path / "ckpt"),
           "DLAUNCH_RESUME_FROM": str(tmp_path / "one" / "rank_000" / "ckpt" / "mp-1_10.pt"),
           "DLAUNCH_RESUME_STEP": "1_10"}
    env.pop("WORLD_SIZE", None)
    result = subprocess.run([sys.executable, EXAMPLE], env=env, capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "epoch 1 done, continuing at epoch 2" in result.stdout

    def losses(text):
        return [float(v) for v in re.findall(r"^epoch: 2 step: \d+, loss is (\S+)$", text, re.M)]

    four_ranks = losses((mp_run / "rank_000" / "output.log").read_text())
    assert len(four_ranks) == 2 and losses(result.stdout) == pytest.approx(four_ranks, rel=1e-5)
    final = torch.load(tmp_path / "ckpt" / "mp-2_10.pt")["model"]
    expected = torch.load(mp_run / "integrated" / "mp-2_10.pt")["model"]
    for name in expected:   # equal up to the summation order of the all-reduce
        assert torch.allclose(final[name], expected[name], rtol=1e-4, atol=1e-6), name


def test_replicated_mismatch_names_the_tensor_and_the_ranks(mp_run, tmp_path):
    run = copy_run(mp_run, tmp_path)
    for rank in (2, 3):
        path = run / f"rank_00{rank}" / "ckpt" / "mp-2_10.pt"
        state = torch.load(path)
        state["model"]["fc2.bias"] += 1
        torch.save(state, path)
    with pytest.raises(UsageError, match=r"replicated tensor 'model.fc2.bias' differs across ranks: "
                                         r"rank\(s\) 2, 3 do not match rank 0"):
        ckpttool.merge(str(run), str(tmp_path / "out.pt"))
    assert not (tmp_path / "out.pt").exists()


def test_a_strategy_file_that_is_a_fifo_is_an_error_not_a_hang(mp_run, tmp_path):
    run = copy_run(mp_run, tmp_path)
    strategy = run / "rank_001" / "ckpt" / "mp-2_10.strategy.json"
    strategy.unlink()
    os.mkfifo(strategy)
    with pytest.raises(UsageError, match=r"mp-2_10.strategy.json: it is a FIFO, not a regular file"):
        ckpttool.merge(str(run), str(tmp_path / "out.pt"))


def test_missing_strategy_files_and_ranks_are_clear_errors(mp_run, tmp_path):
    run = copy_run(mp_run, tmp_path)
    (run / "rank_001" / "ckpt" / "mp-2_10.strategy.json").unlink()
    with pytest.raises(UsageError, match=r"mp-2_10: ranks 1 have no strategy file \(mp-2_10.strategy.json\)"):
        ckpttool.merge(str(run), str(tmp_path / "out.pt"))
    (run / "rank_003" / "ckpt" / "mp-2_10.pt").unlink()
    rows = {r["label"]: r for r in ckpttool.list_run(str(run)) if r["kind"] == "per-rank"}
    assert (rows["mp-2_10"]["complete"], rows["mp-2_10"]["missing"]) == (False, [3])
    assert "incomplete: ranks 3 missing" in ckpttool.format_list(list(rows.values()))
    with pytest.raises(UsageError, match=r"mp-2_10 is incomplete: ranks 3 of 4 have no file of it"):
        ckpttool.merge(str(run), str(tmp_path / "out.pt"), step="mp-2_10")
    # by default the newest step every rank saved is merged
    assert ckpttool.merge(str(run), str(tmp_path / "out.pt"))["step"] == "mp-1_10"


def test_two_runs_in_one_output_directory_share_no_checkpoint_path(mp_run, tmp_path):
    out = mp_run.parent

    def checkpoints(run_dir):
        return {p: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in run_dir.rglob("*") if p.is_file() and p.suffix in (".pt", ".json") and "ckpt" in p.parts}

    before = checkpoints(mp_run)
    result = run_dlaunch("run", EXAMPLE, "--ranks", "2", "--output-dir", out, "--", "--epochs", "1",
                         cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    second = latest_run(out)
    assert second != mp_run
    after = checkpoints(second)
    assert after and not set(after) & set(before)
    assert checkpoints(mp_run) == before
    refused = run_dlaunch("run", EXAMPLE, "--ranks", "4", "--output-dir", out, "--run-id", "mp", cwd=tmp_path)
    assert refused.returncode == 2
    assert checkpoints(mp_run) == before


def test_hybrid_layout_slices_over_a_group_replicated_across_groups(tmp_path, monkeypatch):
    """4 ranks = 2 model-parallel slices x 2 data-parallel replicas: (dim, index, count) strategies."""
    full = torch.arange(24.0).reshape(4, 6)
    monkeypatch.setenv("WORLD_SIZE", "4")
    for rank in range(4):
        monkeypatch.setenv("RANK", str(rank))
        index = rank % 2
        state = {"w": full[:, 3 * index:3 * index + 3], "b": torch.ones(4)}
        checkpoint.save_sliced(state, {"w": (1, index, 2)}, 1, 1, directory=str(tmp_path / f"run/rank_00{rank}/ckpt"))
    assert ckpttool.merge(str(tmp_path / "run"), str(tmp_path / "full.pt"))["sliced"] == 1
    assert torch.equal(torch.load(tmp_path / "full.pt")["w"], full)
    path = tmp_path / "run" / "rank_003" / "ckpt" / "ckpt-1_1.pt"
    torch.save({"w": full[:, 3:].clone() + 1, "b": torch.ones(4)}, path)
    with pytest.raises(UsageError, match=r"slice 1 of 'w' differs between ranks 1 and 3"):
        ckpttool.merge(str(tmp_path / "run"), str(tmp_path / "again.pt"))


def test_ckpt_commands_through_the_cli(tmp_path):
    """list, merge and reshard as users type them: one line per outcome, exit 2 on bad input."""
    from tests.launching import ROOT, latest_run, run_dlaunch

    out = tmp_path / "runs"
    run = run_dlaunch("run", ROOT / "examples" / "model_parallel.py", "--ranks", "2", "--output-dir", out,
                      cwd=tmp_path, timeout=240)
    assert run.returncode == 0, run.stderr
    listed = run_dlaunch("ckpt", "list", "--output-dir", out, cwd=tmp_path)
    assert listed.returncode == 0 and "complete, sliced" in listed.stdout
    merged = run_dlaunch("ckpt", "merge", latest_run(out), "-o", tmp_path / "full.pt", cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    assert (tmp_path / "full.pt").exists() and "merged" in merged.stderr
    again = run_dlaunch("ckpt", "merge", latest_run(out), "-o", tmp_path / "full.pt", cwd=tmp_path)
    assert again.returncode == 2 and "exists; nothing was written" in again.stderr
    resharded = run_dlaunch("ckpt", "reshard", latest_run(out), "--ranks", "1", "-o", tmp_path / "one",
                            cwd=tmp_path)
    assert resharded.returncode == 0, resharded.stderr
    assert list((tmp_path / "one" / "rank_000" / "ckpt").glob("*.pt"))
    missing = run_dlaunch("ckpt", "list", tmp_path / "nowhere", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr

"""Resume across ranks: a killed 2-rank gloo run, resumed, ends with the same weights as an uninterrupted one
(the killed and resumed runs save their checkpoints in the background, the uninterrupted one synchronously)."""

import torch

from tests.launching import ROOT, latest_run, processes_of_run, run_dlaunch, side_by_side, summary

EXAMPLE = str(ROOT / "examples" / "train_cifar.py")
TRAIN = ["--epochs", "3", "--samples", "256", "--batch-size", "32", "--log-every", "4"]


def final_weights(run_dir, rank):
    files = sorted((run_dir / f"rank_{rank:03d}" / "ckpt").glob("resnet-3_*.pt"))
    assert len(files) == 1, files
    return torch.load(files[0], map_location="cpu")["model"]


def assert_same_weights(a, b):
    """Equal up to float summation order: DDP's gradient buckets (and so gloo's ring chunks) are laid out
    afresh in a restarted process, which can move the last bits of an all-reduced sum."""
    assert a.keys() == b.keys()
    for name in a:
        if a[name].is_floating_point():
            assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-5), name
        else:
            assert torch.equal(a[name], b[name]), name


def epoch_weights(run_dir, rank, epoch):
    (path,) = (run_dir / f"rank_{rank:03d}" / "ckpt").glob(f"resnet-{epoch}_*.pt")
    return torch.load(path, map_location="cpu")["model"]


def test_killed_run_resumed_matches_uninterrupted(tmp_path):
    out = tmp_path / "runs"

    def launch(which):   # the clean run and the crashed one side by side: neither waits on the other
        extra = [] if which == "clean" else ["--async-save", "--crash-at-epoch", "3", "--crash-rank", "1"]
        return run_dlaunch("run", EXAMPLE, "--ranks", "2", "--output-dir", tmp_path / which, "--", *TRAIN, *extra,
                           cwd=tmp_path, timeout=240)

    launched = side_by_side(launch, "clean", "runs")
    clean, crashed = launched["clean"], launched["runs"]
    assert clean.returncode == 0, clean.stderr
    clean_run = latest_run(tmp_path / "clean")
    assert crashed.returncode == 137, crashed.stderr
    crashed_run = latest_run(out)
    assert summary(crashed_run)["root_cause"]["rank"] == 1
    assert summary(crashed_run)["newest_complete_checkpoint"] == "resnet-2_4"
    assert processes_of_run(crashed_run.name) == []
    assert not list((crashed_run / "rank_000" / "ckpt").glob("resnet-3_*.pt"))

    resumed = run_dlaunch("run", EXAMPLE, "--ranks", "2", "--output-dir", out, "--resume", "--", *TRAIN,
                          "--async-save", cwd=tmp_path, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from resnet-2_4" in resumed.stderr
    resumed_run = latest_run(out)
    assert summary(resumed_run)["resumed_from"] == {"run_dir": str(crashed_run), "step": "resnet-2_4"}
    assert "continuing at epoch 3" in (resumed_run / "rank_001" / "output.log").read_text()
    for rank in range(2):
        assert_same_weights(final_weights(resumed_run, rank), final_weights(clean_run, rank))
    # the comparison can fail: one more epoch of training moves the weights far beyond the tolerance
    moved = final_weights(clean_run, 0)["fc.weight"] - epoch_weights(clean_run, 0, 2)["fc.weight"]
    assert moved.abs().max() > 1e-3


def test_max_restarts_resumes_from_the_runs_own_checkpoint(tmp_path):
    out = tmp_path / "runs"
    result = run_dlaunch("run", EXAMPLE, "--ranks", "2", "--output-dir", out, "--max-restarts", "1", "--",
                         *TRAIN, "--crash-at-epoch", "2", "--crash-rank", "1", cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    run_dir = latest_run(out)
    assert "resuming" not in result.stderr.split("restarting")[0]
    log = (run_dir / "rank_001" / "output.1.log").read_text()
    assert "continuing at epoch 2" in log
    assert [a["exit_code"] for a in summary(run_dir)["attempts"]] == [137, 0]


def test_resume_skips_incomplete_steps_and_refuses_other_world_sizes(tmp_path):
    out = tmp_path / "runs"
    first = run_dlaunch("run", EXAMPLE, "--ranks", "2", "--output-dir", out, "--", "--epochs", "1", "--samples",
                        "256", cwd=tmp_path, timeout=240)
    assert first.returncode == 0, first.stderr
    run_dir = latest_run(out)
    partial = run_dir / "rank_000" / "ckpt" / "resnet-9_4.pt"
    partial.write_bytes((run_dir / "rank_000" / "ckpt" / "resnet-1_4.pt").read_bytes())
    dry = run_dlaunch("run", EXAMPLE, "--ranks", "2", "--output-dir", out, "--resume", run_dir, "--dry-run",
                      cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "skipping resnet-9_4: incomplete, ranks 1 have no checkpoint of it" in dry.stderr
    assert "DLAUNCH_RESUME_FROM=" + str(run_dir / "rank_001" / "ckpt" / "resnet-1_4.pt") in dry.stdout
    assert "DLAUNCH_RESUME_STEP=1_4" in dry.stdout
    other = run_dlaunch("run", EXAMPLE, "--ranks", "4", "--output-dir", out, "--resume", run_dir, cwd=tmp_path)
    assert other.returncode == 2 and "reshard" in other.stderr
    empty = tmp_path / "empty_run"
    (empty / "rank_000").mkdir(parents=True)
    (empty / "rank_001").mkdir()
    none = run_dlaunch("run", EXAMPLE, "--ranks", "2", "--output-dir", out, "--resume", empty, cwd=tmp_path)
    assert none.returncode == 2 and "nothing to resume" in none.stderr

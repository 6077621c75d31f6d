"""Real third-party PyTorch clients run unchanged: each under torchrun and under ``dlaunch run --ranks 2``.

Each test runs one client under both launchers, each from its own launch directory prepared the same way, and
asserts the same outcome: the exit code, the lines every rank printed (values and losses where the client is
deterministic), and the files that land in the launch directory (none in dlaunch's rank directories). The
clients are pytorch/examples' DDP tutorial (with its fault tolerance: a rank killed, every rank restarted from
``snapshot.pt``) and minGPT, accelerate's own test script from the installed package, and a Lightning DDP job.
The copies under ``tests/clients/`` say at their top what was changed for CPU and gloo.
"""

import importlib.util
import os
import random
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from tests.launching import ROOT, dlaunch_argv, latest_run, side_by_side, summary

CLIENTS = ROOT / "tests" / "clients"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
RUNS = "dlaunch_runs"   # dlaunch's default --output-dir, inside the launch directory


@dataclass
class Outcome:
    returncode: int
    directory: Path     # the launch directory
    output: list[str]   # every line of every rank, every attempt (per-rank logs, so lines never interleave)
    console: str

    def lines(self, pattern: str) -> Counter:
        return Counter(line for line in self.output if re.search(pattern, line))

    def files(self) -> set[str]:
        """What the client left in the launch directory, dlaunch's run directories aside."""
        return {str(p.relative_to(self.directory)) for p in self.directory.rglob("*")
                if p.is_file() and p.relative_to(self.directory).parts[0] != RUNS}


def read_logs(paths) -> list[str]:
    return [line for path in sorted(paths) for line in path.read_text(errors="replace").splitlines()]


def launch_both(tmp_path: Path, script, *args, env=None, max_restarts=0, prepare=None) -> dict[str, Outcome]:
    """``script args`` under torchrun and under dlaunch (no flags but ``--ranks 2`` and the restarts), side by side
    (each picks its own free port), each in a fresh launch directory that ``prepare`` fills the same way."""
    common = {**{k: v for k, v in os.environ.items() if not k.startswith("DLAUNCH_")},   # no flags in disguise
              "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
    # torch 2.13's torchrun cannot restart workers while they share its rendezvous store (a torch bug)
    envs = {"torchrun": {**common, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}, "dlaunch": common}
    restarts = ["--max-restarts", str(max_restarts)] if max_restarts else []
    logs = tmp_path / "torchrun_logs"   # torchrun's per-rank logs, outside its launch directory
    argv = {"torchrun": [*TORCHRUN, "--log-dir", logs, "--redirects", "3", *restarts, script, *args],
            "dlaunch": dlaunch_argv("run", script, "--ranks", "2", *restarts, "--", *args)}

    def launch(name: str) -> Outcome:
        directory = tmp_path / name
        directory.mkdir()
        if prepare:
            prepare(directory)
        done = subprocess.run(list(map(str, argv[name])), cwd=directory, env=envs[name], capture_output=True,
                              text=True, timeout=240)
        ranks_logs = (logs.rglob("std*.log") if name == "torchrun"
                      else (directory / RUNS / "latest").glob("rank_*/output*.log"))
        return Outcome(done.returncode, directory, read_logs(ranks_logs), done.stdout + done.stderr)

    return side_by_side(launch, *argv)


def assert_same_files(outcomes: dict[str, Outcome]) -> set[str]:
    """The same files in both launch directories, and none of them in dlaunch's run directory."""
    theirs, ours = outcomes["torchrun"], outcomes["dlaunch"]
    assert ours.files() == theirs.files()
    names = {Path(f).name for f in theirs.files()}
    misplaced = [p for p in (ours.directory / RUNS).rglob("*") if p.name in names]
    assert not misplaced, f"the client's files landed in dlaunch's run directory: {misplaced}"
    return theirs.files()


def assert_both_succeeded(outcomes: dict[str, Outcome]) -> None:
    for name, outcome in outcomes.items():
        assert outcome.returncode == 0, f"{name} exited {outcome.returncode}:\n{outcome.console[-3000:]}"


def test_accelerate_test_script_from_the_installed_package(tmp_path):
    script = Path(importlib.util.find_spec("accelerate").origin).parent / "test_utils" / "scripts" / "test_script.py"
    outcomes = launch_both(tmp_path, script, env={"ACCELERATE_USE_CPU": "true"})
    assert_both_succeeded(outcomes)
    pattern = r"^\*\*.+\*\*$|^Distributed environment|^Num processes|^Process index|^Training yielded"
    theirs, ours = outcomes["torchrun"].lines(pattern), outcomes["dlaunch"].lines(pattern)
    assert theirs["**Test reinstantiated state**"] == 1, "accelerate's test script stopped before its last test"
    assert theirs["Num processes: 2"] == 2 and theirs["Process index: 1"] == 1
    assert ours == theirs
    assert_same_files(outcomes)


def test_ddp_tutorial_resumes_from_its_snapshot_after_a_rank_is_killed(tmp_path):
    epochs, killed_after = 3, 1
    outcomes = launch_both(tmp_path, CLIENTS / "ddp_tutorial" / "multigpu_torchrun.py", epochs, 1,
                           env={"KILL_RANK1_AFTER_EPOCH": str(killed_after)}, max_restarts=1)
    assert_both_succeeded(outcomes)
    pattern = r"^\[GPU\d\] Epoch|^Loading snapshot|^Resuming training|snapshot saved"
    theirs, ours = outcomes["torchrun"].lines(pattern), outcomes["dlaunch"].lines(pattern)
    assert theirs[f"Resuming training from snapshot at Epoch {killed_after}"] == 2, "both ranks resume"
    assert theirs[f"[GPU1] Epoch {killed_after} | Batchsize: 32 | Steps: 32"] == 2, "run before the kill and after"
    assert ours == theirs
    assert assert_same_files(outcomes) == {"snapshot.pt"}
    for outcome in outcomes.values():
        snapshot = torch.load(outcome.directory / "snapshot.pt", map_location="cpu")
        assert snapshot["EPOCHS_RUN"] == epochs - 1
    first_attempt = summary(latest_run(outcomes["dlaunch"].directory / RUNS))["attempts"][0]
    assert (first_attempt["root_cause"]["rank"], first_attempt["root_cause"]["signal"]) == (1, "SIGKILL")


def write_text(directory: Path) -> None:
    """minGPT's data/input.txt: a few thousand characters of text, the same every time."""
    words = "the of to and a in is it you that he was for on are with as his they be at one have this".split()
    rng = random.Random(0)
    lines = [" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(30)]
    (directory / "data").mkdir()
    (directory / "data" / "input.txt").write_text("\n".join(lines) + "\n")


def test_mingpt_trains_with_hydra_and_saves_its_snapshot_where_it_was_launched(tmp_path):
    outcomes = launch_both(tmp_path, CLIENTS / "mingpt" / "main.py", prepare=write_text)
    assert_both_succeeded(outcomes)
    pattern = r"^\[RANK\d\] Epoch .* Loss|^Data has|^number of parameters|^Snapshot saved"
    theirs, ours = outcomes["torchrun"].lines(pattern), outcomes["dlaunch"].lines(pattern)
    assert sum(1 for line in theirs if line.startswith("[RANK1] Epoch 4 | Iter 0 | Eval Loss")) == 1
    assert ours == theirs, "same seed, same data: the same losses under both launchers"
    files = assert_same_files(outcomes)
    assert {"gpt_snapshot.pt", ".hydra/config.yaml", "data/input.txt"} <= files
    for outcome in outcomes.values():
        assert torch.load(outcome.directory / "gpt_snapshot.pt", map_location="cpu")["finished_epoch"] == 4


def test_lightning_ddp_on_cpu(tmp_path):
    outcomes = launch_both(tmp_path, CLIENTS / "lightning" / "train_ddp.py")
    assert_both_succeeded(outcomes)
    theirs, ours = outcomes["torchrun"].lines("final train_loss"), outcomes["dlaunch"].lines("final train_loss")
    assert sorted(line.split(":")[0] for line in theirs.elements()) == ["rank 0 of 2", "rank 1 of 2"]
    assert ours == theirs
    files = assert_same_files(outcomes)
    assert "lightning_logs/version_0/checkpoints/epoch=2-step=24.ckpt" in files, sorted(files)

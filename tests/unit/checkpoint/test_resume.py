"""checkpoint.resume: a job Slurm requeued runs as ``<run id>.requeueK`` (``slurm_requeue``): issue 38, item 24."""

import pytest

from launcher.checkpoint.resume import slurm_requeue
from launcher.cli import main
from launcher.rundir.paths import check_run_id


@pytest.mark.parametrize("length", [1, 111, 120, 128])
def test_every_requeued_attempt_of_a_long_run_id_has_a_valid_id_of_its_own(tmp_path, length):
    run_id = "r" * length
    names = set()
    for restarts in (1, 2, 10**8):
        name, _, why = slurm_requeue(run_id, str(tmp_path), 2, {"SLURM_JOB_ID": "7",
                                                              "SLURM_RESTART_COUNT": str(restarts)})
        assert check_run_id(name) == name and name.endswith(f".requeue{restarts}"), name
        names.add(name)
        if restarts == 2:   # attempt 2 looks for attempt 1's directory under the name attempt 1 got
            first, _, _ = slurm_requeue(run_id, str(tmp_path), 2, {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1"})
            assert f"{tmp_path / first} or the attempts before it" in why, why
    assert len(names) == 3


def test_two_long_ids_with_one_head_get_two_requeued_names(tmp_path):
    env = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1"}
    assert slurm_requeue("a" * 127 + "x", str(tmp_path), 1, env)[0] != slurm_requeue("a" * 127 + "y", str(tmp_path),
                                                                                      1, env)[0]


def test_a_requeued_dry_run_with_a_128_character_run_id_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert main(["run", "train.py", "--ranks", "1", "--run-id", "j" * 128, "--dry-run"]) == 0, capsys.readouterr().err
    assert ".requeue1" in capsys.readouterr().out

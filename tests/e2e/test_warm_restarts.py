"""Warm restarts (--warm-restarts torch, execute/local/warm.py) with a real torch gloo job: the restarted ranks
run in interpreters started (and torch imported) before the failure, once the first attempt's imports settled,
and train to the same losses as a cold restart of the same job. The standbys import what the first attempt's
ranks imported (not only the user's list), at the lowest CPU priority in a thread of their own, under the next
attempt's environment; the script itself runs at the rank's priority and sees its attempt's restart count."""

import json
import os

import pytest

from tests.launching import ROOT, run_dlaunch

pytest.importorskip("torch", reason="the warm-restart tests run a real torch job (the torch extra)")
TRAIN = str(ROOT / "tests" / "programs" / "warm_train.py")
PROGRAMS = str(ROOT / "tests" / "programs")


def job(tmp_path, name, *flags, env=None):
    result = run_dlaunch("run", TRAIN, "--ranks", "2", "--max-restarts", "1", "--output-dir", tmp_path / "runs",
                         "--run-id", name, *flags, cwd=tmp_path, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "runs" / name
    return run_dir, json.loads((run_dir / "rank_000" / "losses.1.json").read_text())


def proc(run_dir, rank, attempt):
    return json.loads((run_dir / f"rank_{rank:03d}" / f"proc.{attempt}.json").read_text())


def test_a_warm_restart_runs_in_a_ready_interpreter_and_trains_to_the_same_losses(tmp_path):
    cold_dir, cold = job(tmp_path, "cold")
    warm_dir, warm = job(tmp_path, "warm", "--warm-restarts", "torch", env={"WARM_WAIT": "1"})
    assert warm == cold and len(cold) == 4   # resumed from step 6, steps 7-10
    failed_at = float((warm_dir / "rank_001" / "failed_at").read_text())
    for rank in (0, 1):
        first, second = proc(warm_dir, rank, 0), proc(warm_dir, rank, 1)
        assert first["began"] < second["created"] < failed_at, (first, second, failed_at)   # a standby, started
        assert second["pid"] != first["pid"] and second["name"] == "__main__" and second["argv"] == [TRAIN]
        cold_second = proc(cold_dir, rank, 1)
        assert cold_second["created"] > float((cold_dir / "rank_001" / "failed_at").read_text())
        assert not cold_second["preloaded"]   # a cold start imports only what its script imports
    assert "standby" not in (warm_dir / "rank_000" / "output.1.log").read_text()


def test_the_standby_imports_what_the_first_attempt_imported_under_the_next_attempts_environment(tmp_path):
    own = tmp_path / "own"   # the user's sitecustomize: Python runs it at the standby's start
    own.mkdir()
    (own / "sitecustomize.py").write_text(
        "import os\nrank_dir = os.environ.get('DLAUNCH_RANK_DIR')\nif rank_dir:\n"
        "    with open(os.path.join(rank_dir, f'site.{os.getpid()}'), 'w') as fh:\n"
        "        fh.write(os.environ['TORCHELASTIC_RESTART_COUNT'])\n")
    run_dir, _ = job(tmp_path, "warm", "--warm-restarts", "torch,warmprobe",
                     env={"WARM_WAIT": "1", "WARM_PROBE": "1", "PYTHONPATH": f"{ROOT}:{PROGRAMS}:{own}"})
    for rank in (0, 1):
        rank_dir = run_dir / f"rank_{rank:03d}"
        listed = (rank_dir / "modules.txt").read_text().split()
        assert "colorsys" in listed and "torch" in listed and "warmprobe" not in listed   # not the tests' own
        first, second = proc(run_dir, rank, 0), proc(run_dir, rank, 1)
        assert not first["preloaded"] and second["preloaded"]   # the standby imported colorsys: nobody listed it
        assert first["restart_count"] == "0" and second["restart_count"] == "1"
        assert (rank_dir / f"site.{second['pid']}").read_text() == "1"   # its sitecustomize saw the next attempt
        probe = json.loads((rank_dir / f"probe.{second['pid']}.json").read_text())
        group = probe.pop("autogroup")
        assert probe == {"nice": 19, "main": False, "restart_count": "1"}   # imported ahead, at the lowest priority
        if group is not None and os.geteuid() == 0:   # the session's share too, set back for the script
            assert (group, second["autogroup"]) == ("19", "0")
        assert second["nice"] == first["nice"] == 0   # the script runs at the rank's own priority
        if os.geteuid() == 0:   # threads the imports started were set back (a user without CAP_SYS_NICE cannot)
            assert second["threads_nice"] == ["0"], second
        assert (rank_dir / "modules.1.txt").exists() is False   # the last attempt lists nothing: no standbys follow

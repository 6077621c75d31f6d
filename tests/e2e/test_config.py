"""Layered settings: flags > DLAUNCH_<OPTION> env > YAML files > defaults, for every option type."""

import json
import os
import sys

import pytest

from tests.launching import RANK_PROGRAM, run_dlaunch

# (option key in YAML, flag value, env value, file value, expected value of each layer, default)


def test_config_drives_a_real_run_and_config_show_explains_it(tmp_path):
    conf = tmp_path / "job.yaml"
    conf.write_text(f"script: {RANK_PROGRAM}\nranks: 2\nconsole: all\noutput-dir: {tmp_path / 'out'}\n"
                    "args: [--print, '2']\n")
    result = run_dlaunch("run", "--config", conf, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[rank1]: rank 1 line 1" in result.stdout
    shown = run_dlaunch("config", "show", "--config", conf, "--json", cwd=tmp_path, env={"DLAUNCH_RANKS": "4"})
    settings = json.loads(shown.stdout)
    assert settings["ranks"] == {"value": 4, "source": "$DLAUNCH_RANKS"}
    assert settings["console"] == {"value": "all", "source": f"{conf}:3"}
    assert settings["grace_period"] == {"value": 10.0, "source": "default"}


def test_bad_config_exits_2_with_one_line(tmp_path):
    conf = tmp_path / "bad.yaml"
    conf.write_text("ranks: 2\nbogus: 1\n")
    result = run_dlaunch("run", RANK_PROGRAM, "--config", conf, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"{conf}:2: unknown option 'bogus'" in result.stderr


def test_missing_script_is_a_usage_error(tmp_path):
    result = run_dlaunch("run", "--ranks", "2", cwd=tmp_path)
    assert result.returncode == 2 and "no SCRIPT given" in result.stderr


@pytest.mark.parametrize("name", ["single_host_8dev", "two_hosts_16dev_ssh", "atlas_a2_relaxed", "slurm_job",
                                  "fault_tolerant"])
def test_bundled_configs_are_valid(name):
    from tests.conftest import ROOT

    command = "cluster" if name in ("two_hosts_16dev_ssh", "slurm_job") else "run"
    result = run_dlaunch("config", "show", "--for", command, "--config", ROOT / "configs" / f"{name}.yaml",
                         "--json", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    settings = json.loads(result.stdout)
    assert settings["script"]["value"] == "examples/train_cifar.py"


def test_bundled_single_host_config_plans_8_ranks():
    from tests.conftest import ROOT

    result = run_dlaunch("run", "--config", ROOT / "configs" / "single_host_8dev.yaml", "--dry-run", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "8 rank(s)" in result.stdout and "--epochs 2" in result.stdout


def test_every_broken_config_file_is_reported_one_line_each(tmp_path):
    (tmp_path / "a.yaml").write_text("ranks: [1\n")
    (tmp_path / "b.yaml").write_text("ranks: {\n")
    for command in (["config", "show"], ["run", RANK_PROGRAM]):
        result = run_dlaunch(*command, "--config", "a.yaml", "--config", "b.yaml", cwd=tmp_path)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 2 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith("dlaunch: error: a.yaml:2: not valid YAML")
        assert lines[1].startswith("dlaunch: error: b.yaml:2: not valid YAML")


def test_config_show_says_which_command_takes_a_clashing_option(tmp_path):
    both = run_dlaunch("config", "show", "x.py", "--ranks", "2", "--rank-start", "3", cwd=tmp_path)
    assert both.returncode == 2
    assert "--rank-start is an option of dlaunch cluster, not run" in both.stderr
    assert "--ranks is an option of dlaunch run, not cluster" in both.stderr
    assert "usage: dlaunch config show" in both.stderr and "usage: dlaunch run" not in both.stderr
    named = run_dlaunch("config", "show", "run", "x.py", "--ranks", "2", "--rank-start", "3", cwd=tmp_path)
    assert named.returncode == 2
    assert "error: config show --for run: --rank-start is an option of dlaunch cluster, not run" in named.stderr
    cluster = run_dlaunch("config", "show", "cluster", "x.py", "--rank-start", "3", "--json", cwd=tmp_path)
    assert cluster.returncode == 0, cluster.stderr
    assert json.loads(cluster.stdout)["rank_start"] == {"value": 3, "source": "command line"}


def test_fault_tolerant_says_in_one_line_what_it_turned_on(tmp_path):
    # issue 49: the one switch, from the real CLI: the dry run's second line names each setting it turned on,
    # what it left off and why (no device tool on this PATH), and what was given; a flag wins over the switch
    env = {"PATH": os.path.dirname(sys.executable)}
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--fault-tolerant", "--dry-run", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[1]
    assert line.startswith("--fault-tolerant: turned on --max-restarts 10 (exit 93 after 3 failed in a row without a "
                           "new checkpoint), --survivor-window 10 (for the ranks that ask for a notice; ends once each "
                           "saved or exited), ")
    assert "--hang-learn (at most 1800 s)" in line
    assert "left off --health-gate (no npu-smi, nvidia-smi or hccn_tool here)" in line
    assert "restarts allowed: 10" in result.stdout and "given 10 s to save" in result.stdout
    conf = tmp_path / "ft.yaml"
    conf.write_text("fault-tolerant: true\nmax-restarts: 1\n")
    given = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--config", conf, "--no-hang-learn", "--dry-run",
                        cwd=tmp_path, env={**env, "DLAUNCH_SURVIVOR_WINDOW": "0"})
    assert given.returncode == 0, given.stderr
    line = given.stdout.splitlines()[1]
    assert line.endswith("as given: --max-restarts 1, --survivor-window 0, --no-hang-learn"), line
    assert "restarts allowed: 1" in given.stdout and "hang check:    off" in given.stdout
    plain = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--dry-run", cwd=tmp_path, env=env)
    assert "fault-tolerant" not in plain.stdout and "restarts allowed: 0" in plain.stdout
    # the run itself says it first, before its run directory
    run = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--fault-tolerant", "--warm-restarts", "none", cwd=tmp_path,
                      env=env)
    assert run.returncode == 0, run.stderr
    first, second = run.stderr.splitlines()[:2]
    assert first.startswith("dlaunch: --fault-tolerant: turned on --max-restarts 10") and second.startswith(
        "dlaunch: run directory "), run.stderr
    assert first.endswith("as given: --warm-restarts none")

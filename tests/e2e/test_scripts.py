"""Launch scripts: ``dlaunch script`` templates with hostile values, and the seeds' scripts/run*.sh.

The proof that a rendered script runs exactly the intended command is a recording:
a stand-in dlaunch (DLAUNCH) records its argv, a probe training script records its
argv and environment, and both are compared byte for byte with what was asked for,
with shell metacharacters in every value and no ``$(touch pwned)`` ever run.
"""

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys

import pytest

from launcher import __version__
from tests.launching import RANK_PROGRAM, ROOT, free_port, run_dlaunch, side_by_side, write_rank_table

SCRIPTS = ROOT / "scripts"
# Every shell metacharacter we could think of; the empty string and a newline too.
HOSTILE = ["plain", "two words", "it's", 'say "hi"', "$(touch pwned)", "`touch pwned`", "${HOME}", "$HOME",
           "line1\nline2", "tab\there", "*", "~", "", "--", "-- not an option", "--label", "back\\slash",
           "semi; touch pwned", "a|b&c>d<e", "!bang", "#hash", "é ünïcode", "'", '"', "\\"]
HOSTILE_ENV = "a b'c\"d $(touch pwned) `touch pwned` \\ ${HOME}\nsecond line"
HOSTILE_DIR = "odd 'dir' \"dq\" $(touch pwned) `touch pwned` #x"
PROBE = """\
import json, os, sys
with open(os.path.join(os.environ["DLAUNCH_RANK_DIR"], "probe.json"), "w") as fh:
    json.dump({"argv": sys.argv, "env": dict(os.environ)}, fh)
"""
RECORDER = """\
import json, os, sys
with open(os.environ["RECORD_TO"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
"""
FAKE_SRUN = """\
import json, os, subprocess, sys
args = sys.argv[1:]
options = []
while args and args[0].startswith("--"):
    options.append(args.pop(0))
with open(os.environ["SRUN_LOG"], "w") as fh:
    json.dump(options, fh)
nodes = int(os.environ["SLURM_JOB_NUM_NODES"])
procs = [subprocess.Popen(args, env={**os.environ, "SLURM_NODEID": str(n), "SLURM_PROCID": str(n)})
         for n in range(nodes)]
sys.exit(max(p.wait() for p in procs))
"""


def two_server_table(path, ids=("127.0.0.2", "127.0.0.3")):
    """Two servers of two devices: valid under --profile a2, light enough to launch twice side by side."""
    return write_rank_table(path, ids, 2)


@pytest.fixture
def probe(tmp_path):
    folder = tmp_path / HOSTILE_DIR
    folder.mkdir()
    path = folder / "probe.py"
    path.write_text(PROBE)
    return path


@pytest.fixture(autouse=True)
def scripts_named(tmp_path):
    """The training scripts these tests name (a script that does not exist is refused: test_a_missing_script...)."""
    for name in ("train.py", "t.py"):
        (tmp_path / name).write_text("")


@pytest.fixture(autouse=True)
def no_memory_root(monkeypatch):
    """The suite's DLAUNCH_MEMORY_ROOT (tests/conftest.py) is an option from the environment like any other, which a
    generated script records; these tests compare scripts with exactly the options they gave."""
    monkeypatch.delenv("DLAUNCH_MEMORY_ROOT", raising=False)


@pytest.fixture
def table(tmp_path):
    return two_server_table(tmp_path / "rt4.json")


def render(tmp_path, template, *args, env=None, output="script.sh"):
    result = run_dlaunch("script", template, "-o", output, *args, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    return tmp_path / output


def run_script(path, *args, cwd, env=None, timeout=120):
    return subprocess.run(["bash", str(path), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def no_side_effects(root):
    assert sorted(str(p) for p in root.rglob("pwned*")) == []


def probes(run_dir, ranks):
    return [json.loads((run_dir / f"rank_{r:03d}" / "probe.json").read_text()) for r in ranks]


# What each template is rendered with, and the dlaunch argv that must come out of it.
def hostile_case(template, tmp_path, probe, table):
    out = f"runs {HOSTILE_DIR}"
    common = ["--env", f"HOSTILE={HOSTILE_ENV}", "--output-dir", out, "--console", "none"]
    if template == "run.sh":
        args = [probe, "--ranks", "2", *common, "--run-id", "r1"]
        expected = ["run", str(probe), "--output-dir", str(tmp_path / out), "--run-id", "r1", "--console", "none",
                    "--env", f"HOSTILE={HOSTILE_ENV}", "--ranks", "2"]
    else:
        args = [probe, "--rank-table", table, "--profile", "a2", *common]
        expected = ["cluster", str(probe), "--rank-table", str(table), "--profile", "a2", "--output-dir",
                    str(tmp_path / out),
                    "--console", "none", "--env", f"HOSTILE={HOSTILE_ENV}"]
        if template == "run_cluster.sh":
            args += ["--run-id", "job"]
            expected[8:8] = ["--run-id", "job"]
        else:
            args += ["--job-name", "name with 'quotes' \"and\" #hash $(touch pwned)", "--time", "5"]
            expected += ["--run-id", "slurm-4242"]
    return args, expected, out


TEMPLATES = ["run.sh", "run_cluster.sh", "slurm"]


def fake_slurm(tmp_path, nodes=2):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text(f"#!{sys.executable}\n" + FAKE_SRUN)
    srun.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": str(nodes),
            "SRUN_LOG": str(tmp_path / "srun.json")}


@pytest.mark.parametrize("template", TEMPLATES)
def test_rendered_script_runs_exactly_the_intended_dlaunch_argv(tmp_path, probe, table, template):
    args, expected, _ = hostile_case(template, tmp_path, probe, table)
    script = render(tmp_path, template, *args, "--", *HOSTILE)
    record = tmp_path / "argv.jsonl"
    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER)
    env = {"DLAUNCH": f"{sys.executable} {recorder} first-word", "RECORD_TO": str(record),
           **(fake_slurm(tmp_path) if template == "slurm" else {})}
    copies = 2 if template == "slurm" else 1  # the fake srun runs it once per node

    def recorded():
        lines = [json.loads(line) for line in record.read_text().splitlines()]
        record.unlink()
        return lines

    result = run_script(script, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert recorded() == [["first-word", *expected, "--", *HOSTILE]] * copies
    # the script's own arguments: more options (they win, coming last), then more script arguments
    result = run_script(script, "--console", "all", "--", "more $(touch pwned)", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert recorded() == [["first-word", *expected, "--console", "all", "--", *HOSTILE,
                           "more $(touch pwned)"]] * copies
    if template == "slurm":
        assert json.loads((tmp_path / "srun.json").read_text()) == ["--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    no_side_effects(tmp_path)


@pytest.mark.parametrize("template", TEMPLATES)
def test_rendered_script_passes_bash_n_and_shellcheck_and_is_executable(tmp_path, probe, table, template):
    args, _, _ = hostile_case(template, tmp_path, probe, table)
    more = ["--sbatch=--gres=npu:8", "--signal", "USR1@120", "--requeue"] if template == "slurm" else ["--cwd=rank"]
    script = render(tmp_path, template, *args, *more, "--", *HOSTILE)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    check = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    no_side_effects(tmp_path)


def test_run_sh_launches_ranks_that_see_exactly_the_hostile_values(tmp_path, probe, table):
    args, _, out = hostile_case("run.sh", tmp_path, probe, table)
    script = render(tmp_path, "run.sh", *args, "--", *HOSTILE)
    result = run_script(script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for rank, seen in enumerate(probes(tmp_path / out / "r1", range(2))):
        assert seen["argv"] == [str(probe), *HOSTILE]
        assert seen["env"]["HOSTILE"] == HOSTILE_ENV
        assert (seen["env"]["RANK"], seen["env"]["WORLD_SIZE"]) == (str(rank), "2")
    no_side_effects(tmp_path)


def test_run_cluster_sh_twice_side_by_side_makes_one_job(tmp_path, probe, table):
    args, _, out = hostile_case("run_cluster.sh", tmp_path, probe, table)
    script = render(tmp_path, "run_cluster.sh", *args, "--", *HOSTILE)
    def host(start):
        return run_script(script, "--rank-start", str(start), "--", "host extra", cwd=tmp_path)

    results = side_by_side(host, 0, 2)
    for result in results.values():
        assert result.returncode == 0, result.stderr
    for rank, seen in enumerate(probes(tmp_path / out / "job", range(4))):
        assert seen["argv"] == [str(probe), *HOSTILE, "host extra"]
        env = seen["env"]
        assert (env["RANK"], env["GROUP_RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["HOSTILE"]) == (
            str(rank), str(rank // 2), str(rank % 2), "4", HOSTILE_ENV)
    no_side_effects(tmp_path)


def test_slurm_script_under_a_fake_srun_runs_one_share_per_node(tmp_path, probe, table):
    args, _, out = hostile_case("slurm", tmp_path, probe, table)
    script = render(tmp_path, "slurm", *args, "--", *HOSTILE)
    text = script.read_text()
    assert "#SBATCH --job-name='name with '\"'\"'quotes'\"'\"' \"and\" #hash $(touch pwned)'\n" in text
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=5\n#SBATCH --exclusive\n" in text
    result = run_script(script, cwd=tmp_path, env=fake_slurm(tmp_path))
    assert result.returncode == 0, result.stderr
    secrets = set()
    for rank, seen in enumerate(probes(tmp_path / out / "slurm-4242", range(4))):
        env = seen["env"]
        assert seen["argv"] == [str(probe), *HOSTILE]
        assert (env["RANK"], env["GROUP_RANK"], env["SLURM_NODEID"]) == (str(rank), str(rank // 2), str(rank // 2))
        secrets.add(env.get("DLAUNCH_JOB_SECRET"))
    # one random secret for the job's link, the same on every node (docs/multi-host.md)
    assert len(secrets) == 1 and re.fullmatch(r"[0-9a-f]{32}", secrets.pop() or "")
    wrong = run_script(script, cwd=tmp_path, env=fake_slurm(tmp_path, nodes=1))
    assert wrong.returncode == 2 and "needs 2 node(s)" in wrong.stderr
    no_side_effects(tmp_path)


def test_slurm_script_for_a_job_without_a_rank_table(tmp_path, probe):
    """GPU users name a job as torchrun does (cluster --nnodes): under srun node K is SLURM_NODEID and the job
    meets at the batch script's node (the first of the allocation)."""
    port = free_port("127.0.0.1")
    script = render(tmp_path, "slurm", probe, "--nnodes", "2", "--nproc-per-node", "2", "--master-port", port,
                    "--console", "none")
    text = script.read_text()
    assert "#SBATCH --nodes=2\n" in text and '  --master-addr "$(hostname)" \\\n' in text
    # the fake srun runs both nodes on this machine: their meeting address is loopback here
    result = run_script(script, "--master-addr", "127.0.0.1", cwd=tmp_path, env=fake_slurm(tmp_path))
    assert result.returncode == 0, result.stderr
    for rank, seen in enumerate(probes(tmp_path / "dlaunch_runs" / "slurm-4242", range(4))):
        assert (seen["env"]["RANK"], seen["env"]["GROUP_RANK"], seen["env"]["WORLD_SIZE"]) == (
            str(rank), str(rank // 2), "4")


def test_header_records_version_settings_and_sources(tmp_path, table):
    (tmp_path / "c.yaml").write_text("profile: a2\ngrace_period: 3\n")
    script = render(tmp_path, "slurm", RANK_PROGRAM, "--rank-table", table, "--config", "c.yaml",
                    "--partition", "p1", "--", "--dump-env", env={"DLAUNCH_CONSOLE": "all"})
    header = script.read_text().split("\nset -euo pipefail")[0]
    assert f"# Generated by dlaunch {__version__} from its \"slurm\" template" in header
    assert f"#   dlaunch script slurm {RANK_PROGRAM} --rank-table {table} --profile a2 --console all " \
           f"--grace-period 3.0 --output script.sh --partition p1 --force -- --dump-env\n" in header
    # the line renders it again, over the file that exists
    body = script.read_text().split("\nset -euo pipefail")[1]
    remake = shlex.split(next(line for line in header.splitlines() if line.startswith("#   dlaunch script "))[1:])
    again = run_dlaunch(*remake[1:], cwd=tmp_path, env={"DLAUNCH_CONSOLE": "all"})
    assert again.returncode == 0, again.stderr
    assert f"#   {shlex.join(remake)}\n" in script.read_text()   # the same line to render it again
    assert script.read_text().split("\nset -euo pipefail")[1] == body
    for line in ("#   --profile a2  (c.yaml:1)", "#   --grace-period 3.0  (c.yaml:2)",
                 "#   --console all  ($DLAUNCH_CONSOLE)", "#   --partition p1  (command line)",
                 "#   -- --dump-env  (command line)"):
        assert line in header
    # values from the config file and the environment are flags in the script: it needs neither
    assert "  --profile a2 \\\n  --console all \\\n  --grace-period 3.0 \\\n" in script.read_text()


def test_a_newline_in_a_value_never_ends_a_header_comment(tmp_path):
    script = render(tmp_path, "run.sh", RANK_PROGRAM, "--env", "X=a\ntouch pwned #", "--", "b\nc")
    for line in script.read_text().split("\nset -euo pipefail")[0].splitlines():
        assert line.startswith("#"), line
    assert "X=a\\ntouch pwned #" in script.read_text()


def test_layered_settings_are_baked_in(tmp_path, probe):
    (tmp_path / "c.yaml").write_text("ranks: 2\nrun_id: baked\n")
    script = render(tmp_path, "run.sh", probe, "--config", "c.yaml", env={"DLAUNCH_CONSOLE": "none"})
    (tmp_path / "c.yaml").unlink()
    result = run_script(script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(probes(tmp_path / "dlaunch_runs" / "baked", range(2))) == 2
    assert "rank 0" not in result.stdout  # --console none came from the environment at rendering time


def test_template_dir_overrides_and_extends_the_shipped_templates(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "run.sh.j2").write_text('{% extends "shipped/run.sh.j2" %}\n'
                                    '{% block setup %}\necho "site setup for {{ command }}" >&2\n{% endblock %}\n')
    (mine / "bare.j2").write_text("{{ command }} {{ launch_options | qjoin }} -- {{ script_args | qjoin }}\n")
    script = render(tmp_path, "run.sh", RANK_PROGRAM, "--template-dir", mine, "--ranks", "2", "--", "a b")
    text = script.read_text()
    assert 'echo "site setup for run" >&2\n' in text and text.startswith("#!/usr/bin/env bash\n")
    assert f"  {RANK_PROGRAM} \\\n  --ranks 2 \\\n" in text
    bare = render(tmp_path, "bare", "train.py", "--template-dir", mine, "--launch", "cluster", "--rank-table",
                  "later.json", "--", "a b", output="bare.txt")
    assert bare.read_text() == f"cluster {tmp_path / 'train.py'} --rank-table {tmp_path / 'later.json'} -- 'a b'\n"
    unknown = run_dlaunch("script", "nope", "train.py", "--template-dir", mine, "-o", "x", cwd=tmp_path)
    assert unknown.returncode == 2 and "no template 'nope'; there are: bare, run.sh, run_cluster.sh, slurm" \
        in unknown.stderr
    partial = run_dlaunch("script", "_header", "train.py", "-o", "x", cwd=tmp_path)
    assert partial.returncode == 2 and "no template '_header'" in partial.stderr


def test_slurm_signal_and_requeue_become_sbatch_lines(tmp_path, table):
    lines = [line for line in render(tmp_path, "slurm", "t.py", "--rank-table", table, "--profile", "a2",
                                     "--signal", "B:sigusr2@0", "--requeue").read_text().splitlines()
             if line.startswith("#SBATCH")]
    assert lines[-2:] == ["#SBATCH --signal=B:USR2@0", "#SBATCH --requeue"]
    plain = render(tmp_path, "slurm", "t.py", "--rank-table", table, "--profile", "a2", "--signal", "USR1@120",
                   output="plain.sh").read_text()
    assert "\n#SBATCH --signal=B:USR1@120\n" in plain and "--requeue" not in plain


def test_template_and_script_may_come_after_options(tmp_path, table):
    result = run_dlaunch("script", "--profile", "a2", "-o", "-", "slurm", "--rank-table", table, "t.py", "--",
                         "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"  {tmp_path / 't.py'} \\\n  --rank-table " in result.stdout and "-- x " in result.stdout


def test_output_is_never_overwritten_without_force(tmp_path):
    target = tmp_path / "run.sh"
    target.write_text("precious\n")
    refused = run_dlaunch("script", "run.sh", "train.py", "-o", target, cwd=tmp_path)
    assert refused.returncode == 2 and "exists; nothing was written (--force replaces it)" in refused.stderr
    assert target.read_text() == "precious\n"
    forced = run_dlaunch("script", "run.sh", "train.py", "-o", target, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert target.read_text().startswith("#!/usr/bin/env bash\n") and stat.S_IMODE(target.stat().st_mode) == 0o755
    printed = run_dlaunch("script", "run.sh", "train.py", "-o", "-", cwd=tmp_path)
    assert printed.returncode == 0 and printed.stdout.startswith("#!/usr/bin/env bash\n")
    missing = run_dlaunch("script", "run.sh", "train.py", cwd=tmp_path)
    assert missing.returncode == 2 and "needs -o FILE" in missing.stderr


@pytest.mark.parametrize("args,env,message", [
    (["run.sh", "t.py", "--nodes", "2"], {}, "--nodes does not fit the run.sh template: --nodes is for the slurm"),
    (["run_cluster.sh", "t.py", "--rank-table", "rt.json", "--ranks", "2"], {}, "dlaunch cluster has no --ranks"),
    (["slurm", "t.py", "--rank-table", "rt.json", "--nodes", "2", "--rank-start", "8"], {}, "SLURM_NODEID"),
    (["slurm", "t.py", "--rank-table", "rt.json"], {}, "give --nodes"),
    (["slurm", "t.py", "--rank-table", "rt4.json", "--profile", "a2", "--nodes", "3"], {}, "has 2 server(s)"),
    (["slurm", "t.py", "--rank-table", "rt4.json"], {}, "breaks rule R1"),
    (["slurm", "t.py", "--rank-table", "rt.json", "--nodes", "1", "--job-name", "a\nb"], {}, "#SBATCH line"),
    (["slurm", "t.py", "--nodes", "1"], {}, "needs --rank-table"),
    (["slurm", "t.py", "--nnodes", "2", "--nodes", "3"], {}, "--nodes 3 but --nnodes is 2"),
    (["slurm", "t.py", "--nnodes", "2", "--node-rank", "1"], {}, "each node's index is its SLURM_NODEID"),
    *((["slurm", "t.py", "--rank-table", "rt.json", "--nodes", "1", "--signal", bad], {},
       f"argument --signal: expected SIG@SECONDS, a signal name and whole seconds before the time limit (at most "
       f"65535) such as USR1@120, not {bad!r}")
      for bad in ("USR1", "FOO@120", "USR1@2m", "USR1@-5", "USR1@70000", "@120", "USR1@1.5", "B:USR1@ 9", "")),
    (["run_cluster.sh", "t.py", "--rank-table", "rt.json", "--signal", "USR1@120"], {},
     "--signal does not fit the run_cluster.sh template: --signal is for the slurm template"),
    (["run.sh", "t.py", "--requeue"], {}, "--requeue does not fit the run.sh template: --requeue is for the slurm"),
    (["run.sh"], {}, "no SCRIPT given"),
    (["run.sh", "t.py", "--template-dir", "nowhere"], {}, "is not a directory"),
    (["run.sh", "t.py", "--launch", "cluster"], {}, "runs dlaunch run, not cluster"),
])
def test_bad_requests_exit_2_with_a_reason(tmp_path, table, args, env, message):
    result = run_dlaunch("script", *args, "-o", "out.sh", cwd=tmp_path, env=env)
    assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
    assert message in result.stderr
    assert not (tmp_path / "out.sh").exists()


def test_options_from_lower_layers_that_do_not_fit_are_ignored_with_a_note(tmp_path, table):
    env = {"DLAUNCH_RESUME": "runs/x", "DLAUNCH_RANK_START": "2"}
    result = run_dlaunch("script", "slurm", "t.py", "--rank-table", table, "--profile", "a2", "-o", "-",
                         cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "--resume" not in result.stdout and "--rank-start" not in result.stdout
    assert "ignored --resume (from $DLAUNCH_RESUME): dlaunch cluster has no --resume" in result.stderr
    assert "ignored --rank-start (from $DLAUNCH_RANK_START): under Slurm each node's share comes from " \
           "SLURM_NODEID" in result.stderr


def test_scriptgen_imports_no_jinja2_until_it_renders():
    code = "import sys, launcher.scripts.render; sys.exit('jinja2' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


# ----------------------------------------------------------------------------- the seeds' scripts

def seeds_env(**more):
    return {"DLAUNCH": f"{sys.executable} -m launcher", "DLAUNCH_TRAIN_SCRIPT": RANK_PROGRAM, **more}


def test_seeds_run_sh_reproduces_the_per_device_log_layout(tmp_path):
    first = run_script(SCRIPTS / "run.sh", "data", "2", "--", "--dump-env", "--print", "2", cwd=tmp_path,
                       env=seeds_env())
    assert first.returncode == 0, first.stderr
    assert "training success" in first.stdout
    run_dir = (tmp_path / "device0").resolve().parent
    for i in range(2):
        device = tmp_path / f"device{i}"
        assert device.is_symlink() and os.readlink(device) == f"dlaunch_runs/{run_dir.name}/rank_00{i}"
        assert os.readlink(device / f"train.log{i}") == "output.log"
        assert (device / f"train.log{i}").read_text() == (device / "output.log").read_text()
        assert f"rank {i} done" in (device / f"train.log{i}").read_text()
        assert f"RANK_ID={i}\n" in (device / f"env{i}.log").read_text()
        env = json.loads((device / "env.json").read_text())
        assert (env["DATA_PATH"], env["DEVICE_ID"], env["RANK_SIZE"]) == (str(tmp_path / "data"), str(i), "2")
    # again, with a real device1 directory in the way: it is left alone, the links move to the new run
    (tmp_path / "device1").unlink()
    (tmp_path / "device1").mkdir()
    (tmp_path / "device1" / "keep.txt").write_text("mine")
    second = run_script(SCRIPTS / "run.sh", "data", "2", "--console", "all", "--", "--fail-rank", "1",
                        cwd=tmp_path, env=seeds_env())
    assert second.returncode == 3, second.stderr
    assert "training failed (dlaunch exit code 3)" in second.stdout
    assert "device1 is not a symlink" in second.stderr
    assert (tmp_path / "device1" / "keep.txt").read_text() == "mine"
    new_run = (tmp_path / "device0").resolve().parent
    assert new_run != run_dir and (run_dir / "rank_000" / "train.log0").exists()
    assert "fails now" in (new_run / "rank_001" / "train.log1").read_text()


def fake_cifar(directory, train_records=64, test_records=16):
    """A tiny CIFAR-10 binary set: data_batch_1.bin and test_batch.bin only, as the synthetic set the demo
    prints holds (records of 1 label byte + 3072 pixel bytes)."""
    import random

    directory.mkdir(parents=True)
    rng = random.Random(0)
    for name, count in (("data_batch_1.bin", train_records), ("test_batch.bin", test_records)):
        (directory / name).write_bytes(b"".join(bytes([i % 10]) + rng.randbytes(3072) for i in range(count)))
    return directory


def test_seeds_run_sh_trains_on_the_data_directory_the_demo_prints_and_its_parent(tmp_path):
    pytest.importorskip("torch")
    batches = fake_cifar(tmp_path / "cache" / "cifar-10-batches-bin")
    for data in (batches, batches.parent):   # one rank each: what is tested is the data directory, not DDP
        result = run_script(SCRIPTS / "run.sh", str(data), "1", "--", "--epochs", "1", "--batch-size", "8",
                            "--width", "4", "--threads", "1", cwd=tmp_path, timeout=240,
                            env={"DLAUNCH": f"{sys.executable} -m launcher", "XDG_CACHE_HOME": str(tmp_path)})
        assert result.returncode == 0, result.stdout + result.stderr
        assert "no CIFAR-10 binary data" not in result.stdout + result.stderr
        log = (tmp_path / "device0" / "train.log0").read_text()
        assert f"data: {batches}" in log and "training finished" in log


def test_seeds_run_sh_usage(tmp_path):
    shown = run_script(SCRIPTS / "run.sh", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and "bash run.sh DATA_PATH RANK_SIZE" in shown.stdout
    assert "dlaunch run" in shown.stdout and "device$i" in shown.stdout
    assert run_script(SCRIPTS / "run.sh", "data", cwd=tmp_path).returncode == 2
    bad = run_script(SCRIPTS / "run.sh", "data", "eight", cwd=tmp_path, env=seeds_env())
    assert bad.returncode == 2 and "RANK_SIZE must be a number" in bad.stderr


def test_seeds_run_cluster_sh_two_hosts_side_by_side(tmp_path, table):
    def host(start):
        return run_script(SCRIPTS / "run_cluster.sh", "/data", table, "4", str(start), "--profile", "a2",
                                    "--run-id", "job", "--", "--dump-env", cwd=tmp_path, env=seeds_env())

    results = side_by_side(host, 0, 2)
    for result in results.values():
        assert result.returncode == 0, result.stderr
        assert "training success" in result.stdout
    for rank in range(4):
        device = tmp_path / f"device_{rank}"
        assert os.readlink(device) == f"dlaunch_runs/job/rank_00{rank}"
        assert os.readlink(device / f"train{rank}.log") == "output.log"
        env = json.loads((device / "env.json").read_text())
        assert (env["RANK_ID"], env["GROUP_RANK"], env["RANK_SIZE"], env["DATA_PATH"]) == (
            str(rank), str(rank // 2), "4", "/data")


def test_seeds_run_cluster_sh_checks_rank_size_against_the_table(tmp_path, table):
    result = run_script(SCRIPTS / "run_cluster.sh", "/data", table, "16", "0", cwd=tmp_path, env=seeds_env())
    assert result.returncode == 2 and f"RANK_SIZE is 16 but {table} has 4 devices" in result.stderr
    assert not (tmp_path / "dlaunch_runs").exists() and not list(tmp_path.glob("device_*"))
    shown = run_script(SCRIPTS / "run_cluster.sh", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and "RANK_TABLE_FILE RANK_SIZE RANK_START" in shown.stdout
    assert "dlaunch cluster" in shown.stdout


def test_seeds_scripts_delete_nothing_and_pass_shellcheck():
    for name in ("run.sh", "run_cluster.sh", "_seeds.sh"):
        text = (SCRIPTS / name).read_text()
        code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        assert not any(word in ("rm", "rmdir") for line in code for word in line.split()), name
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    check = subprocess.run(["shellcheck", "-x", "scripts/run.sh", "scripts/run_cluster.sh", "scripts/_seeds.sh"],
                           cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout

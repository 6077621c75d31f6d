"""Which run directory a launch of several hosts uses (issue 38, items 1 and 8).

A torchrun line with a fixed --rdzv-id is an everyday line: launched again, it gets a directory of its own
(job7, then job7.1) and every node of one launch the same one, while TORCHELASTIC_RUN_ID stays the id torchrun
would give (job7, on every node). Hosts started with no id in common (one dlaunch per node, as an operator's
pods) meet in one directory named by the master's address and port, so ``status`` sees every host.
"""

import json
import subprocess

from tests.launching import dlaunch_argv, dlaunch_env, free_port, run_dlaunch

SCRIPT = ("import os, json; print(json.dumps({'id': os.environ['TORCHELASTIC_RUN_ID'], "
          "'dir': os.environ['DLAUNCH_RUN_DIR']}))")


def launch_nodes(tmp_path, flags):
    procs = [subprocess.Popen(dlaunch_argv(*flags(index)), cwd=tmp_path, env=dlaunch_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for index in (0, 1)]
    outs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in outs]
    return [json.loads(next(line.split(": ", 1)[1] for line in out.splitlines() if '"id"' in line)) for out, _ in outs]


def test_a_torchrun_line_with_a_fixed_rdzv_id_launched_twice_gets_a_directory_per_launch(tmp_path):
    (tmp_path / "t.py").write_text(SCRIPT + "\n")
    port = free_port("127.0.0.2")

    def line(index):
        return ("torchrun", "--nnodes", "2", "--node-rank", str(index), "--nproc-per-node", "1", "--master-addr",
                "127.0.0.2", "--master-port", str(port), "--rdzv-id", "job7", "t.py")

    first, second = launch_nodes(tmp_path, line), launch_nodes(tmp_path, line)
    runs = tmp_path / "dlaunch_runs"
    assert [seen["dir"] for seen in first] == [str(runs / "job7")] * 2
    assert [seen["dir"] for seen in second] == [str(runs / "job7.1")] * 2
    assert {seen["id"] for seen in first + second} == {"job7"}   # as torchrun gives every node


def test_hosts_with_no_id_in_common_meet_in_one_run_directory_that_status_reads_whole(tmp_path):
    (tmp_path / "t.py").write_text(SCRIPT + "\n")
    port = free_port("127.0.0.2")

    def line(index):
        return ("cluster", "t.py", "--nnodes", "2", "--node-rank", str(index), "--nproc-per-node", "1",
                "--master-addr", "127.0.0.2", "--master-port", str(port), "--console", "all")

    seen = launch_nodes(tmp_path, line)
    run_dir = tmp_path / "dlaunch_runs" / f"job-127.0.0.2-{port}"
    assert [s["dir"] for s in seen] == [str(run_dir)] * 2
    status = run_dlaunch("status", run_dir, cwd=tmp_path)
    assert "succeeded, exit code 0; 2 rank(s) on 2 host(s)" in status.stdout, status.stdout
    assert "never reported" not in status.stdout


def test_a_host_whose_ranks_are_not_on_the_console_says_so_in_its_first_line(tmp_path):
    """Worker pods and hosts show only global rank 0 by default: ``kubectl logs`` of pod 1 says why it shows no
    training output and where it is (issue 38, item 9)."""
    (tmp_path / "t.py").write_text("print('training')\n")
    port = free_port("127.0.0.2")
    procs = [subprocess.Popen(dlaunch_argv("cluster", "t.py", "--nnodes", "2", "--node-rank", str(index),
                                           "--nproc-per-node", "1", "--master-addr", "127.0.0.2", "--master-port",
                                           str(port)), cwd=tmp_path, env=dlaunch_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for index in (0, 1)]
    (out0, err0), (out1, err1) = [proc.communicate(timeout=60) for proc in procs]
    assert "training" in out0 and "not on the console" not in err0
    first = next(line for line in err1.splitlines() if "run directory" in line)
    assert "this host's 1 rank(s) are not on the console (--console 0: --console all" in first, err1
    assert "training" not in out1

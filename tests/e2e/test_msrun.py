"""dlaunch msrun's flag mapping, without MindSpore: msrun's defaults, one node and several, refusals.

``translate`` is checked directly; what the plan makes of it (the env each rank and the scheduler get) through
``--dry-run`` of the real CLI.  The real launch with MindSpore is in test_ms_scheduler.py.
"""

import re


def test_refusals_on_the_command_line_are_one_line_exit_2(run_cli, tmp_path):
    for argv in (["--bind_core=True", "train.py"], ["--worker_num=x", "train.py"], ["--join=maybe", "train.py"],
                 ["--worker_num=8", "--local_worker_num=4", "--node_rank=0", "--master_addr=192.0.2.1",
                  "train.py"]):
        result = run_cli("msrun", *argv, cwd=tmp_path)
        assert result.returncode == 2, (argv, result.stderr)
        assert "Traceback" not in result.stderr and "error:" in result.stderr
    assert "node 0 runs MindSpore's scheduler" in result.stderr   # the last: the master is not this host
    assert not list(tmp_path.iterdir())   # nothing was written


def test_dry_run_shows_the_env_of_ranks_and_scheduler(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "rt.json").write_text("{}")
    result = run_cli("msrun", "--worker_num=2", "--local_worker_num=2", "--master_port=9124",
                     "--cluster_time_out=-1", "--rank_table_file=rt.json", "--log_dir=-logs", "--dry-run",
                     "train.py", "--epochs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    blocks = re.split(r"\nrank \d+ \(", result.stdout)
    scheduler, ranks = blocks[0].split("MindSpore scheduler", 1)[1], blocks[1:]
    assert len(ranks) == 2
    assert "MS_ROLE=MS_SCHED" in scheduler and "MS_TOPO_TIMEOUT=-1\n" in scheduler
    assert "MS_NODE_ID" not in scheduler and "RANK_ID=0" in scheduler
    for rank, block in enumerate(ranks):
        for line in ("MS_ROLE=MS_WORKER", f"MS_NODE_ID={rank}", f"RANK_ID={rank}", "MS_WORKER_NUM=2",
                     "MS_SCHED_HOST=127.0.0.1", "MS_SCHED_PORT=9124", "MS_TOPO_TIMEOUT=-1", f"DEVICE_ID={rank}",
                     f"RANK_TABLE_FILE={tmp_path / 'rt.json'}"):
            # a rank after rank 0 shows what differs from rank 0's environment (a compact --dry-run)
            assert f"    {line}\n" in block or ("as rank 0's" in block and f"    {line}\n" in ranks[0]), (line, block)
        assert "train.py --epochs 1" in block
    assert f"run directory: {tmp_path / '-logs'}/" in result.stdout   # a value with a leading "-" stays a value
    assert not (tmp_path / "-logs").exists()   # a dry run writes nothing


def test_dry_run_of_two_nodes_starts_the_scheduler_with_node_0_only(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("")
    shown = {}
    for node in (0, 1):
        result = run_cli("msrun", "--worker_num=4", "--local_worker_num=2", f"--node_rank={node}",
                         "--master_port=9125", "--run-id=job", "--dry-run", "train.py", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        shown[node] = result.stdout
    assert "MindSpore scheduler" in shown[0] and "MindSpore scheduler" not in shown[1]
    assert "rank 0 (local 0" in shown[0] and "rank 1 (local 1" in shown[0]
    assert "rank 2 (local 0" in shown[1] and "rank 3 (local 1" in shown[1]
    assert "    MS_NODE_ID=3\n" in shown[1] and "    MS_WORKER_NUM=4\n" in shown[1]
    assert shown[0].startswith("run job: ") and shown[1].startswith("run job: ")   # one run id for the job

"""dlaunch cluster per host (the seeds' run_cluster.sh): share selection, shared run directories, a 16-rank job."""

import json

import pytest

from launcher.errors import UsageError
from launcher.table import model as ranktable
from launcher.table.share import master_address, select_server
from tests.launching import (
    RANK_PROGRAM,
    free_port,
    processes_of_run,
    records,
    run_dlaunch,
    side_by_side,
    summary,
    write_rank_table,
)


def two_host_table(path, ids=("127.0.0.2", "127.0.0.3")):
    return write_rank_table(path, ids, 8)


@pytest.fixture
def table_file(tmp_path):
    return two_host_table(tmp_path / "rt16.json")


def test_two_per_host_launchers_form_one_16_rank_job(tmp_path, table_file):
    """The seeds' two 8-NPU hosts, one dlaunch cluster each, sharing one run directory: every rank's contract.
    (Their all-reduce across hosts is test_cluster_ssh's and test_a_job_without_a_rank_table_...'s: 16 torch
    imports on 2 cores cost this file 20 s for nothing more.)"""
    out = tmp_path / "shared_nfs"

    def host(start):
        return run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table_file, "--rank-start", start,
                           "--run-id", "job16", "--master-port", "29611", "--output-dir", out, "--",
                           "--dump-env", cwd=tmp_path, timeout=240)

    results = side_by_side(host, 0, 8)
    assert results[0].returncode == 0, results[0].stderr
    assert results[8].returncode == 0, results[8].stderr
    run_dir = out / "job16"
    for rank in range(16):
        rank_dir = run_dir / f"rank_{rank:03d}"
        env = json.loads((rank_dir / "env.json").read_text())
        server = rank // 8
        assert {k: env[k] for k in ("RANK", "RANK_ID", "LOCAL_RANK", "DEVICE_ID", "GROUP_RANK", "GROUP_WORLD_SIZE",
                                    "LOCAL_WORLD_SIZE", "WORLD_SIZE", "RANK_SIZE", "MASTER_ADDR",
                                    "MASTER_PORT")} == {
            "RANK": str(rank), "RANK_ID": str(rank), "LOCAL_RANK": str(rank % 8), "DEVICE_ID": str(rank % 8),
            "GROUP_RANK": str(server), "GROUP_WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "8", "WORLD_SIZE": "16",
            "RANK_SIZE": "16", "MASTER_ADDR": "127.0.0.2", "MASTER_PORT": "29611"}
        assert env["RANK_TABLE_FILE"] == str(run_dir / f"rank_table.127.0.0.{server + 2}.json")
    for sid in ("127.0.0.2", "127.0.0.3"):
        host_summary = summary(run_dir, f"summary.{sid}.json")
        assert host_summary["host"] == sid and host_summary["status"] == "succeeded"
        assert host_summary["ranks_started"] > 0
        assert (run_dir / f"plan.{sid}.json").exists()
    assert processes_of_run("job16") == []


def test_same_host_twice_with_one_run_id_is_refused(tmp_path, table_file):
    args = ("cluster", RANK_PROGRAM, "--rank-table", table_file, "--rank-start", "8", "--run-id", "dup",
            "--output-dir", tmp_path / "out", "--profile", "structure")
    first = run_dlaunch(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = run_dlaunch(*args, cwd=tmp_path)
    assert second.returncode == 2 and "already has rank_008" in second.stderr


def test_defaults_master_is_rank_0_server_and_port_is_fixed(tmp_path, table_file):
    result = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table_file, "--server-id", "127.0.0.3",
                         "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "MASTER_ADDR=127.0.0.2" in result.stdout and "MASTER_PORT=29500" in result.stdout
    assert "rank 15 (local 7, device 7)" in result.stdout and "GROUP_RANK=1" in result.stdout


def test_cluster_needs_a_rank_table(tmp_path):
    result = run_dlaunch("cluster", RANK_PROGRAM, cwd=tmp_path)
    assert result.returncode == 2 and "--rank-table" in result.stderr


def test_unknown_share_lists_the_servers(tmp_path, table_file):
    result = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table_file, "--rank-start", "4", cwd=tmp_path)
    assert result.returncode == 2
    assert "127.0.0.2 (ranks 0-7), 127.0.0.3 (ranks 8-15)" in result.stderr


def load(path):
    return ranktable.load(str(path))


def test_select_server_by_id_rank_start_and_address(table_file):
    table = load(table_file)
    assert select_server(table, server_id="127.0.0.3", environ={}) == 1
    assert select_server(table, rank_start=8, environ={}) == 1
    assert select_server(table, environ={}, host_names=lambda: {"127.0.0.3", "myhost"}) == 1
    assert master_address(table) == "127.0.0.2"


def test_select_server_from_slurm_and_errors(table_file):
    table = load(table_file)
    nobody = lambda: {"elsewhere"}  # noqa: E731
    assert select_server(table, environ={"SLURM_NODEID": "1"}, host_names=nobody) == 1
    assert select_server(table, environ={"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
                         host_names=nobody) == 1
    with pytest.raises(UsageError, match="only 2 servers"):
        select_server(table, environ={"SLURM_NODEID": "5"}, host_names=nobody)
    with pytest.raises(UsageError, match="cannot tell which server"):
        select_server(table, environ={}, host_names=nobody)
    with pytest.raises(UsageError, match="not in the rank table"):
        select_server(table, server_id="10.9.9.9", environ={})


def test_this_hosts_own_address_is_found_automatically(tmp_path):
    table_file = two_host_table(tmp_path / "rt.json", ids=("127.0.0.1", "198.51.100.7"))
    result = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table_file, "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "on server 127.0.0.1 (server 1 of 2)" in result.stdout


def test_a_job_without_a_rank_table_named_as_torchrun_names_it(tmp_path):
    """cluster --nnodes 2 --node-rank K --nproc-per-node 2 --master-addr A: node K runs ranks 2K..2K+1."""

    port = free_port("127.0.0.1")

    def host(index):
        out = tmp_path / f"node{index}"
        out.mkdir()
        return out, run_dlaunch("cluster", RANK_PROGRAM, "--nnodes", "2", "--node-rank", index, "--nproc-per-node",
                                "2", "--master-addr", "127.0.0.1", "--master-port", port, "--run-id", "nodes",
                                "--", "--allreduce", cwd=out, timeout=180)
    results = side_by_side(host, 0, 1)
    for index, (out, done) in results.items():
        assert done.returncode == 0, done.stderr
        for local in range(2):
            rank = 2 * index + local
            got = records(out / "dlaunch_runs" / "nodes" / f"rank_{rank:03d}", "allreduce.jsonl")
            assert got == [{"sum": 10.0, "world": 4}]


def test_torchs_own_rank_tag_is_not_prefixed_twice(tmp_path):
    """A line torch prefixed ``[rank0]: `` itself gets the host's prefix only (docs/run.md)."""
    (tmp_path / "tag.py").write_text('print("[rank0]: Traceback (most recent call last):")\nprint("plain")\n')
    done = run_dlaunch("cluster", "--nnodes", "1", "--node-rank", "0", "--nproc-per-node", "1", "--master-addr",
                       "127.0.0.1", "tag.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "[node0][rank0]: Traceback (most recent call last):\n[node0][rank0]: plain\n" in done.stdout


@pytest.mark.parametrize("flags, message", [
    (("--node-rank", "1"), "--node-rank goes with --nnodes N"),
    (("--nnodes", "2", "--master-addr", "10.0.0.1"), "--nnodes 2 needs --node-rank K on each host (0 to 1)"),
    (("--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1"), "--node-rank 2 but --nnodes is 2"),
    (("--nnodes", "2", "--node-rank", "1"), "--nnodes 2 needs --master-addr A on every host"),
    (("--nnodes", "2", "--node-rank", "1", "--rank-table", "rt.json"), "either --rank-table FILE or --nnodes N"),
])
def test_nnodes_mistakes_are_one_line(tmp_path, flags, message):
    result = run_dlaunch("cluster", RANK_PROGRAM, *flags, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "dlaunch_runs").exists()

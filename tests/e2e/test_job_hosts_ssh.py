"""``cluster --ssh --max-restarts``: the hosts the head started agree on each attempt among themselves (execute/job).

Real sshd hosts on 127.0.0.2 and 127.0.0.3 (tests/sshd_hosts.py).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: sshd_hosts

from sshd_hosts import cluster_fixture  # noqa: E402

from tests.e2e.test_cluster_ssh import cluster_args, write_table  # noqa: E402
from tests.launching import ROOT, processes_of_run, run_dlaunch, summary, wait_until  # noqa: E402

ssh_cluster = cluster_fixture(2)


def remote_python(tmp_path):
    """sshd gives the remote launcher a bare environment: this Python, with this tree's launcher first."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_a_rank_failing_once_restarts_every_host_together_and_the_job_succeeds(ssh_cluster, tmp_path):
    out = tmp_path / "runs"
    table = write_table(tmp_path / "rt.json", 2)
    result = run_dlaunch(*cluster_args(ssh_cluster, table, out, "--max-restarts", "1", "--host-timeout", "2",
                                       "--remote-python", remote_python(tmp_path), run_id="sshrestart"),
                         "--", "--fail-rank", "3", "--fail-on-attempt", "0", "--after", "1", "--sleep", "2",
                         "--dump-env", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "rank 3 on host 127.0.0.3 exited with code 3; restarting the job on every host (restart 1 of 1)" \
        in result.stderr
    run_dir = out / "sshrestart"
    assert summary(run_dir, "summary.head.json")["status"] == "succeeded"
    for host in ("127.0.0.2", "127.0.0.3"):
        host_summary = summary(run_dir, f"summary.{host}.json")
        assert [a["exit_code"] for a in host_summary["attempts"]] == [75 if host == "127.0.0.2" else 3, 0]
        assert host_summary["job"]["status"] == "succeeded"
    import json

    counts = {json.loads((run_dir / f"rank_{r:03d}" / "env.json").read_text())["TORCHELASTIC_RESTART_COUNT"]
              for r in range(4)}
    assert counts == {"1"}
    assert wait_until(lambda: processes_of_run("sshrestart") == [], timeout=5)

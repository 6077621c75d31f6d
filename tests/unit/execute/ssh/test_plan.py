"""What ``cluster --ssh`` sends every host: here, the secret of the hosts' link, made by the head."""

import os
import re

from tests.launching import RANK_PROGRAM, write_rank_table


def ssh_plan(tmp_path, environ):
    from launcher.cli.parsers import build_parser
    from launcher.cli.request import request_from_args
    from launcher.execute.ssh.plan import make_ssh_plan
    from launcher.plan.share import head_launch

    table = write_rank_table(tmp_path / "rt.json", devices_per_host=1)
    argv = ["cluster", RANK_PROGRAM, "--rank-table", str(table), "--ssh", "--profile", "a2", "--max-restarts", "1",
            "--output-dir", str(tmp_path / "runs"), "--run-id", "wire"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        request = request_from_args(build_parser().parse_args(argv), True, environ=environ)
        return make_ssh_plan(request, *head_launch(request, environ), environ=environ)
    finally:
        os.chdir(cwd)


def test_the_head_gives_its_hosts_a_random_secret_for_their_link_or_its_own(tmp_path):
    """The hosts of an SSH job talk among themselves for restarts: a secret no stranger can derive (the table
    and run id are not secret), the same for every host, new for every launch; DLAUNCH_JOB_SECRET if set."""
    made = [{host.request["env"]["DLAUNCH_JOB_SECRET"] for host in ssh_plan(tmp_path, {}).hosts} for _ in range(2)]
    assert all(len(secrets) == 1 for secrets in made), made   # one per job
    first, second = (secrets.pop() for secrets in made)
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second
    given = ssh_plan(tmp_path, {"DLAUNCH_JOB_SECRET": "from the scheduler"})
    assert {host.request["env"]["DLAUNCH_JOB_SECRET"] for host in given.hosts} == {"from the scheduler"}

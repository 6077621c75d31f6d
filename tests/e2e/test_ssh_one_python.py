"""One Python start per SSH host: the preflight's version check is the host launcher's own first line.

The remote command checks with shell builtins what needs no Python, then execs
``python -m launcher cluster --from-head --announce``, which prints the version
and the ready mark, then waits for its request.  Tested against a real sshd host
(tests/sshd_hosts.py): a launch works; a Python without dlaunch, and a dlaunch
too old to have the host entry, are each one clear preflight line and exit 2.

The head's working directory holds a ``launcher`` link to this checkout, so the
host's Python (started there) runs the same dlaunch as the head.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from sshd_hosts import cluster_fixture

from launcher.execute.ssh.plan import remote_command
from tests.launching import RANK_PROGRAM, ROOT, run_dlaunch, write_rank_table

HOST = "127.0.0.2"
ssh_host = cluster_fixture(1)


def test_the_remote_command_starts_python_once():
    words = shlex.split(remote_command("/opt/py/bin/python3", "/work dir", "script", "/work dir/train.py"))
    assert words.count("/opt/py/bin/python3") == 2   # `command -v` (a shell builtin) and the one exec
    assert words[words.index("exec") + 1:] == ["/opt/py/bin/python3", "-m", "launcher", "cluster", "--from-head",
                                               "--announce"]
    assert "--version" not in words


def _launch(ssh_host, tmp_path: Path, *extra: str):
    (tmp_path / "launcher").symlink_to(ROOT / "launcher")   # the host's Python starts here: this checkout
    table = write_rank_table(tmp_path / "rt.json", (HOST,), 1)
    return run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table, "--ssh", "--ssh-config",
                       ssh_host.ssh_config, "--output-dir", tmp_path / "runs", "--profile", "structure", *extra,
                       cwd=tmp_path)


def test_a_host_starts_with_one_python(ssh_host, tmp_path):
    result = _launch(ssh_host, tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_python_without_dlaunch_is_named(ssh_host, tmp_path):
    bare = Path(sys.base_prefix) / "bin" / "python3"   # the interpreter under the venv: no dlaunch installed
    wrapper = tmp_path / "bare-python"
    wrapper.write_text(f"#!/bin/sh\ncd /\nexec {shlex.quote(str(bare))} \"$@\"\n")   # away from the link, too
    wrapper.chmod(0o755)
    result = _launch(ssh_host, tmp_path, "--remote-python", str(wrapper))
    assert result.returncode == 2, result.stderr
    assert f"host {HOST} " in result.stderr and f"cannot run {wrapper} -m launcher there" in result.stderr


def test_an_older_dlaunch_on_a_host_is_a_version_mismatch(ssh_host, tmp_path):
    old = tmp_path / "old"
    (old / "launcher").mkdir(parents=True)
    (old / "launcher" / "__main__.py").write_text(   # a dlaunch whose cluster --from-head takes no --announce
        "import sys\nsys.exit('dlaunch cluster: error: unrecognized arguments: ' + ' '.join(sys.argv[3:]))\n")
    (old / "launcher" / "__init__.py").write_text("")
    wrapper = tmp_path / "old-python"
    wrapper.write_text(f"#!/bin/sh\ncd {shlex.quote(str(old))}\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    result = _launch(ssh_host, tmp_path, "--remote-python", str(wrapper))
    assert result.returncode == 2, result.stderr
    assert "version mismatch: an older dlaunch there" in result.stderr, result.stderr

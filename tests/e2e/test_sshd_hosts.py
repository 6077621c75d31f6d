"""Tests of the real-sshd fixture itself (tests/sshd_hosts.py).

If these fail, every multi-host test built on the fixture is meaningless, so
each property a launcher test relies on is checked here: hosts are told apart
by address, both SSH clients the project uses get in with strict host-key
checking, unknown host keys are refused, and a stopped host is really gone.
"""

import shlex
import socket
import subprocess
import sys

import paramiko
import psutil
import pytest
from sshd_hosts import cluster_fixture, require_sshd, start_cluster

ssh_cluster = cluster_fixture(2)


def _paramiko_client(cluster, i, known_hosts):
    host = cluster.hosts[i]
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(hostname=host.address, port=host.port, key_filename=str(cluster.client_key),
                   look_for_keys=False, allow_agent=False,
                   timeout=5, banner_timeout=5, auth_timeout=5)
    return client


def _run(argv, timeout=10):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_hosts_are_distinct_loopback_addresses_and_not_port_22(ssh_cluster):
    addresses = [h.address for h in ssh_cluster.hosts]
    assert addresses == ["127.0.0.2", "127.0.0.3"]
    assert [h.name for h in ssh_cluster.hosts] == ["host1", "host2"]
    assert all(h.port != 22 for h in ssh_cluster.hosts)


@pytest.mark.parametrize("i", [0, 1])
def test_openssh_client_lands_on_the_hosts_own_address(ssh_cluster, i):
    result = _run(ssh_cluster.ssh_argv(i, "echo $SSH_CONNECTION"))
    assert result.returncode == 0, result.stderr + ssh_cluster.log_tail(i)
    # SSH_CONNECTION = "client_ip client_port server_ip server_port"
    _, _, server_ip, server_port = result.stdout.split()
    assert server_ip == ssh_cluster.hosts[i].address
    assert int(server_port) == ssh_cluster.hosts[i].port


def test_openssh_client_refuses_unknown_host_key(ssh_cluster):
    argv = ssh_cluster.ssh_argv(0, "true")
    # A command-line -o wins over the -F config file.
    argv[1:1] = ["-o", f"UserKnownHostsFile={ssh_cluster.known_hosts_without(0)}"]
    result = _run(argv)
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr


@pytest.mark.parametrize("i", [0, 1])
def test_paramiko_runs_the_test_python_remotely(ssh_cluster, i):
    client = _paramiko_client(ssh_cluster, i, ssh_cluster.known_hosts)
    try:
        # Absolute interpreter path: the remote environment has no venv on PATH.
        command = shlex.join([sys.executable, "-c",
                              "import os; print(os.environ['SSH_CONNECTION'].split()[2])"])
        _, stdout, stderr = client.exec_command(command, timeout=10)
        output = stdout.read().decode()
        assert stdout.channel.recv_exit_status() == 0, stderr.read().decode()
        assert output.strip() == ssh_cluster.hosts[i].address
    finally:
        client.close()


def test_paramiko_refuses_host_missing_from_known_hosts(ssh_cluster):
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        _paramiko_client(ssh_cluster, 0, ssh_cluster.known_hosts_without(0))
    # The same file still lets host 1 in: only host 0's key was removed.
    _paramiko_client(ssh_cluster, 1, ssh_cluster.known_hosts_without(0)).close()


def test_stop_host_makes_only_that_host_unreachable_and_ends_its_sessions(tmp_path):
    require_sshd()
    with start_cluster(tmp_path, 2) as cluster:
        # An open session on host 1 must end when the host goes down.
        session = subprocess.Popen(cluster.ssh_argv(1, "echo ready; exec sleep 60"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True)
        try:
            assert session.stdout.readline() == "ready\n"
            cluster.stop_host(1)
            session.wait(timeout=5)
        finally:
            session.kill()
            session.wait()
        assert session.returncode == 255  # connection closed by the remote side

        down, up = cluster.hosts[1], cluster.hosts[0]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((down.address, down.port), timeout=2)
        socket.create_connection((up.address, up.port), timeout=2).close()
        assert _run(cluster.ssh_argv(0, "true")).returncode == 0

    assert all(h.process.poll() is not None for h in cluster.hosts)


def test_start_fails_clearly_and_cleans_up_when_a_port_is_taken(tmp_path):
    require_sshd()
    with socket.socket() as blocker:
        # A listener on host1's port also answers the TCP readiness probe.
        blocker.bind(("127.0.0.2", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(RuntimeError, match="(?s)host1.*Address already in use"):
            start_cluster(tmp_path, 2, base_port=port)

    def ours(proc):
        return any(str(tmp_path) in arg for arg in proc.info["cmdline"] or [])

    leftovers = [p for p in psutil.process_iter(["cmdline", "status"])
                 if ours(p) and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert leftovers == []  # host2 had started; start_cluster must have stopped it

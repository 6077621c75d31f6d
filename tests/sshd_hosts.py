"""Real OpenSSH servers on loopback addresses, one per simulated host.

Multi-host launcher tests need several "machines" that are reached over real
SSH, with real host-key checking, without leaving this box. Linux routes the
whole of 127.0.0.0/8 to the loopback device, so every address in it is usable
without configuration: host ``i`` is an ``sshd`` bound only to ``127.0.0.{2+i}``.
The launcher can then tell hosts apart by address (``$SSH_CONNECTION``), and a
test can stop one host to make it unreachable while the others keep running.

Usage::

    from sshd_hosts import cluster_fixture, start_cluster

    ssh_cluster = cluster_fixture(2)          # module-scoped fixture

    def test_something(ssh_cluster):
        host = ssh_cluster.hosts[0]           # host.name, host.address, host.port
        subprocess.run(ssh_cluster.ssh_argv(0, "true"), check=True)

or, with explicit cleanup::

    with start_cluster(tmp_path, 3) as cluster:
        ...

Remote environment: sshd gives remote commands a minimal environment (its
default PATH, no virtualenv, none of the test's variables; we also set
``PermitUserEnvironment no``). Tests must therefore run absolute paths
remotely, e.g. ``shlex.join([sys.executable, "-m", "launcher.agent"])``, and
pass anything else they need on the command line. All hosts are this machine,
so ``sys.executable`` exists on every one of them.

The remote argv is joined by the ssh client and parsed again by the remote
user's shell, so quote it (``shlex.join``) unless shell expansion is wanted.

Requirements: ``/usr/sbin/sshd`` and ``ssh-keygen`` (Debian: openssh-server),
and root or the right to start sshd; sshd runs as the current user, which is
the ``User`` every client connects as. The privilege-separation directory
``/run/sshd`` is created if missing because sshd refuses to start without it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

SSHD = Path("/usr/sbin/sshd")  # absolute: sshd re-executes itself and refuses a relative path
PRIVSEP_DIR = Path("/run/sshd")
START_TIMEOUT = 10.0  # seconds for every sshd of a cluster to accept TCP connections
STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL
FIRST_ADDRESS_OCTET = 2  # 127.0.0.1 is left to everything else on the machine


@dataclass
class SshHost:
    """One simulated host: an sshd listening only on ``address:port``."""

    name: str
    address: str
    port: int
    host_key_pub_line: str  # "ssh-ed25519 AAAA..." as it appears in known_hosts
    process: subprocess.Popen
    log_path: Path

    def is_running(self) -> bool:
        return self.process.poll() is None


class SshCluster:
    """Running sshd hosts plus the client-side files needed to reach them.

    Build one with :func:`start_cluster`; always call :meth:`stop` (or use it as
    a context manager) so that no sshd outlives the test.
    """

    def __init__(self, tmpdir: Path, hosts: list[SshHost], client_key: Path,
                 known_hosts: Path, ssh_config: Path) -> None:
        self.tmpdir = tmpdir
        self.hosts = hosts
        self.client_key = client_key
        self.known_hosts = known_hosts
        self.ssh_config = ssh_config

    def __enter__(self) -> SshCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop every host (idempotent)."""
        for i in range(len(self.hosts)):
            self.stop_host(i)

    def stop_host(self, i: int) -> None:
        """Make host ``i`` unreachable: stop its sshd and its open sessions.

        Killing only the listening sshd would leave established sessions (and
        the commands they run) alive, because sshd puts each connection in its
        own session; a host that "went down" must drop those too.
        """
        _stop_process_tree(self.hosts[i].process)

    def known_hosts_without(self, i: int) -> Path:
        """Write a known_hosts file that lacks host ``i``'s key and return its path.

        For tests that a client refuses a host whose key it does not know.
        """
        host = self.hosts[i]
        path = self.tmpdir / f"known_hosts_without_{host.name}"
        path.write_text("".join(
            _known_hosts_line(h) for h in self.hosts if h is not host))
        return path

    def ssh_argv(self, i: int, *remote_argv: str) -> list[str]:
        """argv running ``remote_argv`` on host ``i`` with the OpenSSH client.

        The remote words are joined and parsed by the remote shell: quote them
        (``shlex.join``) unless shell expansion is wanted.
        """
        ssh = shutil.which("ssh") or "ssh"
        return [ssh, "-F", str(self.ssh_config), "-o", "BatchMode=yes",
                self.hosts[i].name, "--", *remote_argv]

    def log_tail(self, i: int, lines: int = 20) -> str:
        """Last lines of host ``i``'s sshd log, for failure messages."""
        return _tail(self.hosts[i].log_path, lines)


def require_sshd() -> None:
    """Skip the calling test if the OpenSSH server is not installed."""
    if not SSHD.exists():
        pytest.skip(f"{SSHD} not found: install openssh-server to run real-SSH tests")


def cluster_fixture(count: int, *, scope: str = "module"):
    """Return a pytest fixture yielding a started cluster of ``count`` hosts.

    Assign it to a module attribute; the attribute name becomes the fixture
    name (``ssh_cluster = cluster_fixture(2)``). The cluster is stopped at
    teardown even when the test fails.
    """

    @pytest.fixture(scope=scope)
    def _cluster(tmp_path_factory: pytest.TempPathFactory):
        require_sshd()
        with start_cluster(tmp_path_factory.mktemp("sshd"), count) as cluster:
            yield cluster

    return _cluster


def start_cluster(tmpdir: Path, count: int, *, base_port: int | None = None) -> SshCluster:
    """Generate keys and configs in ``tmpdir`` and start ``count`` sshd hosts.

    Host ``i`` is named ``host{i+1}`` and listens on ``127.0.0.{i+2}``, on
    ``base_port + i`` if given, else on a port the kernel reports free on that
    address. Returns once every port accepts TCP connections; raises
    ``RuntimeError`` with the sshd log tail if one does not within
    ``START_TIMEOUT`` seconds. Hosts already started are stopped on failure.
    """
    if not 1 <= count <= 255 - FIRST_ADDRESS_OCTET:
        raise ValueError(f"count must be between 1 and {255 - FIRST_ADDRESS_OCTET}, got {count}")
    if base_port is not None and not 1024 <= base_port <= 65535 - count:
        raise ValueError(f"base_port must leave {count} unprivileged ports, got {base_port}")
    tmpdir = Path(tmpdir).resolve()
    tmpdir.mkdir(parents=True, exist_ok=True)
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    user = pwd.getpwuid(os.getuid()).pw_name  # $USER may be unset, e.g. in CI

    client_key = tmpdir / "client_ed25519"
    _keygen(client_key, "dlaunch-test-client")
    authorized_keys = tmpdir / "authorized_keys"
    shutil.copyfile(client_key.with_suffix(".pub"), authorized_keys)

    hosts: list[SshHost] = []
    cluster = SshCluster(tmpdir, hosts, client_key,
                         tmpdir / "known_hosts", tmpdir / "ssh_config")
    try:
        for i in range(count):
            name = f"host{i + 1}"
            address = f"127.0.0.{FIRST_ADDRESS_OCTET + i}"
            port = base_port + i if base_port is not None else _free_port(address)
            host_key = tmpdir / f"{name}_host_ed25519"
            _keygen(host_key, name)
            pub_type, pub_blob = host_key.with_suffix(".pub").read_text().split()[:2]
            config = tmpdir / f"sshd_config_{name}"
            config.write_text(_sshd_config(address, port, host_key, authorized_keys,
                                           tmpdir / f"sshd_{name}.pid"))
            log_path = tmpdir / f"sshd_{name}.log"
            hosts.append(SshHost(name, address, port, f"{pub_type} {pub_blob}",
                                 _start_sshd(config, log_path), log_path))
        cluster.known_hosts.write_text("".join(_known_hosts_line(h) for h in hosts))
        cluster.ssh_config.write_text("".join(
            _ssh_config_entry(h, user, client_key, cluster.known_hosts) for h in hosts))
        _wait_until_listening(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _sshd_config(address: str, port: int, host_key: Path, authorized_keys: Path,
                 pid_file: Path) -> str:
    # The file is complete on its own: no Include of /etc/ssh/sshd_config.d,
    # so the machine's own sshd settings cannot change test behaviour.
    return "\n".join([
        f"ListenAddress {address}",
        f"Port {port}",
        f'HostKey "{host_key}"',
        f'AuthorizedKeysFile "{authorized_keys}"',
        f'PidFile "{pid_file}"',
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # Tests run as root; key-only login for root is sshd's default, stated
        # here because the whole fixture depends on it.
        "PermitRootLogin prohibit-password",
        # The generated files live in a pytest tmpdir whose owner/modes sshd
        # would otherwise reject.
        "StrictModes no",
        # PAM would need a system-wide service setup and is not what we test.
        "UsePAM no",
        "PermitUserEnvironment no",
        # Launchers open many sessions/connections at once (one per rank).
        "MaxSessions 50",
        "MaxStartups 100",
        "UseDNS no",
        "PrintMotd no",
        "X11Forwarding no",
        "LogLevel VERBOSE",
        "",
    ])


def _ssh_config_entry(host: SshHost, user: str, client_key: Path, known_hosts: Path) -> str:
    return "\n".join([
        # Keyed by name and by address: rank tables name servers by address.
        f"Host {host.name} {host.address}",
        f"    HostName {host.address}",
        f"    Port {host.port}",
        f"    User {user}",
        f'    IdentityFile "{client_key}"',
        "    IdentitiesOnly yes",  # never offer a developer's agent or ~/.ssh keys
        f'    UserKnownHostsFile "{known_hosts}"',
        "    GlobalKnownHostsFile /dev/null",
        "    StrictHostKeyChecking yes",
        "    UpdateHostKeys no",  # the client must never rewrite our known_hosts
        "    ConnectTimeout 5",
        "",
    ])


def _known_hosts_line(host: SshHost) -> str:
    # Non-22 ports are looked up as "[address]:port" by OpenSSH and paramiko.
    return f"[{host.address}]:{host.port} {host.host_key_pub_line}\n"


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                    "-f", str(path)], check=True, stdin=subprocess.DEVNULL)


def _free_port(address: str) -> int:
    """A port the kernel says is free on ``address`` (released before sshd binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def _start_sshd(config: Path, log_path: Path) -> subprocess.Popen:
    # -E sends sshd's log to the file; early errors that precede it (bad
    # options) go to stderr, which is appended to the same file. Start empty:
    # readiness is read from this log, and a reused tmpdir must not fool it.
    log_path.write_bytes(b"")
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [str(SSHD), "-D", "-f", str(config), "-E", str(log_path)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C meant for pytest must not race our teardown
        )


def _wait_until_listening(cluster: SshCluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    for i, host in enumerate(cluster.hosts):
        while True:
            if not host.is_running():
                raise RuntimeError(
                    f"sshd for {host.name} ({host.address}:{host.port}) exited with "
                    f"code {host.process.returncode}; log tail:\n{cluster.log_tail(i)}")
            # A bare TCP probe can be answered by whatever else holds the port
            # (sshd then fails to bind and exits a moment later), so also wait
            # for sshd's own word that it bound this address.
            listening = f"Server listening on {host.address} port {host.port}." in _tail(
                host.log_path, 50)
            try:
                socket.create_connection((host.address, host.port), timeout=0.5).close()
                if listening:
                    break
                problem = "no 'Server listening' line in its log"
            except OSError as exc:
                problem = str(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"sshd for {host.name} did not accept connections on "
                    f"{host.address}:{host.port} within {START_TIMEOUT}s ({problem}); "
                    f"log tail:\n{cluster.log_tail(i)}")
            time.sleep(0.05)


def _stop_process_tree(process: subprocess.Popen) -> None:
    """SIGTERM ``process`` and all its descendants, SIGKILL what survives the grace."""
    if process.poll() is not None:
        return
    try:
        descendants = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:  # exited since poll(); it is reaped below
        descendants = []
    _signal_all(descendants, psutil.Process.terminate)
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    survivors = _wait_gone(descendants, STOP_GRACE)
    _signal_all(survivors, psutil.Process.kill)
    _wait_gone(survivors, STOP_GRACE)


def _signal_all(procs: list[psutil.Process], send) -> None:
    for proc in procs:
        # A process that has already exited is exactly what we want.
        with contextlib.suppress(psutil.NoSuchProcess):
            send(proc)


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until ``procs`` have exited; return those still alive after ``timeout``.

    Zombies count as gone: orphans are reaped by PID 1, which may be slow or,
    in some containers, never happen.
    """
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if _is_alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no log at {path})"

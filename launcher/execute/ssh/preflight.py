"""Before anything starts anywhere: connect to every host at once, check it, open the one session it gets.

One thread per host (paramiko blocks). Host keys are verified against known_hosts. The session's command
first checks the remote dlaunch version, the working directory and the script, prints a ready mark, then
``exec``s ``PYTHON -m launcher cluster --from-head --announce``, which says its version and the ready mark,
then waits for its request. Every failing host is
reported together; unless all are ready the head hangs up, the waiting launchers read EOF instead of a
request and exit, and nothing (no rank, no run directory) has started anywhere.

One session per host rather than a check session and a launch session: each session costs the host a
login shell and the head a round trip, and the remote Pythons are already running when the requests go
out, so hosts start closer together (what HCCL_CONNECT_TIMEOUT cares about).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from launcher import __version__
from launcher.base.console import say
from launcher.execute.ssh.plan import CHECK_MARK, HostLaunch, SshPlan, Target
from launcher.execute.ssh.protocol import ANNOUNCE_FLAG

KEEPALIVE_SECONDS = 5          # so a host that vanishes without a TCP reset is noticed
IDLE_WAKE_SECONDS = 1.0        # how often each connection's paramiko thread wakes without traffic (keepalive
                               # checks); data and the other end closing wake it at once


# ---------------------------------------------------------------- preflight


class _UnknownHostKey(Exception):
    """A host whose key is in no known_hosts file, without --trust-new-hosts."""

    def __init__(self, name: str, key):
        super().__init__(name)
        self.name, self.key = name, key


class _DamagedKnownHosts(Exception):
    """A known_hosts line paramiko cannot parse (it refuses the whole file): the file and line are the cause,
    not the host (a line written there by a command whose stderr went along, e.g. a shell's pyenv warning)."""

    def __init__(self, path: str, line: str):
        super().__init__(path)
        self.path, self.line = path, line


_known_hosts_cache: dict[tuple, Any] = {}   # (path, mtime, size) -> paramiko.HostKeys, parsed once for every host
_known_hosts_lock = threading.Lock()


def _load_known_hosts(client, path: str, name: str) -> None:
    """Give ``client`` the keys ``path`` holds for ``name``.  The file is parsed once for all hosts, not once per
    host: a known_hosts file listing every host of the job, parsed by each connection, is O(hosts^2) key
    parsing in the head."""
    from paramiko.hostkeys import HostKeys, InvalidHostKey

    try:
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size)
        with _known_hosts_lock:
            known = _known_hosts_cache.get(key)
            if known is None:
                known = _known_hosts_cache[key] = HostKeys(path)
    except InvalidHostKey as exc:
        raise _DamagedKnownHosts(path, str(exc.line)) from None
    found = known.lookup(name)
    for keytype, hostkey in (found or {}).items():
        client.get_host_keys().add(name, keytype, hostkey)


class _HostKeyPolicy:
    """paramiko's missing-host-key hook: refuse an unknown key, or with --trust-new-hosts remember it.

    Duck-typed (paramiko calls ``missing_host_key``) so that this module needs no
    paramiko import at load time.  A *changed* key never reaches it: paramiko
    raises BadHostKeyException first, and that is always fatal.
    """

    def __init__(self, trust_new: bool):
        self.trust_new = trust_new
        self.accepted: tuple | None = None   # (known_hosts name, key) of a key accepted as new

    def missing_host_key(self, client, hostname, key) -> None:
        if not self.trust_new:
            raise _UnknownHostKey(hostname, key)
        self.accepted = (hostname, key)


@dataclass
class Probe:
    """One host's preflight: its connection and waiting launcher's channel, or what failed; a key accepted
    with --trust-new-hosts."""

    host: HostLaunch
    client: Any = None    # paramiko.SSHClient (paramiko is imported only when --ssh runs)
    channel: Any = None
    problem: str | None = None
    new_key: tuple | None = None

    def hang_up(self) -> None:
        """A launcher waiting for its request reads EOF instead, and exits having started nothing."""
        if self.client is not None:
            self.client.close()
        self.client = self.channel = None


def preflight(plan: SshPlan) -> list[Probe]:
    """Connect to and check every host at once; each bounded by --connect-timeout."""
    import logging

    import paramiko  # noqa: F401  (imported here, in the main thread, before the worker threads need it)

    logging.getLogger("paramiko").addHandler(logging.NullHandler())  # our lines say what failed; not its tracebacks
    expected = f"dlaunch {__version__}"
    outcomes = _parallel(lambda host: _probe(host, plan, expected), plan.hosts, plan.connect_timeout + 1.0)
    probes = []
    for host, (probe, exc, finished) in zip(plan.hosts, outcomes):
        if not finished:
            probe = Probe(host, problem=f"no answer within --connect-timeout {plan.connect_timeout:g} s")
        elif exc is not None:
            probe = Probe(host, problem=f"preflight failed: {type(exc).__name__}: {exc}")
        probes.append(probe)
    return probes


def _probe(host: HostLaunch, plan: SshPlan, expected_version: str) -> Probe:
    """Connect and open the host's one session (checks, ready mark, waiting launcher).

    Never raises for the host's faults: each becomes the one line the report gives this host.
    """
    target = host.target
    if target.unsupported:
        return Probe(host, problem=target.unsupported)
    deadline = time.monotonic() + plan.connect_timeout
    probe = Probe(host)
    try:
        probe.client, probe.new_key = _connect(target, plan.trust_new_hosts, deadline)
        probe.channel, output, mark = _open_launcher(probe.client, plan.remote_command, deadline)
        probe.problem = _check_problem(output, mark, plan, expected_version)
    except Exception as exc:  # a host's failure is a line in the report, whatever paramiko raised
        # paramiko ends a handshake that runs out of time with unrelated errors ("No existing session")
        probe.problem = _connect_problem(target, exc, plan, timed_out=time.monotonic() >= deadline - 0.05)
    if probe.problem:
        probe.hang_up()
    return probe


def _connect(target: Target, trust_new: bool, deadline: float):
    """An authenticated SSHClient whose host key known_hosts vouches for (or, if allowed, is new)."""
    import paramiko

    client = paramiko.SSHClient()
    policy = _HostKeyPolicy(trust_new)
    try:
        for path in target.known_hosts_files:
            if os.path.isfile(path):
                _load_known_hosts(client, path, target.known_hosts_name)
        client.set_missing_host_key_policy(policy)  # type: ignore[arg-type]  # paramiko duck-types policies
        remaining = max(0.1, deadline - time.monotonic())
        identities: Any = [p for p in target.identity_files if os.path.isfile(p)] or None   # a list: paramiko takes one
        client.connect(target.hostname, port=target.port, username=target.user, key_filename=identities,
                       look_for_keys=not target.identities_only, allow_agent=not target.identities_only,
                       timeout=min(remaining, target.connect_timeout or remaining), banner_timeout=remaining,
                       auth_timeout=remaining, channel_timeout=remaining)
        transport = client.get_transport()
        assert transport is not None   # connect() returned: paramiko holds the open transport
        transport.set_keepalive(KEEPALIVE_SECONDS)
        transport.sock.settimeout(IDLE_WAKE_SECONDS)   # paramiko's own 0.1 s: 640 idle wakeups/s with 64 hosts
    except BaseException:
        client.close()
        raise
    return client, policy.accepted


def _open_launcher(client, command: str, deadline: float):
    """Run the host's command and read its stdout up to the first check mark, within the host's deadline.

    Returns (channel, the output before the mark, the mark's line or "" at EOF).
    After the ready mark the launcher writes nothing until it has its request,
    so no rank output can be in what is read here.
    """
    channel = client.get_transport().open_session(timeout=max(0.1, deadline - time.monotonic()))
    channel.exec_command(command)
    data = b""
    while b"\n" not in data.partition(CHECK_MARK.encode())[2]:  # until a whole mark line has arrived
        channel.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = channel.recv(65536)
        if not chunk:
            break
        data += chunk
    output, _, mark = data.decode("utf-8", "replace").partition(CHECK_MARK)
    if not mark:   # the launcher did not start (no Python module, an older dlaunch): what it said on stderr
        output += _stderr(channel, deadline)
    channel.settimeout(None)
    return channel, output, mark.strip()


def _stderr(channel, deadline: float) -> str:
    """The channel's stderr up to its end (or the host's deadline), for a command that ended before its mark."""
    said = b""
    try:
        while True:
            channel.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = channel.recv_stderr(65536)
            if not chunk:
                break
            said += chunk
    except OSError:   # socket.timeout: what arrived is what there is
        pass
    return said.decode("utf-8", "replace")


def _check_problem(output: str, mark: str, plan: SshPlan, expected_version: str) -> str | None:
    """What the checks' output says is wrong, in words, or None when the host is ready."""
    said = [line.strip() for line in output.splitlines() if line.strip()]
    what, _, status = mark.partition(" ")
    if what == "noversion":
        return (f"cannot run {plan.python} -m launcher there (exit {status}): "
                f"{said[-1] if said else 'no output'}; pass --remote-python PATH")
    if what == "nocwd":
        return f"working directory {plan.cwd} does not exist there (ranks start from the head's directory)"
    if what == "missing":
        return f"{plan.target_kind} {plan.target} not found there"
    found = said[-1] if said else ""
    if not mark and "No module named launcher" in output:   # python -m's words when there is no dlaunch
        return f"cannot run {plan.python} -m launcher there: {found}; pass --remote-python PATH"
    if not mark and ANNOUNCE_FLAG in output and "unrecognized" in output:   # a dlaunch older than --announce
        return f"version mismatch: an older dlaunch there (no {ANNOUNCE_FLAG}), {expected_version} here; " \
               "install the same dlaunch"
    if found != expected_version:
        if not mark:
            return f"the checks did not run (the remote shell said: {' / '.join(said[-2:]) or 'nothing'})"
        return f"version mismatch: {found or 'nothing'} there, {expected_version} here; install the same dlaunch"
    if what != "ready":
        return f"the checks ended unexpectedly ({mark or 'no ready mark'})"
    return None


def _connect_problem(target: Target, exc: BaseException, plan: SshPlan, timed_out: bool = False) -> str:
    """One line for a failed connection: what happened and, for host keys, how to fix it."""
    import paramiko
    from paramiko.ssh_exception import NoValidConnectionsError

    where = f"{target.hostname}:{target.port}"
    if isinstance(exc, _UnknownHostKey):
        return (f"unknown host key for {exc.name} ({exc.key.get_name()} {exc.key.fingerprint}): refused; "
                f"if that fingerprint is the host's, record it with 'ssh-keyscan -p {target.port} "
                f"{target.hostname} >> {target.record_file}', or pass --trust-new-hosts")
    if isinstance(exc, _DamagedKnownHosts):
        from launcher.base.console import printable

        return (f"known_hosts file {exc.path} holds a line that is not a host key, so no key in it could be "
                f"read: {printable(exc.line.strip())[:120]!r}; remove that line (ssh-keygen -R cannot)")
    if isinstance(exc, paramiko.BadHostKeyException):
        return (f"HOST KEY CHANGED for {target.known_hosts_name}: it offers {exc.key.get_name()} "
                f"{exc.key.fingerprint}, known_hosts says {exc.expected_key.fingerprint} (a reinstalled host, or "
                f"someone in the middle); refused even with --trust-new-hosts. If the change is expected: "
                f"ssh-keygen -R '{target.known_hosts_name}' -f {target.record_file}")
    if isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(target.identity_files) or "default keys and agent"
        return f"authentication as {target.user} failed ({exc}); tried {keys}"
    if isinstance(exc, NoValidConnectionsError):
        reasons = sorted({(getattr(e, 'strerror', None) or str(e)) for e in exc.errors.values()})
        return f"cannot connect to {where}: {'; '.join(reasons)}"
    if timed_out or isinstance(exc, TimeoutError):
        return f"no SSH answer from {where} within --connect-timeout {plan.connect_timeout:g} s"
    if isinstance(exc, OSError):
        return f"cannot connect to {where}: {exc.strerror or exc}"
    if isinstance(exc, (paramiko.SSHException, EOFError)):
        return f"SSH to {where} failed: {exc or type(exc).__name__}"
    return f"SSH to {where} failed: {type(exc).__name__}: {exc}"


def _parallel(work, items, budget: float) -> list[tuple]:
    """``work(item)`` for every item at once, a daemon thread each; waits at most ``budget`` seconds in all.

    Returns per item ``(result, exception, finished)``.  Daemon threads, because
    a host that never answers must not keep dlaunch alive after it gave up.
    """
    outcomes = [(None, None, False)] * len(items)

    def run(index, item):
        try:
            outcomes[index] = (work(item), None, True)
        except Exception as exc:  # handed to the caller, which reports it per host
            outcomes[index] = (None, exc, True)

    threads = [threading.Thread(target=run, args=(i, item), daemon=True, name=f"dlaunch-ssh-{i}")
               for i, item in enumerate(items)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + budget
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return list(outcomes)


def record_new_keys(probes: list[Probe]) -> None:
    """Append keys accepted with --trust-new-hosts to the host's known_hosts file, as ``ssh`` would."""
    for probe in probes:
        if not probe.new_key:
            continue
        name, key = probe.new_key
        path = probe.host.target.record_file
        try:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"{name} {key.get_name()} {key.get_base64()}\n")
            say(f"trusted new host key of {name} ({key.get_name()} {key.fingerprint}), recorded in {path}")
        except OSError as exc:
            say(f"warning: trusted new host key of {name} ({key.fingerprint}) but could not record it "
                f"in {path}: {exc.strerror or exc}")

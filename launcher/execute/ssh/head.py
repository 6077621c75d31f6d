"""The head side of ``dlaunch cluster --ssh``: every server's share of a rank table, started and watched from here.

As everywhere in dlaunch, a plan first, then a thin executor:

* ``make_ssh_plan`` decides everything without touching the network: per
  server of the table, where SSH reaches it (the OpenSSH client config, read
  with ``paramiko.SSHConfig``) and the launch request its remote launcher
  (``hostagent``) will read from the channel: cluster arguments, script
  arguments, environment, the table's text.  ``--dry-run`` prints it.
* ``preflight`` connects to every host at once (one thread per host, since
  paramiko blocks), verifies host keys against known_hosts, and opens the one
  session each host gets.  Its command first checks the remote dlaunch
  version, the working directory and the script, prints a ready mark, then
  ``exec``s ``PYTHON -m launcher cluster --from-head``, which waits for its
  request.  Every failing host is reported together; unless all are ready the
  head hangs up, the waiting launchers read EOF instead of a request and exit,
  and nothing (no rank, no run directory) has started anywhere.
* ``_Session`` then sends every host its request and runs one selector loop in
  the main thread over the channels and the head's signals: output streams
  back in whole lines, signals are forwarded as lines on the channels, the
  first failure stops all hosts, and the exit code is the root cause's.

One session per host rather than a check session and a launch session: each
session costs the host a login shell (and its rc files) and the head a round
trip, and the remote Pythons are already running when the requests go out, so
hosts start closer together (what HCCL_CONNECT_TIMEOUT cares about).

Only paths are on the remote command line: environment values and script
arguments travel in the request, inside the encrypted channel, never where
``ps`` on the host would show them.  paramiko is imported inside functions
only, so the CLI starts fast.
"""

from __future__ import annotations

import fnmatch
import getpass
import json
import os
import selectors
import shlex
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

from launcher import __version__
from launcher.errors import UsageError
from launcher.results import how_it_ended

# Variables of the head's environment that every rank gets by default: the
# collective libraries' knobs, the data location and the Python path a job
# usually needs on every host. fnmatch patterns; --env-file and --env override.
FORWARDED_ENV = ("HCCL_*", "ASCEND_*", "NCCL_*", "GLOO_*", "TORCH_*", "PYTHONPATH", "DATA_PATH", "OMP_NUM_THREADS")

SSH_PORT = 22
USER_SSH_CONFIG = "~/.ssh/config"
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
KEEPALIVE_SECONDS = 5          # so a host that vanishes without a TCP reset is noticed
STOP_MARGIN = 10.0             # beyond the grace period, for a stopped host to kill, drain and report
EXIT_STATUS_POLL = 0.05        # between a channel's EOF and its exit status (paramiko has no fd for it)
CONNECTION_LOST = 255          # as ssh(1): the exit code of a host whose connection ended without a status
HCCL_CONNECT_TIMEOUT_DEFAULT = 120
HEAD_SUMMARY = "summary.head.json"
CHECK_MARK = "@dlaunch-check "
STDERR_TAIL = 5                # a host's last stderr lines, quoted when it fails without a rank to blame
MAX_PENDING_LINE = 1 << 20     # a host's unterminated stdout beyond this is shown rather than held


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Target:
    """Where and how SSH reaches one server, resolved from the OpenSSH client config."""

    server_id: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool
    known_hosts_files: tuple[str, ...]   # every file consulted for the host's key
    record_file: str                     # where --trust-new-hosts records a new key
    connect_timeout: float | None        # ConnectTimeout; None: --connect-timeout alone bounds it
    unsupported: str | None = None       # a config option dlaunch cannot honour (ProxyJump ...): refused

    @property
    def known_hosts_name(self) -> str:
        """The host as known_hosts names it (OpenSSH and paramiko write non-22 ports as ``[host]:port``)."""
        return self.hostname if self.port == SSH_PORT else f"[{self.hostname}]:{self.port}"

    def __str__(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


@dataclass(frozen=True)
class HostLaunch:
    """One server's share of the job: where it runs and the request its remote launcher reads."""

    target: Target
    ranks: tuple[int, ...]
    request: dict


@dataclass(frozen=True)
class SshPlan:
    run_id: str
    output_dir: str
    cwd: str
    python: str
    target_kind: str        # "script", "module" or "executable": what the preflight checks
    target: str
    remote_command: str     # the checks, then the launcher: run once per host
    grace_period: float
    connect_timeout: float
    trust_new_hosts: bool
    hosts: tuple[HostLaunch, ...]

    @property
    def run_dir(self) -> str:
        return os.path.join(self.output_dir, self.run_id)

    @property
    def world_size(self) -> int:
        return sum(len(h.ranks) for h in self.hosts)


def make_ssh_plan(args, environ=None) -> SshPlan:
    """Everything ``cluster --ssh`` will do, decided from the flags, the table and the SSH config; no network."""
    from launcher.cli import CLUSTER_DEFAULT_PORT, launch_options
    from launcher.cli import hang_timeout as checked_hang_timeout
    from launcher.table.rules import require_valid

    _refuse_unsupported(args)
    text, table = _read_table(args.rank_table)
    require_valid(table, args.profile, f"rank table {args.rank_table}")
    server_ids = _server_ids(table)
    opts = launch_options(args, table, 0, default_port=CLUSTER_DEFAULT_PORT)
    hang_timeout = checked_hang_timeout(args)
    env = rank_env(os.environ if environ is None else environ, args.env, args.env_file)
    python = args.remote_python or sys.executable
    cwd = os.getcwd()
    config = load_ssh_config(args.ssh_config)
    hosts = []
    for server, server_id in zip(table.servers, server_ids):
        request = {"argv": host_argv(opts, server_id, args.profile, hang_timeout),
                   "script_args": list(args.script_args),
                   "env": env, "rank_table": text}
        hosts.append(HostLaunch(resolve_target(config, server_id), tuple(sorted(d.rank for d in server.devices)),
                                request))
    command = opts.command
    kind = "module" if command.module else "executable" if command.no_python else "script"
    return SshPlan(run_id=opts.run_id, output_dir=opts.output_dir, cwd=cwd, python=python, target_kind=kind,
                   target=command.target, remote_command=remote_command(python, cwd, kind, command.target),
                   grace_period=opts.grace_period,
                   connect_timeout=args.connect_timeout, trust_new_hosts=args.trust_new_hosts, hosts=tuple(hosts))


def _refuse_unsupported(args) -> None:
    """Flags that make no sense, or are not implemented yet, when the head starts every host."""
    if not args.rank_table:
        raise UsageError("dlaunch cluster --ssh needs --rank-table FILE: its servers are the hosts to start")
    if args.max_restarts > 0:
        raise UsageError("--max-restarts is not supported with --ssh yet (restarts would need every host to "
                         "agree on each attempt); run without it")
    if args.server_id is not None or args.rank_start is not None:
        raise UsageError("--server-id and --rank-start choose one host's share; with --ssh every server of the "
                         "table is started")


def _read_table(path: str):
    """The table's text (sent to every host as is, unknown fields and all) and its parsed form."""
    from launcher.table.model import RankTableError, loads

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        return text, loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"rank table {path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    except RankTableError as exc:
        raise UsageError(f"rank table {path}: {exc}") from None


def _server_ids(table) -> list[str]:
    """Every server's id, which is also its SSH target: each must be present and unique (any profile)."""
    ids = [str(s.server_id) if s.server_id and isinstance(s.server_id, str) else "" for s in table.servers]
    for index, server_id in enumerate(ids):
        if not server_id.strip():
            raise UsageError(f"server_list[{index}] has no server_id: with --ssh it is the host to connect to")
        if ids.index(server_id) != index:
            raise UsageError(f"server_id {server_id} appears twice in the rank table: with --ssh each server_id "
                             f"is one host")
    return ids


def rank_env(environ, assignments: list[str], env_file: str | None) -> dict[str, str]:
    """The variables every remote rank gets: FORWARDED_ENV from the head, then --env-file, then --env."""
    from launcher.envfiles import parse_assignment, read_env_file

    env = {k: v for k, v in environ.items() if any(fnmatch.fnmatchcase(k, p) for p in FORWARDED_ENV)}
    if env_file:
        env.update(read_env_file(env_file))
    env.update(parse_assignment(text, "--env") for text in assignments)
    return env


def host_argv(opts, server_id: str, profile: str, hang_timeout: float | None = None) -> list[str]:
    """The ``cluster`` arguments of one host's launcher: what to run and every value all hosts must share.

    Values as the head settled them (flags, configs, DLAUNCH_* variables): the
    remote launcher settles its arguments without its own environment or configs.
    """
    command = opts.command
    what = ["--module"] if command.module else ["--no-python"] if command.no_python else []
    hang = ["--hang-timeout", repr(float(hang_timeout))] if hang_timeout is not None else []
    return [command.target, *what, "--server-id", server_id, "--run-id", opts.run_id,
            "--master-addr", opts.master_addr, "--master-port", str(opts.master_port),
            "--output-dir", opts.output_dir, "--profile", profile, "--cwd", opts.cwd_mode,
            "--console", opts.console, "--grace-period", repr(float(opts.grace_period)), *hang,
            "--waiting-notice", repr(float(opts.waiting_notice)),
            *(["--ms-scheduler", "--ms-topo-timeout", repr(float(opts.ms_topo_timeout))] if opts.ms_scheduler else [])]


def remote_command(python: str, cwd: str, target_kind: str, target: str) -> str:
    """Each host's one command: the preflight checks, a ready mark, then ``exec`` the launcher.

    Every piece is quoted and only paths appear.  A failed check prints its
    mark and exits before the launcher; after the ready mark the launcher
    only waits for its request, so starting nothing is still the head's call.
    """
    q = shlex.quote

    def fail(mark: str) -> str:
        return f"{{ echo {q(CHECK_MARK + mark)} $?; exit 2; }}"

    if target_kind == "script":
        find = f"test -f {q(target)} || {fail('missing')}; "
    elif target_kind == "executable":
        find = f"command -v {q(target)} >/dev/null 2>&1 || {fail('missing')}; "
    else:
        find = ""  # a module is found by the ranks' Python; checking would mean importing the user's code
    return (f"{shlex.join([python, '-m', 'launcher', '--version'])} 2>&1 || {fail('noversion')}; "
            f"cd {q(cwd)} 2>/dev/null || {fail('nocwd')}; {find}"
            f"echo {q(CHECK_MARK + 'ready')}; exec {shlex.join([python, '-m', 'launcher', 'cluster', '--from-head'])}")


def load_ssh_config(path: str | None):
    """``--ssh-config FILE``, else ``~/.ssh/config`` when it exists, else an empty config (defaults only)."""
    import paramiko

    if path is None:
        path = os.path.expanduser(USER_SSH_CONFIG)
        if not os.path.exists(path):
            return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(path)
    except OSError as exc:
        raise UsageError(f"cannot read SSH config {path}: {exc.strerror or exc}") from None
    except paramiko.ConfigParseError as exc:
        raise UsageError(f"SSH config {path}: {exc}") from None


def resolve_target(config, server_id: str) -> Target:
    """HostName, Port, User, IdentityFile, IdentitiesOnly, known_hosts files and ConnectTimeout for one server."""
    options = config.lookup(server_id)
    try:
        port = int(options.get("port", SSH_PORT))
        timeout = float(options["connecttimeout"]) if "connecttimeout" in options else None
    except ValueError as exc:
        raise UsageError(f"SSH config for {server_id}: {exc}") from None
    user_files = _paths(options.get("userknownhostsfile"))
    global_files = _paths(options.get("globalknownhostsfile")) or (SYSTEM_KNOWN_HOSTS,)
    home_file = os.path.expanduser(USER_KNOWN_HOSTS)
    proxy = [key for key in ("proxyjump", "proxycommand") if options.get(key)]
    return Target(
        server_id=server_id, hostname=options.get("hostname", server_id), port=port,
        user=options.get("user") or getpass.getuser(),
        identity_files=tuple(os.path.expanduser(p) for p in options.get("identityfile", [])),
        identities_only=options.get("identitiesonly", "no").lower() == "yes",
        known_hosts_files=tuple(dict.fromkeys((*global_files, home_file, *user_files))),
        record_file=user_files[0] if user_files else home_file, connect_timeout=timeout,
        unsupported=f"its SSH config sets {proxy[0]}, which dlaunch does not support" if proxy else None)


def _paths(value: str | None) -> tuple[str, ...]:
    """A known-hosts option's files: one path (it may hold spaces) when it exists, else a list as OpenSSH splits it."""
    if not value or value.lower() == "none":
        return ()
    if os.path.exists(os.path.expanduser(value)):
        return (os.path.expanduser(value),)
    return tuple(os.path.expanduser(p) for p in shlex.split(value))


def describe_plan(plan: SshPlan) -> str:
    """What ``--dry-run`` prints: per host, the target, the remote command and the request (secrets masked)."""
    from launcher.console import printable
    from launcher.environment import masked

    lines = [f"run {plan.run_id}: {plan.world_size} rank(s) on {len(plan.hosts)} host(s) over SSH (dry run: "
             f"nothing is connected to or started)",
             f"run directory: {plan.run_dir} (on every host)",
             f"remote command: {plan.remote_command}",
             f"preflight:     dlaunch {__version__} at {plan.python}; {plan.target_kind} {plan.target}"]
    for host in plan.hosts:
        request = host.request
        lines += [f"host {host.target.server_id} ({host.target}): ranks {_span(host.ranks)}",
                  f"  argv:        {shlex.join(request['argv'])}",
                  f"  script args: {shlex.join(request['script_args'])}",
                  "  env:"]
        lines += [f"    {k}={shlex.quote(v)}" for k, v in sorted(masked(request["env"]).items())]
    return "\n".join(printable(line) for line in lines)


def _span(ranks) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if ranks else "none"


# ---------------------------------------------------------------- preflight


class _UnknownHostKey(Exception):
    """A host whose key is in no known_hosts file, without --trust-new-hosts."""

    def __init__(self, name: str, key):
        super().__init__(name)
        self.name, self.key = name, key


class _HostKeyPolicy:
    """paramiko's missing-host-key hook: refuse an unknown key, or with --trust-new-hosts remember it.

    Duck-typed (paramiko calls ``missing_host_key``) so that this module needs no
    paramiko import at load time.  A *changed* key never reaches it: paramiko
    raises BadHostKeyException first, and that is always fatal.
    """

    def __init__(self, trust_new: bool):
        self.trust_new = trust_new
        self.accepted = None   # (known_hosts name, key) of a key accepted as new

    def missing_host_key(self, client, hostname, key) -> None:
        if not self.trust_new:
            raise _UnknownHostKey(hostname, key)
        self.accepted = (hostname, key)


@dataclass
class Probe:
    """One host's preflight: its connection and waiting launcher's channel, or what failed; a key accepted
    with --trust-new-hosts."""

    host: HostLaunch
    client: object = None
    channel: object = None
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
                client.load_system_host_keys(path)
        client.set_missing_host_key_policy(policy)
        remaining = max(0.1, deadline - time.monotonic())
        identities = [p for p in target.identity_files if os.path.isfile(p)]
        client.connect(target.hostname, port=target.port, username=target.user, key_filename=identities or None,
                       look_for_keys=not target.identities_only, allow_agent=not target.identities_only,
                       timeout=min(remaining, target.connect_timeout or remaining), banner_timeout=remaining,
                       auth_timeout=remaining, channel_timeout=remaining)
        client.get_transport().set_keepalive(KEEPALIVE_SECONDS)
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
    channel.settimeout(None)
    output, _, mark = data.decode("utf-8", "replace").partition(CHECK_MARK)
    return channel, output, mark.strip()


def _check_problem(output: str, mark: str, plan: SshPlan, expected_version: str) -> str | None:
    """What the checks' output says is wrong, in words, or None when the host is ready."""
    said = [line.strip() for line in output.splitlines() if line.strip()]
    what, _, status = mark.partition(" ")
    if what == "noversion":
        return (f"cannot run {plan.python} -m launcher there (exit {status}): "
                f"{said[-1] if said else 'no output'}; pass --remote-python PATH")
    found = said[-1] if said else ""
    if found != expected_version:
        if not mark:
            return f"the checks did not run (the remote shell said: {' / '.join(said[-2:]) or 'nothing'})"
        return f"version mismatch: {found or 'nothing'} there, {expected_version} here; install the same dlaunch"
    if what == "nocwd":
        return f"working directory {plan.cwd} does not exist there (ranks start from the head's directory)"
    if what == "missing":
        return f"{plan.target_kind} {plan.target} not found there"
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
    if isinstance(exc, paramiko.BadHostKeyException):
        return (f"HOST KEY CHANGED for {target.known_hosts_name}: it offers {exc.key.get_name()} "
                f"{exc.key.fingerprint}, known_hosts says {exc.expected_key.fingerprint} (a reinstalled host, or "
                f"someone in the middle); refused even with --trust-new-hosts. If the change is expected: "
                f"ssh-keygen -R '{target.known_hosts_name}' -f {target.record_file}")
    if isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(target.identity_files) or "default keys and agent"
        return f"authentication as {target.user} failed ({exc}); tried {keys}"
    if isinstance(exc, NoValidConnectionsError):
        reasons = sorted({(e.strerror or str(e)) for e in exc.errors.values()})
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
            print(f"dlaunch: trusted new host key of {name} ({key.get_name()} {key.fingerprint}), recorded in {path}",
                  file=sys.stderr)
        except OSError as exc:
            print(f"dlaunch: warning: trusted new host key of {name} ({key.fingerprint}) but could not record it "
                  f"in {path}: {exc.strerror or exc}", file=sys.stderr)


# ---------------------------------------------------------------- execution


class HostRun:
    """One host's launch as the head sees it: its channel, unfinished output lines, events and outcome."""

    def __init__(self, host: HostLaunch, client, channel):
        self.host, self.client, self.channel = host, client, channel
        self.stdout_pending = b""
        self.stderr_pending = b""
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self.started_at: float | None = None     # the host's "started" event: its first rank's start
        self.summary: dict | None = None         # the host's "summary" event
        self.summary_path: str | None = None
        self.reading = False
        self.exit_code: int | None = None
        self.ended_at: float | None = None
        self.lost: str | None = None             # why it ended without an exit status
        self.told: int | None = None             # the signal the head sent it (it did not fail on its own)
        self.abandoned = False                   # past the stop deadline: SIGKILLed and hung up on

    @property
    def server_id(self) -> str:
        return self.host.target.server_id

    @property
    def done(self) -> bool:
        return self.exit_code is not None

    def end(self, code: int, lost: str | None = None) -> None:
        self.exit_code, self.lost, self.ended_at, self.reading = code, lost, time.time(), False

    def send(self, line: str) -> None:
        """A control line for the remote launcher; a channel already gone needs none."""
        if self.channel is None or self.done:
            return
        try:
            self.channel.sendall(line.encode() + b"\n")
        except Exception as exc:  # OSError, EOFError, SSHException: the transport just died; the loop notices
            self.stderr_tail.append(f"could not send {line}: {exc or type(exc).__name__}")


def start_hosts(runs: list[HostRun]) -> None:
    """Send every waiting launcher its request: a write each, no round trip; a host that is gone has ended."""
    for run in runs:
        try:
            run.channel.sendall(json.dumps(run.host.request).encode() + b"\n")
            run.reading = True
        except Exception as exc:  # the connection died since the preflight: that host failed, the loop stops all
            run.end(CONNECTION_LOST, lost=f"could not send the launch request ({exc or type(exc).__name__})")


class _Session:
    """The one selector loop: channels' output, their ends, the head's signals, the shared stop deadline."""

    def __init__(self, plan: SshPlan, runs: list[HostRun], signals, out_fd: int = 1, err_fd: int = 2):
        self.plan, self.runs, self.signals = plan, runs, signals
        self.fds = {"out": out_fd, "err": err_fd}
        self.selector = selectors.DefaultSelector()
        self.stop_deadline: float | None = None
        self.interrupted_by: int | None = None
        self.killed = False

    def run(self) -> None:
        self.selector.register(self.signals.fd, selectors.EVENT_READ, None)
        for run in self.runs:
            if run.reading:
                self.selector.register(run.channel.fileno(), selectors.EVENT_READ, run)
        try:
            self._after_events()
            while not all(run.done for run in self.runs):
                for key, _ in self.selector.select(self._timeout()):
                    if key.data is None:
                        self._on_signals(self.signals.drain())
                    else:
                        self._pump(key.data)
                self._after_events()
        finally:
            self.selector.close()

    def _timeout(self) -> float | None:
        waits = []
        if any(not run.reading and not run.done for run in self.runs):
            waits.append(EXIT_STATUS_POLL)
        if self.stop_deadline is not None:
            waits.append(max(0.0, self.stop_deadline - time.monotonic()))
        return min(waits) if waits else None

    def _after_events(self) -> None:
        """Collect exit statuses, stop everything on a failure, give up on hosts past the deadline."""
        for run in self.runs:
            if not run.reading and not run.done and run.channel.exit_status_ready():
                self._ended(run)
        for run in self.runs:
            if self._failed_on_its_own(run) and self.stop_deadline is None:
                self._stop_all(signal.SIGTERM)
        if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
            self._abandon_stragglers()

    def _failed_on_its_own(self, run: HostRun) -> bool:
        reported = run.summary is not None and run.summary.get("exit_code") not in (0, None)
        return run.told is None and (reported or run.exit_code not in (0, None))

    def _ended(self, run: HostRun) -> None:
        """The channel closed: its exit status, or -1 when there was none (connection lost, launcher killed)."""
        status = run.channel.recv_exit_status()
        if status >= 0:
            run.end(status)
            return
        transport = run.client.get_transport()
        alive = transport is not None and transport.is_active()
        run.end(CONNECTION_LOST, lost="its remote launcher ended without an exit status (killed?)" if alive
                else "SSH connection lost")

    def _stop_all(self, sig: int) -> None:
        """Tell every other host still running to stop (it SIGTERMs its ranks, waits its grace, SIGKILLs).

        A host that failed by itself is left alone: it is stopping already, and
        being "told" would hide that it is a root-cause candidate.
        """
        for run in self.runs:
            if not run.done and run.told is None and not self._failed_on_its_own(run):
                run.told = sig
                run.send(signal.Signals(sig).name)
        self.stop_deadline = time.monotonic() + self.plan.grace_period + STOP_MARGIN

    def _on_signals(self, signals: list[int]) -> None:
        """First SIGINT/SIGTERM/SIGHUP: forwarded to every host; a later SIGINT: SIGKILL everywhere at once."""
        for sig in signals:
            if self.stop_deadline is None:
                self.interrupted_by = sig
                self._stop_all(sig)
            elif sig == signal.SIGINT and not self.killed:
                self.killed = True
                for run in self.runs:
                    run.send("SIGKILL")

    def _abandon_stragglers(self) -> None:
        """Past the grace period and margin: SIGKILL and hang up on hosts that have not finished."""
        for run in self.runs:
            if not run.done:
                run.send("SIGKILL")
                if run.reading:
                    self.selector.unregister(run.channel.fileno())
                run.channel.close()
                run.abandoned = True
                run.end(CONNECTION_LOST, lost=f"did not stop within {self.plan.grace_period:g} s grace + "
                                              f"{STOP_MARGIN:g} s; sent SIGKILL and hung up")

    def _pump(self, run: HostRun) -> None:
        """Drain a readable channel: stdout lines through, stderr lines as events or prefixed; notice its EOF."""
        channel = run.channel
        while channel.recv_ready():
            self._stdout(run, channel.recv(65536))
        while channel.recv_stderr_ready():
            self._stderr(run, channel.recv_stderr(65536))
        if (channel.eof_received or channel.closed) and not channel.recv_ready() and not channel.recv_stderr_ready():
            # paramiko's pipe stays readable after EOF: stop watching it, then poll for the exit status
            self.selector.unregister(channel.fileno())
            run.reading = False
            if run.stdout_pending:
                self._stdout(run, b"\n")
            if run.stderr_pending:
                self._stderr(run, b"\n")

    def _stdout(self, run: HostRun, data: bytes) -> None:
        """Rank output, already prefixed ``[server][rankN]: `` remotely: only whole lines pass, never half one."""
        data = run.stdout_pending + data
        cut = data.rfind(b"\n") + 1
        if len(data) - cut > MAX_PENDING_LINE:
            cut = len(data)
        run.stdout_pending = data[cut:]
        if cut:
            self._write("out", data[:cut] if data[cut - 1:cut] == b"\n" else data[:cut] + b"\n")

    def _stderr(self, run: HostRun, data: bytes) -> None:
        """The remote launcher's stderr: events for the head, everything else shown as ``[server] line``."""
        from launcher.execute.ssh.agent import parse_event

        *lines, run.stderr_pending = (run.stderr_pending + data).split(b"\n")
        shown = []
        for raw in lines:
            text = raw.decode("utf-8", "replace")
            event = parse_event(text)
            if event is not None:
                self._event(run, event)
            else:
                run.stderr_tail.append(text)
                shown.append(f"[{run.server_id}] ".encode() + raw + b"\n")
        if shown:
            self._write("err", b"".join(shown))

    def _event(self, run: HostRun, event: dict) -> None:
        if event.get("event") == "started":
            run.started_at = float(event["at"]) if event.get("at") is not None else time.time()
        elif event.get("event") == "summary" and isinstance(event.get("summary"), dict):
            run.summary, run.summary_path = event["summary"], event.get("path")

    def _write(self, stream: str, data: bytes) -> None:
        """All of ``data`` to the head's "out" or "err"; a closed console (``| head``) does not stop the job."""
        from launcher.execute.tee import _write_all

        try:
            _write_all(self.fds[stream], data)
        except BrokenPipeError:
            self.fds[stream] = os.open(os.devnull, os.O_WRONLY)


# ---------------------------------------------------------------- outcome


def root_cause(runs: list[HostRun]) -> dict | None:
    """The failure that came first: among every host's own root cause (a rank) and every host that failed by
    itself (a lost connection, a launcher error), the one with the earliest end time."""
    causes = []
    for run in runs:
        cause = (run.summary or {}).get("root_cause")
        if cause:  # the host launcher's own exit code says how it judged the cause (124: a hang)
            causes.append({**cause, "host": run.server_id, "launcher_exit_code": run.summary.get("exit_code")})
        elif run.told is None and run.exit_code not in (0, None):
            reason = run.lost or f"its launcher exited with code {run.exit_code}"
            last = [line for line in run.stderr_tail if line.strip()]
            causes.append({"host": run.server_id, "rank": None, "exit_code": run.exit_code, "end": run.ended_at,
                           "reason": reason + (f": {last[-1].strip()}" if last and not run.lost else "")})
    return min(causes, key=lambda c: c.get("end") or float("inf"), default=None)


def _host_status(run: HostRun, cause: dict | None) -> str:
    if run.exit_code == 0:
        return "succeeded"
    if cause and cause["host"] == run.server_id:
        return "failed"
    if run.abandoned:
        return "did not stop in time"
    if run.lost:
        return "connection lost"
    if run.told is not None:
        return "stopped"
    return "failed"


def head_summary(plan: SshPlan, runs: list[HostRun], interrupted_by: int | None, started: float) -> dict:
    """summary.head.json: per host status, exit code and start; the root cause; the spread of host starts."""
    cause = root_cause(runs)
    starts = [run.started_at for run in runs if run.started_at is not None]
    spread = max(starts) - min(starts) if len(starts) == len(runs) and starts else None
    if cause is not None:
        exit_code, status = cause.get("launcher_exit_code") or cause.get("exit_code") or 1, "failed"
    elif interrupted_by is not None:
        exit_code, status = 128 + interrupted_by, "interrupted"
    else:
        failed = [run.exit_code for run in runs if run.exit_code not in (0, None)]
        exit_code, status = (failed[0], "failed") if failed else (0, "succeeded")
    return {
        "run_id": plan.run_id, "run_dir": plan.run_dir, "world_size": plan.world_size, "status": status,
        "exit_code": exit_code, "started": started, "ended": time.time(),
        "interrupted_by": signal.Signals(interrupted_by).name if interrupted_by else None,
        "root_cause": cause, "hosts_started_within_s": spread,
        "hccl_connect_timeout_default_s": HCCL_CONNECT_TIMEOUT_DEFAULT,
        "hosts": [{"host": run.server_id, "target": str(run.host.target), "ranks": list(run.host.ranks),
                   "status": _host_status(run, cause), "exit_code": run.exit_code, "started_at": run.started_at,
                   "ended_at": run.ended_at, "told": signal.Signals(run.told).name if run.told else None,
                   "reason": run.lost, "summary": run.summary_path} for run in runs],
    }


def report(summary: dict, path: str, out=None) -> None:
    """The head's closing lines: how closely the hosts started, then success or the root cause."""
    out = out or sys.stderr
    hosts = summary["hosts"]
    started = [h for h in hosts if h["started_at"] is not None]
    if summary["hosts_started_within_s"] is not None:
        print(f"dlaunch: hosts started within {summary['hosts_started_within_s']:.2f} s of each other "
              f"(HCCL_CONNECT_TIMEOUT default {HCCL_CONNECT_TIMEOUT_DEFAULT} s)", file=out)
    elif started:
        print(f"dlaunch: only {len(started)} of {len(hosts)} host(s) started their ranks", file=out)
    cause, others = summary["root_cause"], len(hosts) - 1
    if summary["status"] == "succeeded":
        print(f"dlaunch: all {summary['world_size']} rank(s) on {len(hosts)} host(s) exited 0 in "
              f"{summary['ended'] - summary['started']:.1f} s; summary {path}", file=out)
        return
    if cause and cause.get("hung"):
        print(f"dlaunch: on host {cause['host']}: {cause['reason']}", file=out)
    if cause and cause.get("rank") is not None:
        how = how_it_ended(cause)
        print(f"dlaunch: rank {cause['rank']} on host {cause['host']} (device {cause.get('device_id')}) {how}; "
              f"log on that host: {cause.get('log')}", file=out)
        for line in cause.get("log_tail") or []:
            print(f"    | {line}", file=out)
    elif cause:
        print(f"dlaunch: host {cause['host']} failed: {cause['reason']}", file=out)
    else:
        print(f"dlaunch: interrupted by {summary['interrupted_by']}", file=out)
    stopped = (f"stopped the other {others} host(s); " if others else "") if cause else \
        f"stopped all {len(hosts)} host(s); "
    print(f"dlaunch: {stopped}exit code {summary['exit_code']}; summary {path}", file=out)


# ---------------------------------------------------------------- entry point


def launch_over_ssh(args) -> int:
    """``dlaunch cluster --ssh``: plan, preflight every host, start all, watch until the end; the exit code."""
    plan = make_ssh_plan(args)
    if args.dry_run:
        print(describe_plan(plan))
        return 0
    summary_path = os.path.join(plan.run_dir, HEAD_SUMMARY)
    if os.path.lexists(summary_path):
        raise UsageError(f"run {plan.run_id} already has {summary_path}; choose another --run-id")
    probes = preflight(plan)
    record_new_keys(probes)
    failed = [p for p in probes if p.problem]
    if failed:
        for probe in failed:
            print(f"dlaunch: error: host {probe.host.target.server_id} ({probe.host.target}): {probe.problem}",
                  file=sys.stderr)
        print(f"dlaunch: error: preflight failed on {len(failed)} of {len(probes)} host(s); nothing was started",
              file=sys.stderr)
        for probe in probes:
            probe.hang_up()
        return UsageError.exit_code
    return _execute(plan, probes, summary_path)


def _execute(plan: SshPlan, probes: list[Probe], summary_path: str) -> int:
    from launcher import rundir
    from launcher.execute.local import SignalWatch

    started = time.time()
    runs = [HostRun(p.host, p.client, p.channel) for p in probes]
    signals = SignalWatch()  # before the first host starts: a Ctrl-C from now on reaches every host
    session = _Session(plan, runs, signals)
    try:
        start_hosts(runs)
        session.run()
    finally:
        signals.close()
        _close([run.client for run in runs])
    summary = head_summary(plan, runs, session.interrupted_by, started)
    os.makedirs(plan.run_dir, exist_ok=True)
    rundir.write_json(summary_path, summary)
    report(summary, summary_path)
    return summary["exit_code"]


def _close(clients) -> None:
    """Hang up: a remote launcher still running would take the closed channel as SIGHUP."""
    for client in clients:
        if client is not None:
            client.close()

"""``cluster --ssh``'s plan: every server's share of a rank table, where SSH reaches it, what it is sent.

Decided without touching the network (``--dry-run`` prints it): per server of the table, the target
from the OpenSSH client config (read with ``paramiko.SSHConfig``) and the launch request its remote
launcher reads (``ssh.protocol``) from the channel: cluster arguments, script arguments, environment, the
table's text. Only paths go on the remote command line: environment values and script arguments travel
in the request, inside the encrypted channel, never where ``ps`` on the host would show them.
"""

from __future__ import annotations

import fnmatch
import getpass
import os
import secrets
import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher import __version__
from launcher.contract import JOB_SECRET_ENV
from launcher.errors import UsageError
from launcher.execute.ssh.protocol import ANNOUNCE_FLAG

if TYPE_CHECKING:
    from collections.abc import Mapping

    from launcher.settings.request import LaunchRequest

# Variables of the head's environment that every rank gets by default: the
# collective libraries' knobs, the data location and the Python path a job
# usually needs on every host. fnmatch patterns; --env-file and --env override.
FORWARDED_ENV = ("HCCL_*", "ASCEND_*", "NCCL_*", "GLOO_*", "TORCH_*", "PYTHONPATH", "DATA_PATH", "OMP_NUM_THREADS")

SSH_PORT = 22
USER_SSH_CONFIG = "~/.ssh/config"
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
CHECK_MARK = "@dlaunch-check "


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
    forward_signals: tuple = ()   # --forward-signals: passed on to every host's ranks, beside SIGUSR1/2
    spares: int = 0               # --spares: the hosts' job link replaces a failed host; the head only watches

    @property
    def run_dir(self) -> str:
        return os.path.join(self.output_dir, self.run_id)

    @property
    def world_size(self) -> int:
        return sum(len(h.ranks) for h in self.hosts)


def make_ssh_plan(args: LaunchRequest, text: str, table, opts, environ: Mapping[str, str]) -> SshPlan:
    """Everything ``cluster --ssh`` will do, decided from the request, the table and the SSH config; no network.

    ``text`` and ``table`` are the rank table as read and validated, ``opts`` the head's settings
    (``plan.share.head_launch``), with the arguments every host's launcher gets (``opts.host_argv``).
    """
    server_ids = _server_ids(table)
    env = rank_env(environ, args.env, args.env_file)
    # the hosts' link (under --max-restarts) gets a secret no stranger can derive: the head's, or a new one
    env.setdefault(JOB_SECRET_ENV, environ.get(JOB_SECRET_ENV) or secrets.token_hex(16))
    python = args.remote_python or sys.executable
    cwd = os.getcwd()
    config = load_ssh_config(args.ssh_config)
    hosts = []
    for server, server_id in zip(table.servers, server_ids):
        request = {"argv": [*opts.host_argv, "--server-id", server_id],
                   "script_args": list(args.script_args),
                   "env": env, "rank_table": text}
        hosts.append(HostLaunch(resolve_target(config, server_id), tuple(sorted(d.rank for d in server.devices)),
                                request))
    command = opts.command
    kind = "module" if command.module else "executable" if command.no_python else "script"
    return SshPlan(run_id=opts.run_id, output_dir=opts.output_dir, cwd=cwd, python=python, target_kind=kind,
                   target=command.target, remote_command=remote_command(python, cwd, kind, command.target),
                   grace_period=opts.policy.grace_period,
                   connect_timeout=args.connect_timeout, trust_new_hosts=args.trust_new_hosts, hosts=tuple(hosts),
                   forward_signals=tuple(opts.forward_signals), spares=opts.spares)


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


def rank_env(environ, assignments, env_file: str | None) -> dict[str, str]:
    """The variables every remote rank gets: FORWARDED_ENV from the head, then --env-file, then --env."""
    from launcher.settings.envfiles import parse_assignment, read_env_file

    env = {k: v for k, v in environ.items() if any(fnmatch.fnmatchcase(k, p) for p in FORWARDED_ENV)}
    if env_file:
        env.update(read_env_file(env_file))
    env.update(parse_assignment(text, "--env") for text in assignments)
    return env


def remote_command(python: str, cwd: str, target_kind: str, target: str) -> str:
    """Each host's one command: the checks shell builtins can make, then ``exec`` the launcher.

    Every piece is quoted and only paths appear.  A failed check prints its
    mark and exits before the launcher.  The launcher (``--announce``) prints
    its version and the ready mark, then only waits for its request, so
    starting nothing is still the head's call: one Python start per host.
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
    return (f"command -v {q(python)} >/dev/null 2>&1 || {fail('noversion')}; "
            f"cd {q(cwd)} 2>/dev/null || {fail('nocwd')}; {find}"
            f"exec {shlex.join([python, '-m', 'launcher', 'cluster', '--from-head', ANNOUNCE_FLAG])}")


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
    from launcher.base.console import printable
    from launcher.plan.environment import masked

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

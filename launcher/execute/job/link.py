"""What dlaunch's main loop sees of the job: one descriptor to watch, a call when it stops, a verdict at the end.

The network runs on one thread of its own with its own selector (the coordinator's sockets on the master
host, the connection to it on every host), so heartbeats keep flowing while the main thread spawns ranks,
writes stacks or waits between attempts, and a stopped dlaunch (SIGSTOP) stops them too, as it should.
The two threads share two queues and a socket pair; the main loop's selector watches ``fd``.
"""

from __future__ import annotations

import collections
import selectors
import socket
import threading
import time

from launcher.base.console import say
from launcher.contract import ExitCode
from launcher.execute.budget import RestartBudget
from launcher.execute.job import protocol
from launcher.execute.job.coordinator import Coordinator
from launcher.execute.job.member import Member
from launcher.execute.results import how_it_ended

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Mapping


def cause_of(result) -> dict:
    """This host's reason to stop an attempt, as the other hosts are told it (an ``AttemptResult``)."""
    cause = result.root_cause
    if cause is not None:
        kind = "hung" if cause.hang else "failed"
        return {"kind": kind, **cause.to_dict(), "exit_code": result.exit_code, "rank_exit_code": cause.exit_code}
    if result.launcher_error is not None:
        return {"kind": "error", "why": result.launcher_error, "exit_code": result.exit_code, "end": time.time()}
    if result.stopped_by is not None:   # this host's own order to stop (MindCluster's reset file)
        return {**result.stopped_by["cause"], "why": result.stopped_by["why"], "exit_code": result.exit_code,
                "end": time.time()}
    import signal

    return {"kind": "interrupted", "signal": signal.Signals(result.interrupted_by).name,
            "exit_code": result.exit_code, "end": time.time()}


def describe(cause: dict) -> str:
    """One line naming the host, and the rank when there is one, that ended the job."""
    kind, host = cause.get("kind"), cause.get("host")
    if kind in ("failed", "hung"):
        entry = {**cause, "exit_code": cause.get("rank_exit_code", cause.get("exit_code"))}
        return f"rank {cause.get('rank')} on host {host} {how_it_ended(entry)}"
    if kind == "interrupted":
        return f"dlaunch on host {host} was interrupted by {cause.get('signal')}"
    if kind == "error":
        return f"dlaunch on host {host} failed: {cause.get('why')}"
    if kind == "late":
        return str(cause.get("why"))
    if kind == "unhealthy":
        return str(cause.get("why"))
    if kind == "mindcluster":
        return f"host {host} stopped: {cause.get('why')}"
    return f"host {host} was lost: {cause.get('why')}"


def job_identity(table) -> str:
    """What the job's secret is derived from when none is given: every server and its ranks, which every host
    of the job holds from the moment it starts.  Not the whole file: an operator rewriting a device's address
    while the hosts start (ascend-operator's hccl.json) must not split one job into two."""
    return ";".join(f"{server.server_id}:{','.join(str(d.rank_id) for d in server.devices)}"
                    for server in table.servers)


class JobLink:
    """This host's membership of the job (and, on the master host, the job's coordinator)."""

    def __init__(self, *, hosts: list[str], index: int, master_index: int, address: str, port: int, secret: bytes,
                 run_id: str, host_timeout: float, join_timeout: float, max_restarts: int,
                 report_timeout: float | None = None, budget=None, active: list[int] | None = None,
                 cooldown: float = 600.0, elastic: tuple[int, float] | None = None):
        self.hosts, self.index, self.attempt = hosts, index, 0
        self.port, self.secret = port, secret   # the job's port and secret: the buddy copy's too (buddy.py)
        self.active: list[int] | None = None   # --spares: the job's active hosts, as the coordinator last said
        self.stacks: dict = {}   # on the master host, after a hang: global rank -> {"host", "text"}
        self.behind: dict | None = None   # the job's attempt, when it restarted before this host joined
        self._events: collections.deque = collections.deque()
        self._outbox: collections.deque = collections.deque()
        self._main_r, self._thread_w = socket.socketpair()   # the thread wakes the main loop
        self._thread_r, self._main_w = socket.socketpair()   # the main thread wakes the network thread
        for sock in (self._main_r, self._thread_w, self._thread_r, self._main_w):
            sock.setblocking(False)
        self._closing = False
        self.coordinator = None
        if index == master_index:
            self.coordinator = Coordinator(protocol.bind_address(address, port), secret, run_id, hosts,
                                           max_restarts=max_restarts, host_timeout=host_timeout,
                                           join_timeout=join_timeout, log=say, master_index=master_index,
                                           report_timeout=report_timeout, budget=budget, active=active,
                                           cooldown=cooldown, elastic=elastic)
        self.member = Member(address, port, secret, run_id, index, host_timeout=host_timeout,
                             join_timeout=join_timeout, deliver=self._deliver, master_name=hosts[master_index])
        self._thread = threading.Thread(target=self._serve, name="dlaunch-job", daemon=True)

    @classmethod
    def for_plan(cls, plan, opts, table, environ: Mapping[str, str], roster=None) -> JobLink:
        """The link of a multi-host plan: the coordinator on the master host's ``--job-port``. With spares
        (a ``table.spares.Roster``), every server of the pool is a host of the link, active or standing by."""
        if roster is not None:
            table = roster.pool
        hosts = [str(s.server_id) for s in table.servers]
        master = next((i for i, s in enumerate(table.servers) if any(d.rank == 0 for d in s.devices)), 0)
        address, port, secret, job_id = rendezvous(opts, table, environ)
        warning = protocol.open_secret_warning(environ, protocol.endpoint(address, port))
        if warning:
            say(warning)
        # a host reports once its ranks stopped: the survivors' window, the grace period, the stacks of a hang,
        # and a host timeout
        report_timeout = opts.policy.survivor_window + 2 * opts.policy.grace_period + opts.host_timeout + 60
        index = roster.own if roster is not None else plan.server_index
        return cls(hosts=hosts, index=index, master_index=master, address=address, port=port,
                   secret=secret,
                   run_id=job_id, host_timeout=opts.host_timeout, join_timeout=opts.join_timeout,
                   # --restart-policy rank restarts ranks in place, each host its own: never the whole job
                   max_restarts=opts.policy.max_restarts if opts.policy.restart_policy == "job" else 0,
                   report_timeout=report_timeout,
                   budget=RestartBudget(without_progress=opts.policy.restarts_without_progress,
                                        per_hour=opts.policy.max_failures_per_hour),
                   active=list(roster.active) if roster is not None and not roster.min_nodes else None,
                   cooldown=opts.exclude_cooldown,
                   elastic=(roster.min_nodes, opts.last_call) if roster is not None and roster.min_nodes else None)

    def start(self) -> None:
        self._thread.start()

    # ---------------------------------------------------------------- the main thread's side

    @property
    def fd(self) -> int:
        return self._main_r.fileno()

    def stop_events(self) -> list[tuple[str, dict]]:
        """("job_stop", {"why", "exit_code", "cause"}) when the job tells this host's current attempt to stop
        (a stop, or the master host lost); other news waits for ``finish``."""
        self._drain(self._main_r)
        found = []
        self._take_attempts()
        if self.behind is not None and not self.behind.get("told"):
            self.behind["told"] = True
            cause = {"kind": "late", "host": self.hosts[self.index], "end": time.time(),
                     "why": f"this host joined after the job restarted (attempt {self.behind['attempt']})"}
            found.append(("job_stop", {"why": f"{cause['why']}: its ranks restart to take part in it",
                                       "exit_code": ExitCode.STOPPED_BY_PEER, "cause": cause}))
        for event in list(self._events):
            if event["t"] == "stop" and event.get("attempt") == self.attempt or event["t"] == "lost":
                cause = event["cause"] if event["t"] == "stop" else {"kind": "lost", "host": event["host"],
                                                                     "why": event["why"], "end": time.time()}
                code = ExitCode.HOST_LOST if cause.get("kind") == "lost" else ExitCode.STOPPED_BY_PEER
                ordered = cause.get("exit_code")
                if cause.get("order") == "GracefulExit" and isinstance(ordered, int):   # MindCluster told every
                    code = ordered                                                    # pod: one code on each
                if event["t"] == "stop":
                    self._events.remove(event)
                found.append(("job_stop", {"why": describe(cause), "exit_code": code, "cause": cause}))
        return found

    def joined(self, signal_fd: int | None, timeout: float) -> bool:
        """Wait until the coordinator said the job's active hosts (in its welcome with spares; once the job
        formed with --nnodes MIN:MAX); False when it refused or was lost, the job never formed, a signal came
        (on ``signal_fd``), or ``timeout`` passed."""
        selector = selectors.DefaultSelector()
        selector.register(self._main_r, selectors.EVENT_READ)
        if signal_fd is not None:
            selector.register(signal_fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while True:
                self._drain(self._main_r)
                if any(e["t"] in ("lost", "verdict") for e in self._events):   # refused, gone, or never formed
                    return False
                if any(e["t"] == "attempt" and "active" in e for e in self._events):   # the job's hosts, said
                    break
                left = deadline - time.monotonic()
                if left <= 0 or any(key.fd == signal_fd for key, _ in selector.select(left)):
                    return False
            self._take_attempts()
            return True
        finally:
            selector.close()

    def refusal(self) -> dict | None:
        """Once ``joined`` returned False: the coordinator's refusal of this host (``why``, and
        ``excluded_until`` for a replaced host in its cooldown), or None when it was not refused."""
        return next((e for e in self._events if e["t"] == "lost" and e.get("refused")), None)

    def news(self) -> bool:
        """A spare's question: has the job stopped its attempt, ended, or been lost (events that wait)?"""
        self._drain(self._main_r)
        return any(e["t"] in ("stop", "verdict", "lost", "attempt") for e in self._events) or self.behind is not None

    def stopped(self, result) -> None:
        """This host stopped its attempt for a reason of its own: every other host stops too."""
        self._send({"t": "stop", "attempt": self.attempt, "cause": cause_of(result)})

    def finish(self, result, signal_fd: int | None = None, steps: list[str] | None = None,
               stacks: dict | None = None, slots: dict | None = None) -> dict:
        """Report this host's attempt and wait for the job's verdict (every host's attempt over, or a host
        lost); a signal to dlaunch meanwhile ends the wait with this host's own verdict."""
        if result.exit_code == 0 and self.member.state in ("waiting", "connecting"):
            say(f"this host's ranks succeeded before the job's coordinator at "
                f"{protocol.endpoint(self.member.address, self.member.port)} answered: not waiting for the other "
                f"hosts' verdict")
            return {}
        self._take_attempts()
        if self.behind is None:
            for part in protocol.stack_parts(stacks or {}, self.attempt):
                self._send(part)
            self._send({"t": "result", "attempt": self.attempt, "exit_code": result.exit_code,
                        "status": "succeeded" if result.exit_code == 0 else "failed", "steps": steps or [],
                        **({"slots": slots} if slots is not None else {})})
        selector = selectors.DefaultSelector()
        selector.register(self._main_r, selectors.EVENT_READ)
        if signal_fd is not None:
            selector.register(signal_fd, selectors.EVENT_READ)
        try:
            while True:
                verdict = self._verdict_delivered()
                if verdict is not None:
                    return verdict
                ready = selector.select()
                if any(key.fd == signal_fd for key, _ in ready):
                    # a verdict that arrived with the signal still counts: srun ends a job with SIGTERM the
                    # moment the first host exits, which is just after the verdict was sent to every host
                    return self._verdict_delivered() or {}
        finally:
            selector.close()

    def _verdict_delivered(self) -> dict | None:
        """The job's verdict among the events the network thread delivered (or this host's own, naming a lost
        host, when none will come); None while there is none."""
        self._drain(self._main_r)
        self._take_attempts()
        if self.behind is not None:   # no verdict for an attempt the job left: restart into the job's
            behind, self.behind = self.behind, None
            self.attempt = behind["attempt"]
            cause = {"kind": "late", "host": self.hosts[self.index],
                     "why": f"this host joined the job at its attempt {behind['attempt']}"}
            return {"t": "verdict", "attempt": self.attempt - 1, "status": "failed", "restart": True,
                    "next_attempt": behind["attempt"], "resume_step": behind.get("resume_step"),
                    "root_cause": cause, "late": True}
        for event in list(self._events):
            self._events.remove(event)
            if event["t"] == "stack" and event["attempt"] == self.attempt:
                entry = self.stacks.setdefault(str(event["rank"]), {"host": event.get("host"), "text": ""})
                entry["text"] += str(event.get("text", ""))
            if event["t"] == "verdict" and event["attempt"] == self.attempt:
                if event.get("restart"):
                    self.attempt += 1
                return event
            if event["t"] == "lost":   # no verdict will come: this host's own, naming the lost host
                cause = {"kind": "lost", "host": event["host"], "why": event["why"]}
                say(f"no verdict from the job: {describe(cause)}")
                return {"t": "verdict", "attempt": self.attempt, "status": "failed", "restart": False,
                        "exit_code": ExitCode.HOST_LOST, "root_cause": cause}
        return None

    def _take_attempts(self) -> None:
        """The job's attempt as the coordinator said it (on joining, or to a host behind it): a host that
        joined after a restart is ``behind`` until it restarts into the job's attempt."""
        for event in [e for e in self._events if e["t"] == "attempt"]:
            self._events.remove(event)
            attempt = event.get("attempt")
            if isinstance(event.get("active"), list):
                self.active = event["active"]
            if isinstance(attempt, int) and attempt > self.attempt:
                self.behind = {"attempt": attempt, "resume_step": event.get("resume_step")}

    def close(self) -> None:
        self._closing = True
        self._wake(self._main_w)
        self._thread.join(timeout=5)
        for sock in (self._main_r, self._thread_w, self._thread_r, self._main_w):
            sock.close()

    # ---------------------------------------------------------------- the network thread

    def _send(self, message: dict) -> None:
        self._outbox.append(message)
        self._wake(self._main_w)

    def _deliver(self, event: dict) -> None:
        self._events.append(event)
        self._wake(self._thread_w)

    @staticmethod
    def _wake(sock: socket.socket) -> None:
        try:
            sock.send(b"x")
        except (BlockingIOError, OSError):
            pass   # a full pipe already wakes the reader

    @staticmethod
    def _drain(sock: socket.socket) -> None:
        try:
            while sock.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._thread_r, selectors.EVENT_READ, ("wake", None))
        if self.coordinator:
            self.coordinator.register(selector)
        self.member.register(selector)
        try:
            self._serve_with(selector)
        except Exception as exc:   # a dlaunch defect: this host must not wait for a verdict that cannot come
            self._deliver({"t": "lost", "host": self.hosts[self.index],
                           "why": f"this host's job link failed ({type(exc).__name__}: {exc})"})
        finally:
            if self.coordinator:
                self.coordinator.close()
            selector.close()

    def _serve_with(self, selector: selectors.BaseSelector) -> None:
        while not self._closing:
            timeout = self.member.tick()
            if self.coordinator:
                timeout = min(timeout, self.coordinator.tick())
            for key, mask in selector.select(timeout):
                owner, data = key.data
                if owner == "wake":
                    self._drain(self._thread_r)
                    while self._outbox:
                        self.member.send(self._outbox.popleft())
                elif owner == "member":
                    self.member.on_ready(mask)
                else:
                    assert self.coordinator is not None   # only the coordinator registers other keys
                    self.coordinator.on_ready(data, mask)


def rendezvous(opts, table, environ: Mapping[str, str]) -> tuple[str, int, bytes, str]:
    """Where the job's coordinator listens and what every host proves to it: (address, port, secret, the
    job's name every host agrees on: the run id when it is shared, else the master address and port, as hosts
    started without --run-id, e.g. one dlaunch torchrun per node, each make their own run id)."""
    job_id = opts.job_name or (opts.run_id if opts.run_id_shared else f"{opts.master_addr}:{opts.master_port}")
    secret = protocol.job_secret(environ, job_identity(table), job_id)
    return opts.job_addr or opts.master_addr, job_port(opts), secret, job_id


def job_port(opts) -> int:
    """``--job-port``, by default the port after MASTER_PORT (fixed for the whole job: restarts may move
    MASTER_PORT, never this)."""
    return opts.job_port or (opts.master_port % 65535) + 1

"""``--metrics-port``: this host's part of the job for Prometheus, from what the launcher already knows.

The event loop writes a snapshot (``MetricsFeed``) at most once a ``SNAPSHOT_SECONDS`` from what it holds in
memory: its ranks' processes, the step times its step reader read (``stepreader.py``), the straggler scores
(``base.stragglers``, every ``SCORE_SECONDS`` when there are new times), the hang watch's budget, the attempts
and their restarts, and every ``CHECKPOINT_SECONDS`` the newest checkpoint step every rank completed, in
Prometheus's text format (``base.exposition``: written once per snapshot, bytes the scrapes share). A daemon
thread serves it (``MetricsServer``): a scrape sends the bytes it finds, never reads a rank's file nor waits
for the loop; the loop never waits for a scrape. Nothing here is imported without the flag.
"""

from __future__ import annotations

import os
import selectors
import threading
import time

from launcher.base.console import say
from launcher.base.exposition import CONTENT_TYPE, Family, labels, render
from launcher.base.pace import Pace
from launcher.base.stragglers import THRESHOLD, scores

TYPE_CHECKING = False
if TYPE_CHECKING:
    from launcher.execute.local.hangs import HangWatch
    from launcher.execute.local.stepreader import StepReader
    from launcher.execute.results import AttemptResult, RankResult
    from launcher.plan.make import LaunchPlan

SNAPSHOT_SECONDS = 1.0     # the loop's snapshot is made at most this often
SCORE_SECONDS = 15.0       # straggler scores (a median per window of every rank's times: 0.5 s of CPU at 1,024
                           # ranks of 200 times, benchmarks/results.md) at most this often, and only on new times
CHECKPOINT_SECONDS = 10.0  # the newest complete checkpoint step looked for at most this often
MAX_CLIENTS = 16           # connections answered at once; more are closed unanswered (a flood costs no threads)
CLIENT_SECONDS = 5.0       # a client that sends no whole request within this long is dropped
STATES = ("starting", "running", "restarting", "succeeded", "failed", "hung")   # dlaunch_ranks{state}
REASONS = ("error", "signal", "hang")   # dlaunch_restarts_total{reason}: exit_class; "peer": another host's failure


def exit_class(code: int | None, hung: bool = False) -> str:
    """A restart's reason as a label: ``hang``, ``signal`` (128+N), ``error`` (any other exit code)."""
    if hung or code == 124:
        return "hang"
    if code is not None and 128 < code < 192:
        return "signal"
    return "error"


def state_of(result: RankResult, waiting: bool = False, alive: bool = False) -> str:
    """One of ``STATES`` for a rank of this host (``status_class`` maps ``dlaunch status``'s words to the same)."""
    if waiting:
        return "restarting"
    if alive:
        return "running"
    if result.hang:
        return "hung"
    if result.returncode is None:
        return "starting" if result.end is None else "failed"
    return "succeeded" if result.exit_code == 0 and not result.spawn_error else "failed"


def status_class(state: str) -> str | None:
    """``dlaunch status``'s state of a rank (``running``, ``exited 0``, ``died of SIGKILL``, ..., with
    ``, restarted ...``) as one of ``STATES``; None for one this host cannot see (``remote``)."""
    word = state.split(",")[0].strip()
    if word in ("running", "starting", "hung"):
        return word
    if word == "exited 0":
        return "succeeded"
    if word.startswith(("exited", "died of", "failed to start")):
        return "failed"
    return None


class MetricsFeed:
    """The snapshot of this host's launch, and the server that answers scrapes with it."""

    def __init__(self, host: str):
        self.host = host
        self._host = labels(host=host)
        self.attempt = 0
        self.attempts = 0
        self.restarts: dict[tuple[str, str], int] = {}     # (policy, reason) -> restarts of attempts that ended
        self.live_restarts: dict[tuple[str, str], int] = {}  # ... of the attempt that runs (in place)
        self.notices = 0
        self.fault_at: float | None = None    # the last fault: a rank's failure here, or the attempt's stop
        self.recovered: float | None = None   # seconds from it to the first step after it
        self.checkpoint: tuple[int, float] | None = None   # (newest complete step, when its last file was written)
        self.standby: int | None = None
        self.replaced = 0
        self.states: dict[int, str] = {}
        self.seen: dict[int, float] = {}    # rank -> when its last step line was read
        self.report: dict | None = None
        self.hang_budget: float | None = None
        self.reader: StepReader | None = None   # the attempt's (its steps are read in the loop's thread only)
        self._rank_labels: dict[int, str] = {}
        self._scored: tuple = ()   # what the step times were when last scored
        self._due = Pace(SNAPSHOT_SECONDS).due
        self._score_due = Pace(SCORE_SECONDS).due
        self._checkpoint_due = Pace(CHECKPOINT_SECONDS).due
        self.body: bytes = render(self.families())   # the newest snapshot, as a scrape sends it
        self.server: MetricsServer | None = None

    # ------------------------------------------------------------------ what the launch tells it

    def begin(self, plan: LaunchPlan) -> None:
        """An attempt starts: its ranks are starting."""
        self.attempt, self.attempts = plan.attempt, self.attempts + 1
        if plan.policy.max_restarts or plan.policy.reset_config:   # a counter that may grow is said from 0
            for reason in REASONS:
                self.restarts.setdefault((plan.policy.restart_policy, reason), 0)
        self.live_restarts = {}
        self.states = {spec.rank: "starting" for spec in plan.ranks if spec.rank is not None}
        self.seen = {}
        self.publish()

    def update(self, ranks: list, reader: StepReader | None, hangs: HangWatch | None, plan: LaunchPlan) -> None:
        """From the event loop (``watches.Watches.tick``): at most once a ``SNAPSHOT_SECONDS``."""
        if not self._due():
            return
        self.states = {p.spec.rank: state_of(p.result, p.waiting, p.alive) for p in ranks if p.spec.rank is not None}
        live: dict[tuple[str, str], int] = {}
        for process in ranks:
            for before in process.result.restarts:
                key = (plan.policy.restart_policy, exit_class(before.get("exit_code")))
                live[key] = live.get(key, 0) + 1
                self._fault(before.get("end"))
        self.live_restarts = live
        if reader is not None:
            seen = tuple((len(r.times), r.last_step, r.times[-1] if r.times else None) for r in reader.steps.values())
            if seen != self._scored and (self.report is None or self._score_due()):
                self.report, self._scored = scores(list(reader.steps.values())), seen
        self.hang_budget = hangs.budget() if hangs is not None else None
        if self._checkpoint_due():
            self.look_for_checkpoint(plan)
        self.reader = reader
        self.publish()

    def stepped(self, rank: int) -> None:
        """A rank's step line was read just now; the first after a fault ends the time to training again."""
        now = time.time()
        self.seen[rank] = now
        if self.fault_at is not None and self.recovered is None and now > self.fault_at:
            self.recovered = now - self.fault_at

    def ended(self, result: AttemptResult, plan: LaunchPlan, restart: bool) -> None:
        """An attempt ended (``restart``: the launch starts the next one)."""
        self.states = {r.rank: state_of(r) for r in result.ranks if r.rank is not None}
        for rank in result.ranks:   # its ranks' restarts in place, all of them (the last second's too)
            for before in rank.restarts:
                key = (plan.policy.restart_policy, exit_class(before.get("exit_code")))
                self.restarts[key] = self.restarts.get(key, 0) + 1
                self._fault(before.get("end"))
        self.live_restarts = {}
        self.notices += int(result.extra.get("notices", 0))
        cause = result.root_cause
        if cause is not None or result.stopped_by is not None:
            self._fault(cause.end if cause is not None and cause.end else result.stopped_at or time.time())
        if restart:
            reason = exit_class(cause.exit_code, bool(cause.hang)) if cause is not None else "peer"
            self.restarts[("job", reason)] = self.restarts.get(("job", reason), 0) + 1
        self.look_for_checkpoint(plan)
        self.publish()

    def roster(self, standby: int, replaced: int) -> None:
        """--spares: hosts standing by, hosts replaced so far."""
        self.standby, self.replaced = standby, replaced

    def _fault(self, at: float | None) -> None:
        if at is not None and (self.fault_at is None or at > self.fault_at):
            self.fault_at, self.recovered = at, None

    def look_for_checkpoint(self, plan: LaunchPlan) -> None:
        """The newest step every rank of this host completed (``checkpoint.resume``: its own file or a replica's;
        the job's is the least over its hosts), and when its last file was written."""
        from launcher.checkpoint.resume import scan

        own = {spec.rank for spec in plan.ranks if spec.rank is not None}
        try:
            for step in reversed(scan(plan.run_dir)[0] if own else []):
                files = step.covering(own)
                if files is not None:
                    self.checkpoint = (step.step, max(os.stat(path).st_mtime for path in files.values()))
                    return
        except (OSError, ValueError):
            pass   # a checkpoint being removed as it is looked at: the one seen before stays

    # ------------------------------------------------------------------ the snapshot

    def publish(self) -> None:
        self.body = render(self.families())   # one reference swapped: a scrape sends the old bytes or the new

    def _rank(self, rank: int, host: str) -> str:
        text = self._rank_labels.get(rank)
        if text is None:
            text = self._rank_labels[rank] = labels(rank=rank, host=host)
        return text

    def families(self) -> list[Family]:
        """Every metric as of now."""
        now, host = time.time(), self._host

        def family(name: str, kind: str, text: str, value: float | None = None) -> Family:
            made = Family(name, kind, text)
            made.add(host, value)
            return made

        ranks = family("dlaunch_ranks", "gauge", "This host's ranks by state.")
        counts = {state: 0 for state in STATES}
        for state in self.states.values():
            counts[state] += 1
        for state, count in counts.items():
            ranks.add(f'{host},state="{state}"', count)
        restarts = family("dlaunch_restarts_total", "counter",
                          "Ranks (policy rank, group) or attempts (policy job) started again, by policy and reason.")
        total = dict(self.restarts)
        for key, count in self.live_restarts.items():
            total[key] = total.get(key, 0) + count
        for (policy, reason), count in sorted(total.items()):
            restarts.add(f'{host},policy="{policy}",reason="{reason}"', count)
        out = [ranks,
               family("dlaunch_attempt", "gauge", "The attempt this host runs (0: the first).", self.attempt),
               family("dlaunch_attempts_total", "counter", "Attempts this host started.", self.attempts),
               restarts,
               family("dlaunch_last_fault_timestamp_seconds", "gauge", "When the last fault happened (Unix time).",
                      self.fault_at),
               family("dlaunch_fault_recovery_seconds", "gauge",
                      "Seconds from the last fault to the first step line after it.", self.recovered),
               family("dlaunch_checkpoint_step", "gauge",
                      "The newest checkpoint step every rank of this host completed.",
                      self.checkpoint[0] if self.checkpoint else None),
               family("dlaunch_checkpoint_timestamp_seconds", "gauge",
                      "When the newest complete checkpoint's last file was written (Unix time).",
                      self.checkpoint[1] if self.checkpoint else None),
               family("dlaunch_checkpoint_age_seconds", "gauge", "Seconds since the newest complete checkpoint.",
                      round(now - self.checkpoint[1], 3) if self.checkpoint else None),
               family("dlaunch_hang_timeout_seconds", "gauge", "The hang timeout in force now (learned or given).",
                      self.hang_budget),
               family("dlaunch_survivor_notices_total", "counter",
                      "Surviving ranks told of a failure (--survivor-window).", self.notices),
               family("dlaunch_spares_standing_by", "gauge", "Spare hosts standing by (--spares).", self.standby),
               family("dlaunch_hosts_replaced_total", "counter", "Hosts of the job replaced by a spare.",
                      self.replaced if self.standby is not None else None),
               family("dlaunch_snapshot_timestamp_seconds", "gauge", "When this snapshot was made (Unix time).",
                      round(now, 3))]
        out += self._step_families()
        return out

    def _step_families(self) -> list[Family]:
        report = self.report or {"ranks": [], "hosts": []}
        step = Family("dlaunch_rank_last_step", "gauge", "The last step a rank's step line named.")
        seen = Family("dlaunch_rank_last_step_timestamp_seconds", "gauge",
                      "When the launcher read the rank's last step line (Unix time).")
        median = Family("dlaunch_rank_step_seconds", "gauge", "A rank's median step time.")
        relative = Family("dlaunch_rank_straggler_relative", "gauge",
                          "The fastest rank's median step time over this rank's (1: the fastest).")
        own = Family("dlaunch_rank_straggler_individual", "gauge", "A rank's best step time over its current one.")
        steps = self.reader.steps if self.reader is not None else {}
        for rank, times in sorted(steps.items()):
            text = self._rank(rank, times.host)
            step.add(text, times.last_step)
            seen.add(text, round(self.seen[rank], 3) if rank in self.seen else None)
        for row in report["ranks"]:
            text = self._rank(row["rank"], row["host"])
            median.add(text, row["median_ms"] / 1000.0)
            relative.add(text, row["relative"])
            own.add(text, row["individual"])
        host_relative = Family("dlaunch_host_straggler_relative", "gauge",
                               "The fastest host's median step time over this host's (its ranks' times pooled).")
        host_median = Family("dlaunch_host_step_seconds", "gauge", "A host's median step time (its ranks' pooled).")
        for row in report["hosts"]:
            text = labels(host=row["host"])
            host_relative.add(text, row["relative"])
            host_median.add(text, row["median_ms"] / 1000.0)
        threshold = Family("dlaunch_straggler_threshold", "gauge", "A score under this flags a rank or host.")
        threshold.add("", report.get("threshold", THRESHOLD) if self.report else None)
        return [step, seen, median, relative, own, host_relative, host_median, threshold]

    # ------------------------------------------------------------------ serving

    def serve(self, address: str, port: int) -> bool:
        """Start answering scrapes on ``address:port``; False (said) when the port cannot be had."""
        try:
            self.server = MetricsServer(self, address, port)
        except OSError as exc:
            say(f"--metrics-port {port}: cannot listen on {address}: {exc.strerror or exc}; no metrics served")
            return False
        say(f"metrics for Prometheus: http://{address}:{self.server.port}/metrics")
        return True

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


class MetricsServer:
    """``GET /metrics`` on a daemon thread: the feed's newest snapshot, as the loop wrote it. Its thread waits on
    a selector of the listening socket and a wake-up pipe, so ``close`` returns at once."""

    def __init__(self, feed: MetricsFeed, address: str, port: int):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        server_self = self

        slots = threading.BoundedSemaphore(MAX_CLIENTS)

        class Handler(BaseHTTPRequestHandler):
            timeout = CLIENT_SECONDS   # http.server bounds the request's lines (64 KiB) and headers (100)
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:   # noqa: N802 - http.server's name
                if self.path.split("?")[0] in ("/metrics", "/metrics/"):
                    body, kind, code = server_self.feed.body, CONTENT_TYPE, 200
                else:
                    body, kind, code = b"dlaunch: metrics are at /metrics\n", "text/plain; charset=utf-8", 404
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args) -> None:   # noqa: A002 - quiet: no line per scrape
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def process_request(self, request, client_address) -> None:
                if not slots.acquire(blocking=False):   # MAX_CLIENTS already: closed at once, no thread
                    self.shutdown_request(request)
                    return
                super().process_request(request, client_address)

            def process_request_thread(self, request, client_address) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    slots.release()

        self.feed = feed
        self.httpd = Server((address, port), Handler)
        self.port = self.httpd.server_address[1]
        self._wake_r, self._wake_w = os.pipe()
        self.thread = threading.Thread(target=self._serve, name="dlaunch-metrics", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.httpd.socket, selectors.EVENT_READ, "listen")
            selector.register(self._wake_r, selectors.EVENT_READ, "wake")
            try:
                while True:
                    events = selector.select()
                    if any(key.data == "wake" for key, _ in events):
                        break
                    self.httpd.handle_request()   # readable: accepts at once, a thread answers
            finally:
                self.httpd.server_close()
                os.close(self._wake_r)

    def close(self) -> None:
        """Stop listening (the serving thread closes the socket); returns without waiting."""
        try:
            os.write(self._wake_w, b"x")
        finally:
            os.close(self._wake_w)

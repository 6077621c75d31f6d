"""``dlaunch logs``: ranks' output, each line prefixed ``[rankN]: ``, printed or followed as it grows."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from launcher.base.console import settle_streams
from launcher.base.lines import LineBuffer, open_regular, tail_offset, with_prefix
from launcher.errors import UsageError
from launcher.observe import tell_problems
from launcher.observe.processes import Observer
from launcher.rundir.read import RankRef, current_attempt, load_run, log_attempts, log_path, run_directory, select_ranks

FOLLOW_POLL_SECONDS = 0.1     # logs --follow: how often log sizes are checked
RESCAN_SECONDS = 1.0          # logs --follow: how often new attempts, ranks and the run's end are looked for
READ_CHUNK = 1 << 20          # logs: bytes read at a time


class _Tail:
    """One log file being read: where we are, and a line not yet ended."""

    def __init__(self, ref: RankRef, attempt: int, offset: int = 0):
        self.ref, self.attempt, self.offset = ref, attempt, offset
        self.path = log_path(ref, attempt)
        self.buffer = LineBuffer(READ_CHUNK)   # a "line" without end (a progress bar): shown in pieces
        self.prefix = f"[{ref.label}]: ".encode()

    def read(self, out, final: bool = False) -> bool:
        """Write the whole lines appended since the last read; ``final`` also writes an unended last line."""
        fh = open_regular(self.path)   # never a FIFO or device put in a log's place
        if fh is None:
            return False
        with fh:
            size = os.fstat(fh.fileno()).st_size
            wrote = False
            if size > self.offset:
                fh.seek(self.offset)
                while self.offset < size:  # in bounded chunks: logs can be gigabytes
                    chunk = fh.read(min(READ_CHUNK, size - self.offset))
                    if not chunk:
                        break
                    self.offset += len(chunk)
                    wrote = self._write(out, self.buffer.feed(chunk)) or wrote
        if final:
            wrote = self._write(out, self.buffer.flush()) or wrote
        return wrote

    def _write(self, out, lines: bytes) -> bool:
        """Write whole ``lines``, each prefixed."""
        if not lines:
            return False
        out.write(b"".join(with_prefix(line, self.prefix) + b"\n" for line in lines.removesuffix(b"\n").split(b"\n")))
        return True


def _parse_attempt(text: str):
    if text == "all":
        return "all"
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"bad --attempt {text!r}: a number (0 is the first) or all") from None
    if value < 0:
        raise UsageError("--attempt cannot be negative")
    return value


@dataclass(frozen=True)
class LogsRequest:
    """``dlaunch logs``'s settings (``cli.logs`` builds it)."""

    run_dir: str | None
    output_dir: str
    rank: list[str] | None
    follow: bool
    lines: int | None
    attempt: str | None


def cmd_logs(args: LogsRequest) -> int:
    try:
        return _logs(args)
    except KeyboardInterrupt:  # Ctrl-C is how one leaves --follow: not an error
        settle_streams()
        return 0


def _logs(args: LogsRequest) -> int:
    run_dir = run_directory(args.run_dir, args.output_dir)
    attempt = _parse_attempt(args.attempt) if args.attempt is not None else None
    run = load_run(run_dir)
    tell_problems(run)
    refs = select_ranks(run, args.rank)
    if run.missing_hosts:
        from launcher.base.console import say

        say("never reported (no logs of theirs here): "
            + ", ".join(f"{h['host']} (ranks {h['ranks']})" for h in run.missing_hosts))
    out = sys.stdout.buffer
    tails: dict[int, _Tail] = {}
    for ref in refs:
        attempts = log_attempts(ref.rank_dir)
        if attempt == "all":
            chosen = attempts or [0]
        elif attempt is not None:
            if attempt not in attempts and not args.follow:
                raise UsageError(f"rank {ref.rank} has no log of attempt {attempt} (it has: "
                                 f"{', '.join(map(str, attempts)) or 'none'})")
            chosen = [attempt]
        else:
            chosen = [attempts[-1] if attempts else 0]
        for number in chosen[:-1]:
            _note(out, f"rank {ref.rank}: attempt {number} ({os.path.basename(log_path(ref, number))})")
            done = _Tail(ref, number, tail_offset(log_path(ref, number), args.lines)
                         if args.lines is not None else 0)
            done.read(out, final=True)
        if len(chosen) > 1:
            _note(out, f"rank {ref.rank}: attempt {chosen[-1]} ({os.path.basename(log_path(ref, chosen[-1]))})")
        path = log_path(ref, chosen[-1])
        tail = _Tail(ref, chosen[-1], tail_offset(path, args.lines) if args.lines is not None else 0)
        tail.read(out, final=not args.follow)
        tails[ref.rank] = tail
    out.flush()
    if not args.follow:
        return 0
    return _follow(run_dir, args, tails, fixed_attempt=isinstance(attempt, int), out=out)


def _follow(run_dir: str, args: LogsRequest, tails: dict[int, _Tail], fixed_attempt: bool, out) -> int:
    """Print lines as they are appended to any followed log, until the run is over or Ctrl-C."""
    observer = Observer(run_dir)
    next_scan = 0.0
    while True:
        wrote = False
        for tail in tails.values():
            wrote = tail.read(out) or wrote
        if wrote:
            out.flush()
        now = time.monotonic()
        if now >= next_scan:
            next_scan = now + RESCAN_SECONDS
            run = load_run(run_dir)
            if not fixed_attempt:
                _switch_attempts(tails, out)
            if not args.rank:
                for ref in run.ranks:  # a host that started later in a shared run directory
                    if ref.rank not in tails:
                        tails[ref.rank] = _Tail(ref, current_attempt(ref))
            if run.finished or observer.over():
                for tail in tails.values():
                    tail.read(out, final=True)
                out.flush()
                return _verdict(observer)
        time.sleep(FOLLOW_POLL_SECONDS)


def _verdict(observer: Observer) -> int:
    """A followed run is over: unless it succeeded, say how it ended (on stderr) and exit with its code."""
    from launcher.base.console import printable, say
    from launcher.observe.status import finished_code, headline

    snap = observer.snapshot()
    code = finished_code(snap)
    if code:
        say(*(printable(line) for line in headline(snap)))
    return code


def _note(out, text: str) -> None:
    """A remark between log lines: on stderr, so stdout holds only the ranks' lines."""
    out.flush()
    sys.stderr.write(f"dlaunch: {text}\n")
    sys.stderr.flush()


def _switch_attempts(tails: dict[int, _Tail], out) -> None:
    """A rank restarted: finish its old log, go on with the new attempt's."""
    for rank, tail in list(tails.items()):
        newest = current_attempt(tail.ref)
        if newest > tail.attempt:
            tail.read(out, final=True)
            _note(out, f"rank {rank} restarted: following {os.path.basename(log_path(tail.ref, newest))}")
            tails[rank] = _Tail(tail.ref, newest)

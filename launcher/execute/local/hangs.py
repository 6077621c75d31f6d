"""Hang detection: a rank that shows no sign of life for too long is a failure, with its stack on record.

A rank is alive while it writes output (its log file grows), touches its
heartbeat file (``launcher.heartbeat.beat()``, e.g. once a step), or saves a
checkpoint (its checkpoint directory changes, or a save's temporary file in it
grows: dlaunch's own saves also beat the heartbeat while they write, MindSpore's
``{prefix}-{epoch}_{step}.tmp`` only grow).  All three are file times, so
watching costs the launcher a few ``stat`` calls and one directory listing per
rank per check, whatever the rank prints.  Before the job is stopped, the
Python stack of every rank on this host goes into its rank directory
(``py-spy dump``), so the blocking call (an all_reduce one rank never joined, a
dead data loader) is on record, after a line with the rank's last sign of life and
step, from which ``execute.blame`` names the rank that stopped first.  The budget is
``--hang-timeout``, or with ``--hang-learn`` what the job's own silences taught
(``hangclock``).

With ``--hang-learn`` a rank is judged by its own steps, never by another rank's: Megatron prints its
iteration line on the last rank only, HF Trainer, Lightning and nanoGPT on rank 0, so the other ranks show no
step.  A rank that reported steps of its own (``beat(step=N)``, a step line) has the learned budget; one that
did not has ``--hang-timeout``, its CPU time counts as a sign of life (``BUSY_SHARE`` of a core since the last
look: loading data, compiling), and it is not hung while the job advances (a rank of this host made a step
within the step budget): in a synchronous job a rank that waits is waited for.  Once a rank of the attempt
exited 0 the job is finishing (a last save, teardown): every rank left has ``--hang-timeout``.  A real hang
(a rank stopped, the others waiting in a collective) stops every rank's steps, so the ranks that report steps
are called on the learned budget and ``execute.blame`` names the one that stopped first from the stacks.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from launcher.base.border import Refused, parse_json, read_text
from launcher.base.lines import tail_lines
from launcher.checkpoint import names as ckptnames
from launcher.contract import HEARTBEAT_FILE
from launcher.execute.local.hangclock import CHECK_SECONDS, CHECKPOINT, WARMUP_STEPS, HangClock
from launcher.plan.make import RankSpec
from launcher.rundir.paths import attempt_file

STACK_DUMP_SECONDS = 20.0
HEARTBEAT_LIMIT = 4096       # bytes of a heartbeat file read (beat() writes some 60)
LAUNCHER_GAP_SECONDS = 1.0   # the launcher slept this much longer than it asked: it was stopped (SIGSTOP, Ctrl-Z)
BUSY_SHARE = 0.25            # a rank with no steps of its own using this share of a core is alive (learning only)
CPU_LOOK_SECONDS = 0.5       # its CPU time is read this often at most


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _saves_in_progress(directory: str) -> float:
    """When a checkpoint being written into ``directory`` last grew (0: none is)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0.0
    return max((_mtime(os.path.join(directory, name)) for name in names
                if (parsed := ckptnames.parse(name)) is not None and parsed.kind == ckptnames.TEMPORARY), default=0.0)


def last_sign_of_life(spec: RankSpec, started: float) -> float:
    """When the rank last wrote output, beat its heartbeat, touched its checkpoint directory or wrote a
    checkpoint into it (epoch seconds)."""
    signs = [started, _mtime(spec.log_file), _mtime(os.path.join(spec.rank_dir, HEARTBEAT_FILE))]
    if spec.ckpt_dir is not None:   # MindSpore's scheduler has no checkpoint directory
        signs += [_mtime(spec.ckpt_dir), _saves_in_progress(spec.ckpt_dir)]
    return max(signs)


def read_heartbeat(path: str) -> tuple[int | None, str | None]:
    """(step, phase) a rank's heartbeat says (``beat(step=N)``, ``heartbeat.phase(...)``); (None, None) for a
    plain touch, or a file that is not (yet) what beat() writes (a FIFO, a link, 3,000 ``[``: the border's)."""
    try:
        text = read_text(path, "heartbeat", HEARTBEAT_LIMIT)
        return parse_heartbeat(text or "null")
    except Refused:
        return None, None


def parse_heartbeat(text: str) -> tuple[int | None, str | None]:
    """A heartbeat file's text: (step, phase), each None where the file does not say one; Refused for what
    is not JSON."""
    data = parse_json(text, "heartbeat")
    if not isinstance(data, dict):
        return None, None
    step, phase = data.get("step"), data.get("phase")
    return (step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None,
            phase[:200] if isinstance(phase, str) and phase else None)


@dataclass
class Pulse:
    """What the watch knows of one rank between looks."""

    sign: float                       # its last sign of life seen
    heartbeat: float = 0.0            # its heartbeat file's time when last read
    step: int | None = None           # the newest step it reported (beat(step=N), a step line)
    steps: int = 0                    # the steps it made this attempt, as far as its reports tell
    beat_phase: str | None = None     # the phase its heartbeat names
    phase: str | None = None          # the phase it is in (its heartbeat's, or a save being written), since when
    phase_since: float = 0.0
    step_at: float = 0.0              # when ``step`` was reported (the heartbeat's time, or when its line was read)
    cpu: float | None = None          # its process tree's CPU seconds at the last read, and when that was
    cpu_at: float = 0.0
    busy_at: float = 0.0              # when its CPU time last showed it working (a rank with no steps of its own)


def _steps_between(before: int | None, now: int | None, reports: int) -> int:
    """Steps a rank made between two reports (a heartbeat is written at most once a second, a log line may
    cover several steps): the difference of their step numbers where both are known, else the reports."""
    if before is not None and now is not None and now > before:
        return now - before
    return reports


class HangWatch:
    """Which rank, if any, has been silent for longer than its budget: ``timeout`` (``--hang-timeout``), or with
    a ``clock`` (``--hang-learn``, ``hangclock``) the budget learned from the job's own silences."""

    def __init__(self, timeout: float, started: float, clock: HangClock | None = None, multi_host: bool = False):
        self.timeout = timeout
        self.multi_host = multi_host         # the rank the others wait for may be on another host
        self.started = started
        self.clock = clock
        self.interval = CHECK_SECONDS if clock else min(0.5, timeout / 4)
        self.pulses: dict[str, Pulse] = {}   # rank directory -> what was seen of it
        self.steps = 0                       # the job's steps seen this attempt (the most any rank reported)
        self.phase_seen = 0.0                # when a rank of this host was last seen in a phase
        self.silent_for: dict[str, float] = {}   # rank directory -> its silence at the last look
        self.stepped_at = 0.0                # when a rank of this host last reported a new step (epoch s)
        self.finishing = False               # a rank of the attempt exited 0: the rest have --hang-timeout
        self._next_check = 0.0
        self._last_wake = 0.0

    def due(self) -> bool:
        """True at most once an interval: the launcher wakes for every chunk of console output, and
        checking on each wake-up would cost more than the output itself.

        Time the launcher did not run (stopped, or starved) is not the ranks' silence: their output waited
        in the pipes.  After such a gap the check is skipped (the waiting output is read first) and every
        rank's silence counts from the launcher's return."""
        now = time.monotonic()
        gap = now - self._last_wake if self._last_wake else 0.0
        self._last_wake = now
        if gap > self.interval + LAUNCHER_GAP_SECONDS:
            self.started = max(self.started, time.time())
            for pulse in self.pulses.values():   # nor is it a silence to learn from
                pulse.sign = max(pulse.sign, self.started)
            self._next_check = now + self.interval
            return False
        if now < self._next_check:
            return False
        self._next_check = now + self.interval
        return True

    def last_sign_of_life(self, spec: RankSpec) -> float:
        return last_sign_of_life(spec, self.started)

    def budget(self) -> float:
        """The silence this host's ranks that reported steps of their own are allowed now."""
        if self.clock is None:
            return self.timeout
        phase = next((pulse.phase for pulse in self.pulses.values() if pulse.phase), None)
        if phase is not None:
            return self.clock.phase_budget(phase)
        return self.clock.step_budget() if self.steps > 0 else self.clock.bound

    def own_steps(self, spec: RankSpec) -> bool:
        """Whether ``spec`` reported a step of its own this attempt (a learned budget applies to it)."""
        pulse = self.pulses.get(spec.rank_dir)
        return pulse is not None and pulse.steps > 0

    def budget_of(self, spec: RankSpec) -> float:
        """The silence ``spec`` is allowed now: the learned budget once it reported steps of its own, else the
        bound (``--hang-timeout``)."""
        if self.clock is None or (self.own_steps(spec) and not self.finishing):
            return self.budget()
        return self.clock.bound

    def budget_name(self, spec: RankSpec | None = None) -> str:
        """How the budget in force came about, for the hang's message."""
        if spec is not None and self.clock is not None and not self.own_steps(spec):
            return "--hang-timeout (it reported no step of its own)"
        if self.clock is not None and self.finishing:
            return "--hang-timeout (a rank ended: the job is finishing)"
        if self.clock is None or self.budget() == self.clock.bound:
            return "--hang-timeout"
        phase = next((pulse.phase for pulse in self.pulses.values() if pulse.phase), None)
        learned = f"learned {phase} budget" if phase else "learned hang timeout"
        return f"{learned} {self.budget():.3g} s"

    def stepped(self, spec: RankSpec, count: int, step: int | None = None) -> None:
        """``count`` step lines of ``spec``'s were read (the launch's step reader): progress for the warm-up."""
        pulse = self.pulses.get(spec.rank_dir)
        if pulse is not None and count:
            pulse.steps += _steps_between(pulse.step, step, count)
            pulse.step = step if step is not None else pulse.step
            pulse.step_at = self.stepped_at = time.time()
            self._count_steps()

    def find_hung(self, live: list[RankSpec], now: float | None = None,
                  pids: dict[str, int] | None = None) -> tuple[RankSpec, float] | None:
        """The live rank silent the longest of those silent past their budget (``budget_of``), if any.  ``pids``
        (rank directory -> pid): a rank with no steps of its own that uses CPU is alive."""
        now = time.time() if now is None else now
        if not live:
            return None
        silences = [(now - self._look(spec, now, (pids or {}).get(spec.rank_dir)), spec) for spec in live]
        self.silent_for = {spec.rank_dir: silence for silence, spec in silences}
        self._count_steps()
        advancing = self.clock is not None and now - self.stepped_at < self.clock.step_budget()
        hung = [(silence, spec) for silence, spec in silences if silence >= self.budget_of(spec)
                and (self.own_steps(spec) or not advancing)]   # a rank that waits is waited for
        if not hung:
            return None
        silent_for, spec = max(hung, key=lambda pair: pair[0])
        return spec, silent_for

    def _busy(self, pulse: Pulse, pid: int | None, now: float) -> None:
        """Note when a rank's CPU time last showed it working (``BUSY_SHARE`` of a core since the last read)."""
        if pid is None or now - pulse.cpu_at < CPU_LOOK_SECONDS:
            return
        from launcher.execute.local.proctree import cpu_seconds

        used = cpu_seconds(pid)
        if used is not None and pulse.cpu is not None and used - pulse.cpu >= BUSY_SHARE * (now - pulse.cpu_at):
            pulse.busy_at = now
        pulse.cpu, pulse.cpu_at = used, now

    def _look(self, spec: RankSpec, now: float, pid: int | None = None) -> float:
        """The rank's last sign of life, noting what its heartbeat says (step, phase) and, with a clock, what the
        silence that just ended and the phase that just ended taught."""
        sign = self.last_sign_of_life(spec)
        pulse = self.pulses.setdefault(spec.rank_dir, Pulse(sign))
        beat_path = os.path.join(spec.rank_dir, HEARTBEAT_FILE)
        beat_time = _mtime(beat_path)
        changed_at = now
        if beat_time != pulse.heartbeat:
            pulse.heartbeat = changed_at = beat_time   # a phase begins and ends when beat() wrote so
            step, pulse.beat_phase = read_heartbeat(beat_path)
            if step is not None and step != pulse.step:
                pulse.steps += _steps_between(pulse.step, step, 1)
                pulse.step, pulse.step_at = step, beat_time
                self.stepped_at = max(self.stepped_at, beat_time)
        phase = pulse.beat_phase
        if phase is None and spec.ckpt_dir is not None and _saves_in_progress(spec.ckpt_dir):
            phase, changed_at = CHECKPOINT, now
        if phase != pulse.phase:
            if pulse.phase is not None and self.clock is not None:
                self.clock.saw_phase(pulse.phase, max(0.0, changed_at - pulse.phase_since))
            pulse.phase, pulse.phase_since = phase, changed_at
        if pulse.phase is not None:
            self.phase_seen = now
        if sign > pulse.sign:
            if self.clock is not None and self.steps >= WARMUP_STEPS and pulse.sign > self.phase_seen \
                    and pulse.steps > 0:   # only a rank the learned budget applies to teaches it
                self.clock.saw_silence(sign - pulse.sign)   # a silence outside any phase, past the warm-up
            pulse.sign = sign
        if self.clock is not None and pulse.steps == 0:   # no steps of its own: working counts as alive
            self._busy(pulse, pid, now)
            return max(sign, pulse.busy_at)
        return sign

    def _count_steps(self) -> None:
        steps = max((pulse.steps for pulse in self.pulses.values()), default=0)
        if steps > self.steps:
            if self.clock is not None:
                self.clock.saw_steps(steps - max(self.steps, WARMUP_STEPS) if steps > WARMUP_STEPS else 0)
            self.steps = steps


def describe_hang(spec: RankSpec, silent_for: float, budget: str = "--hang-timeout", why: str | None = None) -> str:
    last = tail_lines(spec.log_file, 1)
    said = f"its last line, {silent_for:.1f} s ago: {last[0]!r}" if last else "it printed nothing"
    first = f"; it stopped first: {why}" if why else ""
    return (f"rank {spec.rank} hung: no output, heartbeat or checkpoint for {silent_for:.1f} s "
            f"({budget}){first}; {said}")


def dump_stacks(specs_and_pids: list[tuple[RankSpec, int]], attempt: int,
                headers: dict[str, str] | None = None) -> tuple[dict[int | None, str], str | None]:
    """Write every rank's Python stack to ``rank_dir/stack.txt`` in parallel, after its ``headers`` line (by
    rank directory: ``blame.header``); (files by rank, None for MindSpore's scheduler; why none) ."""
    import subprocess

    headers = headers or {}

    py_spy = _find_py_spy()
    files: dict[int | None, str] = {}
    if py_spy is None:
        why = "no stack could be taken: py-spy is not installed (pip install py-spy, or dlaunch[torch])"
        for spec, _ in specs_and_pids:
            path = attempt_file(spec.rank_dir, "stack", "txt", attempt)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(headers.get(spec.rank_dir, "") + why + "\n")
            files[spec.rank] = path
        return files, why
    running = []
    for spec, pid in specs_and_pids:
        path = attempt_file(spec.rank_dir, "stack", "txt", attempt)
        out = open(path, "wb")
        out.write(headers.get(spec.rank_dir, "").encode())
        out.flush()
        running.append((spec, path, out, subprocess.Popen([py_spy, "dump", "--pid", str(pid)], stdout=out,
                                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)))
    deadline = time.monotonic() + STACK_DUMP_SECONDS
    for spec, path, out, proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            out.write(b"\ndlaunch: py-spy did not finish in time\n")
        out.close()
        files[spec.rank] = path
    return files, None


def _find_py_spy() -> str | None:
    """py-spy on PATH, else beside the launcher's Python."""
    import shutil

    return shutil.which("py-spy") or _beside_python("py-spy")


def _beside_python(name: str) -> str | None:
    """Tools installed in the launcher's virtualenv are not always on PATH."""
    import sys

    candidate = os.path.join(os.path.dirname(sys.executable), name)
    return candidate if os.access(candidate, os.X_OK) else None


def check_hangs(hangs: HangWatch, live: list, attempt: int):
    """If a rank (of ``live``, RankProcess objects) has hung: every live rank's stack recorded, and the result of
    the rank that stopped first (``execute.blame``; else the one silent longest) returned; else None."""
    from launcher.execute.blame import read_state, stopped_first

    found = hangs.find_hung([p.spec for p in live], pids={p.spec.rank_dir: p.popen.pid for p in live})
    if not found:
        return None
    spec, silent_for = found
    dump_rank_stacks(live, attempt, hangs)
    culprit = stopped_first([read_state(p.spec.rank, "", _read(p.result.stack_file)) for p in live])
    why = None
    if culprit is not None:
        spec = next(p.spec for p in live if p.spec.rank == culprit[0].rank)
        silent_for, why = hangs.silent_for.get(spec.rank_dir, silent_for), culprit[1]
    hung = next(p.result for p in live if p.spec is spec)
    hung.hang = describe_hang(spec, silent_for, hangs.budget_name(found[0]), why)
    hung.stopped_first = culprit is not None
    if culprit is None and hangs.multi_host:
        hung.hang += ("; no rank here stands out (the one the others wait for may be on another host: the "
                      "master host reads every host's stacks)")
    return hung


def _read(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(1 << 20)
    except OSError:
        return ""


def dump_rank_stacks(live: list, attempt: int, hangs: HangWatch | None = None) -> None:
    """Every live rank's stack into its rank directory (py-spy), after a line with its last sign of life and
    step (``blame.header``), recorded in its result."""
    from launcher.base.console import say
    from launcher.execute.blame import header
    from launcher.rundir.create import describe_os_error

    headers = {}
    for p in live:
        pulse = hangs.pulses.get(p.spec.rank_dir) if hangs is not None else None
        sign = hangs.last_sign_of_life(p.spec) if hangs is not None else last_sign_of_life(p.spec, 0.0)
        beat = os.path.join(p.spec.rank_dir, HEARTBEAT_FILE)
        step, step_at = (pulse.step, pulse.step_at) if pulse is not None else (read_heartbeat(beat)[0], _mtime(beat))
        headers[p.spec.rank_dir] = header(sign, step, step_at)
    try:
        files, why = dump_stacks([(p.spec, p.popen.pid) for p in live], attempt, headers)
    except OSError as exc:   # a full disk must not turn a hang into a traceback
        files, why = {}, f"no stack could be written: {describe_os_error(exc)}"
    for process in live:
        process.result.stack_file = files.get(process.spec.rank)
    if why:
        say(why)

"""After a hang: which rank stopped first, the one the others wait for.

When one rank stops (a dead loop, a lost device, a sleep), the others go on to the next collective and wait
there; seconds later every rank is silent, and the rank silent longest is as likely a waiting one as the
culprit.  What tells them apart, strongest first:

1. **the stack**: the waiting ranks' main threads are inside a collective (a frame of
   ``torch/distributed/``, DDP's ``torch/nn/parallel/distributed.py``, MindSpore's ``communication`` or
   ``comm_ops``, or autograd's engine, ``torch/autograd/``: DDP's reducer, FSDP and Megatron's DDP all-reduce
   gradients inside backward, where a DDP rank waits for a stopped peer with no frame of torch.distributed);
   the culprit's is not (py-spy's dump, taken of every rank before the job is stopped);
2. **the step**: a rank that reported an older step than the others, and whose last sign of life is older
   than theirs by ``MARGIN`` (a heartbeat's step is written at most once a second: ranks waiting together
   may show steps a second apart), fell behind (``beat(step=N)``, step lines);
3. **the last sign of life**: older than every other rank's by more than ``MARGIN`` seconds, compared among the
   ranks that report steps where some do (Megatron prints on the last rank only, nanoGPT on rank 0: a rank
   that prints nothing has an old last sign of life whatever happened).

Every rank's stack file starts with one line dlaunch writes (``header``) with its last sign of life and its
last step, so the same reading works on one host and on the master host, over every host's stacks.
Pure: texts in, a verdict out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.base.border import ascii_float, ascii_int

COLLECTIVE_FRAMES = ("torch/distributed/", "torch/nn/parallel/distributed.py", "mindspore/communication/",
                     "comm_ops.py", "torchft/", "torch/autograd/")
MARGIN = 0.5   # seconds: a last sign of life this much older than all others' is the one that stopped first
PROCESS = re.compile(r"^Process ([0-9]+):", re.MULTILINE)
HEADER = re.compile(r"^dlaunch: last sign of life at ([0-9.]+) \(epoch s\), last step (-?[0-9]+|unknown)"
                    r"(?: \(reported at ([0-9.]+) \(epoch s\)\))?")


def header(last_sign: float, last_step: int | None, step_at: float | None = None) -> str:
    """The first line of a rank's stack file: its last sign of life, its last step and when that step was
    reported (a heartbeat says its step at most once a second: it may lag the log)."""
    reported = f" (reported at {step_at:.3f} (epoch s))" if step_at and last_step is not None else ""
    return f"dlaunch: last sign of life at {last_sign:.3f} (epoch s), last step " \
           f"{'unknown' if last_step is None else last_step}{reported}\n"


@dataclass(frozen=True)
class RankState:
    """One rank as its stack file tells it."""

    rank: int
    host: str
    last_sign: float | None
    last_step: int | None
    in_collective: bool | None   # None: no stack was taken
    step_at: float | None = None  # when its last step was reported (epoch s)


def main_thread(stack: str) -> str | None:
    """The frames of the main thread in py-spy's dump (``Thread PID (idle): "MainThread"``; the thread whose id is
    the process's, as py-spy has no names for a process that never imported threading), or None."""
    process = PROCESS.search(stack)
    start = stack.find(f"\nThread {process.group(1)} ") if process else -1
    if start < 0:
        start = stack.find('"MainThread"')
    if start < 0:
        return None
    end = stack.find("\nThread ", start + 1)
    return stack[start:end if end >= 0 else len(stack)]


def read_state(rank: int, host: str, text: str) -> RankState:
    """A rank's state from its stack file's text."""
    first, _, rest = text.partition("\n")
    found = HEADER.match(first)
    sign = ascii_float(found.group(1)) if found else None
    step = ascii_int(found.group(2), signed=True) if found else None   # "unknown": None
    frames = main_thread(rest if found else text)
    if frames is not None and not any(line.startswith((" ", "\t")) for line in frames.splitlines()[1:]):
        frames = None   # py-spy caught the thread with no Python frame (in C, or leaving): it tells nothing
    collective = None if frames is None else any(marker in frames for marker in COLLECTIVE_FRAMES)
    return RankState(rank, host, sign, step, collective, ascii_float(found.group(3)) if found else None)


def stopped_first(states: list[RankState]) -> tuple[RankState, str] | None:
    """The rank the others wait for, and why it is that one; None when nothing tells it apart."""
    stacked = [s for s in states if s.in_collective is not None]
    outside = [s for s in stacked if not s.in_collective]
    waiting = len(stacked) - len(outside)
    if outside and waiting:
        culprit = min(outside, key=lambda s: (s.last_sign if s.last_sign is not None else float("inf"), s.rank))
        others = "the other rank waits" if waiting == 1 else f"the {waiting} others wait"
        return culprit, f"its stack is in no collective while {others} in one"
    stepped = [s for s in states if s.last_step is not None and s.last_sign is not None]
    if len(stepped) > 1 and len({s.last_step for s in stepped}) > 1:
        culprit = min(stepped, key=lambda s: (s.last_step, s.last_sign, s.rank))
        ahead = [s for s in stepped if s.last_step != culprit.last_step]
        if min(s.last_sign or 0.0 for s in ahead) - (culprit.last_sign or 0.0) > MARGIN:
            furthest = max(s.last_step or 0 for s in ahead)
            return culprit, f"its last step is {culprit.last_step}, others reached {furthest}"
    signed = [s for s in states if s.last_sign is not None]
    if any(s.last_step is not None for s in signed):   # a rank that reports no steps may just print nothing
        signed = [s for s in signed if s.last_step is not None]
    signed.sort(key=lambda s: s.last_sign or 0.0)
    if len(signed) > 1 and (signed[1].last_sign or 0.0) - (signed[0].last_sign or 0.0) > MARGIN:
        lead = (signed[1].last_sign or 0.0) - (signed[0].last_sign or 0.0)
        return signed[0], f"its last sign of life is {lead:.1f} s older than any other rank's"
    return None


def blame_line(found: tuple[RankState, str] | None, hosts: int = 1) -> str:
    """One line for the console and the summary."""
    if found is None:
        return "no rank stands out as the one that stopped first (every rank's stack and last step alike)"
    state, why = found
    where = f" on host {state.host}" if hosts > 1 else ""
    return f"rank {state.rank}{where} stopped first: {why}"


def blamed_cause(cause: dict, stacks: dict) -> dict:
    """A hang's cause as the job tells it (``job.coordinator``), once every host's stacks are in (global rank
    -> {"host", "text"}): the rank that stopped first, where the stacks tell it and the host that called the
    hang could not see it (its own ranks were all waiting)."""
    if cause.get("stopped_first"):
        return cause
    found = stopped_first([read_state(int(rank), entry["host"], entry["text"]) for rank, entry in stacks.items()])
    if found is None or found[0].rank == cause.get("rank"):
        return cause
    state, why = found
    kept = {key: value for key, value in cause.items() if key not in ("log", "stack_file", "pid", "local_rank",
                                                                     "device_id", "start")}
    return {**kept, "rank": state.rank, "host": state.host, "stopped_first": True,
            "reason": f"it stopped first: {why} (rank {cause.get('rank')} on host {cause.get('host')} called "
                      f"the hang)"}

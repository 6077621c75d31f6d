"""The one border for outside text: everything a rank, an operator, a scheduler or a tool wrote enters here.

Rank output lines, files in rank directories (heartbeat, notices, error files), MindCluster's reset file and the
rank table's version file, health-check answers (a command's or a ``unix:`` socket's), ``nvidia-smi``/``npu-smi``/
``hccn_tool`` output, the summaries and plans ``status`` and ``report`` read back: each may be hostile or broken,
and none may cost dlaunch a traceback, a hang or unbounded memory. The rules, kept here once:

- a file in a rank's (or an operator's) hands is opened ``O_NONBLOCK | O_NOFOLLOW``: a FIFO opens without waiting
  for a writer, a symbolic link (to ``/dev/zero``, to another user's file) is refused; only a regular file is read,
  and at most a stated size of it;
- JSON is parsed with its depth, its integers' digits and its floats bounded (no ``RecursionError``, no
  ``OverflowError``, no 4,300-digit ``ValueError``), ``NaN``/``Infinity`` refused, and its shape checked by the
  caller with ``expect``/``whole_number`` (a list where a dict belongs is a finding, not a ``TypeError``);
- numbers in text are ASCII digits only (``\\d`` also matches ``²``, which ``int`` refuses), of bounded length;
- a tool's or a socket's answer is bounded in total time and size, not per read;
- a line is cut to ``LINE_LIMIT`` characters before a regular expression sees it, a user's pattern with nested
  repetition is refused, and a user's pattern runs under a time budget.

What cannot be taken is a ``Refused`` (a ``ValueError``) whose text is one line naming what and why; callers turn
it into their documented verdict (a skipped look, an unfit host, a line on the console) and the job goes on.
``READERS`` names every parser of outside text, so one fuzz test (tests/unit/base/test_border_fuzz.py) feeds
each the hostile shapes; tests/unit/test_border_guard.py fails when another module parses such text itself.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import time
from contextlib import contextmanager

MAX_DEPTH = 32           # JSON nesting dlaunch follows (its own files nest 5 deep)
MAX_DIGITS = 30          # an integer of more digits is refused (a step, a pid, a count: 20 digits at most)
MAX_NUMBER_TEXT = 64     # characters of a float's text
LINE_LIMIT = 4096        # characters of one line a regular expression sees
PATTERN_SECONDS = 0.5    # a user's pattern's budget for one batch of lines: CPU seconds, so a busy machine is no excuse

# Every parser of outside text, "module:function" taking the text (str) and returning a value or raising Refused
# (the fuzz test imports each; the launch path imports none of them through here).
READERS = {
    "step line": "launcher.base.steps:step_line",
    "step line, user's pattern": "launcher.base.steps:_fuzz_user_line",
    "heartbeat": "launcher.execute.local.hangs:parse_heartbeat",
    "hang clock": "launcher.execute.local.hangclock:parse_clock",
    "reset file": "launcher.host.mindcluster:parse_reset",
    "module list": "launcher.execute.local.warm:parse_module_list",
    "version file": "launcher.host.mindcluster:parse_version",
    "health answer": "launcher.host.health:parse_answer",
    "nvidia-smi memory": "launcher.host.release:parse_gpu_memory",
    "npu-smi memory": "launcher.host.release:parse_npu_memory",
    "npu-smi health": "launcher.host.hccn:parse_npu_health",
    "run file (summary, plan)": "launcher.rundir.model:parse_run_file",
    "rank table": "launcher.table.model:loads",
}


class Refused(ValueError):
    """Outside text dlaunch will not take; its text is one line saying what and why."""


# ---------------------------------------------------------------------------------------------------- files

def open_fd(path: str, *, follow: bool = False) -> int | None:
    """A blocking read descriptor of the regular file ``path``, or None (no such file, a FIFO, a device, a
    directory, or with ``follow`` False a symbolic link): for readers that page through a rank's log."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        if regular:
            os.set_blocking(fd, True)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        return None
    return fd


def read_bytes(path: str, what: str, limit: int, *, follow: bool = False) -> bytes | None:
    """The bytes of the regular file ``path``, at most ``limit`` of them; None when there is no such file.

    ``follow`` False (a file in a rank's or an operator's hands): a symbolic link is refused. Refused also for a
    FIFO, a device, a directory, or a file larger than ``limit``."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{what} {path} is a symbolic link: not followed") from None
        raise Refused(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{what} {path} is {kind_of(info.st_mode)}, not a regular file: not read")
        if info.st_size > limit:
            raise Refused(f"{what} {path} is {info.st_size} bytes, more than the {limit} dlaunch reads")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise Refused(f"cannot read {what} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if total > limit:
        raise Refused(f"{what} {path} grew past the {limit} bytes dlaunch reads")
    return b"".join(chunks)


def read_text(path: str, what: str, limit: int, *, follow: bool = False) -> str | None:
    """``read_bytes`` as text (undecodable bytes replaced)."""
    data = read_bytes(path, what, limit, follow=follow)
    return None if data is None else data.decode("utf-8", "replace")


def read_json(path: str, what: str, limit: int, *, follow: bool = False):
    """``read_bytes`` parsed by ``parse_json``; None when there is no such file."""
    text = read_text(path, what, limit, follow=follow)
    return None if text is None else parse_json(text, f"{what} {path}")


def kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a link")):
        if test(mode):
            return name
    return "not a regular file"


def is_regular(path: str) -> bool:
    """Whether ``path`` is a regular file itself (not a link, a directory or a FIFO a rank put there)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def remove_file(path: str, what: str) -> str | None:
    """Removes the regular file or link ``path`` (never what a link points to); a directory or anything else a
    rank put there is left alone. Returns a line saying what was not removed, or None."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot remove {what} {path}: {exc.strerror}"
    if stat.S_ISDIR(info.st_mode):
        return f"{what} {path} is a directory: left as it is"
    try:
        os.unlink(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot remove {what} {path}: {exc.strerror}"
    return None


# ---------------------------------------------------------------------------------------------------- JSON

def parse_json(text: str | bytes, what: str, *, max_depth: int = MAX_DEPTH, constants: bool = False):
    """``text`` as JSON with its depth, integers and floats bounded; Refused otherwise. ``constants``: NaN and
    Infinity are taken (dlaunch's own files, which Python's json writes them into), else refused."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    depth = _depth(text)
    if depth > max_depth:
        raise Refused(f"{what}: JSON nested deeper than the {max_depth} levels dlaunch reads")
    try:
        return json.loads(text, parse_int=_json_int, parse_float=_json_float,
                          parse_constant=float if constants else _json_constant)
    except Refused as exc:
        raise Refused(f"{what}: {exc}") from None
    except (ValueError, RecursionError) as exc:   # RecursionError: only if the depth scan were wrong
        # from exc: a reader that shows where the mistake is (a rank table's line and column) finds it there
        raise Refused(f"{what}: not JSON ({(str(exc).splitlines() or [''])[0][:120]})") from exc


def _depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside strings (a linear scan; stops counting past MAX_DEPTH * 4)."""
    deepest = depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH * 4:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def _json_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > MAX_DIGITS:
        raise Refused(f"an integer of {len(digits)} digits (at most {MAX_DIGITS})")
    return int(text)


def _json_float(text: str) -> float:
    if len(text) > MAX_NUMBER_TEXT:
        raise Refused(f"a number of {len(text)} characters (at most {MAX_NUMBER_TEXT})")
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise Refused(f"the number {text[:20]} is out of range")
    return value


def _json_constant(name: str):
    raise Refused(f"{name} is not a number dlaunch takes")


def expect(value, kind: type, what: str):
    """``value`` when it is a ``kind`` (dict, list, str); else Refused naming what was found instead."""
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}
    found = "null" if value is None else names.get(type(value), type(value).__name__)
    raise Refused(f"{what}: {found} where {names.get(kind, kind.__name__)} belongs")


def whole_number(value, what: str, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int (a JSON integer, or a string of ASCII digits) within [low, high]; Refused otherwise.
    A bool, a float and a negative count are findings, not numbers."""
    if isinstance(value, str):
        number = ascii_int(value.strip(), signed=True)
        if number is None:
            raise Refused(f"{what}: {value[:20]!r} is not a whole number")
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise Refused(f"{what}: {expect_name(value)} where a whole number belongs")
    if (low is not None and number < low) or (high is not None and number > high):
        bounds = f"at least {low}" if high is None else f"at most {high}" if low is None else f"{low} to {high}"
        raise Refused(f"{what}: {number} is out of range ({bounds})")
    return number


def expect_name(value) -> str:
    return "null" if value is None else f"{type(value).__name__} {str(value)[:20]!r}"


# ---------------------------------------------------------------------------------------------------- numbers

def ascii_int(text: str | bytes | None, *, max_digits: int = MAX_DIGITS, signed: bool = False) -> int | None:
    """The integer ``text`` spells in ASCII digits (a leading ``-`` when ``signed``), at most ``max_digits`` of
    them; None for anything else (``²``, ``٣``, 5,000 digits, an empty string)."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    digits = text[1:] if signed and text[:1] == "-" else text
    if not digits or len(digits) > max_digits or not (digits.isascii() and digits.isdigit()):
        return None
    return int(text)


def is_number(text: str | None, max_digits: int = MAX_DIGITS) -> bool:
    """Whether ``text`` is a whole number in ASCII digits that ``int()`` takes (``"²".isdigit()`` is True, yet
    ``int("²")`` fails; so do 5,000 digits): the check for a scheduler's or a user's variable."""
    return ascii_int(text, max_digits=max_digits) is not None


def ascii_float(text: str | None, *, max_length: int = MAX_NUMBER_TEXT) -> float | None:
    """The finite, non-negative number ``text`` spells in ASCII (``12``, ``3.5``, ``1e3``); None otherwise."""
    if not text or len(text) > max_length or not text.isascii():
        return None
    if any(c not in "0123456789.eE+-" for c in text):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < float("inf") else None


# ---------------------------------------------------------------------------------------------------- lines

def cut_line(line: str) -> str:
    """The part of ``line`` a regular expression may see."""
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT]


def check_pattern(regex, what: str) -> None:
    """Refused when ``regex`` (compiled) repeats, without bound, something that itself repeats or branches:
    ``(x+x+)+y``, ``(a|a)*``, the shapes whose matching time grows exponentially with the line."""
    sre_parse, constants = _sre()
    BRANCH, MAX_REPEAT, MAXREPEAT, MIN_REPEAT = (constants.BRANCH, constants.MAX_REPEAT, constants.MAXREPEAT,
                                                 constants.MIN_REPEAT)
    repeats = (MAX_REPEAT, MIN_REPEAT)

    def items(parsed):
        for op, av in parsed:
            yield op, av
            for child in _children(op, av):
                yield from items(child)

    def unbounded(op, av) -> bool:
        return op in repeats and av[1] == MAXREPEAT

    try:
        parsed = sre_parse.parse(regex.pattern, regex.flags)
    except Exception as exc:   # the pattern compiled, so this is only a change in re's private parser
        raise Refused(f"{what}: cannot inspect it ({type(exc).__name__})") from None
    for op, av in items(parsed):
        if unbounded(op, av) and any(inner in repeats or inner == BRANCH for inner, _ in items(av[2])):
            raise Refused(f"{what}: it repeats a repetition or an alternative without bound (as in (x+x+)+y), "
                          f"which can take exponential time on one line; write it without the nesting")


def _sre():
    """The parser ``re`` itself uses and its constants: ``re._parser`` from Python 3.11, ``sre_parse`` before."""
    try:
        import re._constants as constants
        import re._parser as sre_parse
    except ImportError:   # Python 3.10
        import sre_constants as constants
        import sre_parse
    return sre_parse, constants


def _children(op, av):
    """The sub-patterns of one parsed item (the parser's shapes)."""
    c = _sre()[1]
    ASSERT, ASSERT_NOT, BRANCH, GROUPREF_EXISTS, MAX_REPEAT, MIN_REPEAT, SUBPATTERN = (
        c.ASSERT, c.ASSERT_NOT, c.BRANCH, c.GROUPREF_EXISTS, c.MAX_REPEAT, c.MIN_REPEAT, c.SUBPATTERN)

    if op in (MAX_REPEAT, MIN_REPEAT):
        return [av[2]]
    if op == SUBPATTERN:
        return [av[3]]
    if op == BRANCH:
        return list(av[1])
    if op in (ASSERT, ASSERT_NOT):
        return [av[1]]
    if op == GROUPREF_EXISTS:
        return [p for p in av[1:] if p is not None]
    if str(op) == "ATOMIC_GROUP":   # 3.11's (?>...): its inside may still nest; a possessive repeat never backtracks
        return [av]
    return []


class OverBudget(Refused):
    """A user's pattern ran past its time budget."""


@contextmanager
def time_budget(seconds: float, what: str):
    """Within it, code using more than ``seconds`` of CPU is interrupted by ``OverBudget`` (SIGVTALRM:
    CPython's regular expression engine checks for signals while it matches, so a catastrophic pattern is
    stopped too, and a stop signal's handler runs meanwhile). CPU time, not the clock: a loaded machine does
    not spend the budget. Outside the main thread, where no handler can be set, it only runs the code."""
    def expire(signum, frame):
        raise OverBudget(f"{what} used more than its {seconds:g} s of CPU on one look")

    try:
        previous = signal.signal(signal.SIGVTALRM, expire)
    except ValueError:   # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


# ---------------------------------------------------------------------------------------------------- answers

def socket_answer(path: str, timeout: float, limit: int = 1 << 16, stop=None) -> str:
    """What a service on Unix socket ``path`` says until it closes, at most ``limit`` bytes, within ``timeout``
    seconds in all (a service sending a byte every half second does not extend it). OSError when it cannot be
    reached; Refused when it does not finish in time; ``Stopped`` when ``stop`` (``base.waiting``) says a stop
    signal came meanwhile."""
    import socket

    from launcher.base.waiting import ready_fds

    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.setblocking(False)
        data = bytearray()
        while len(data) < limit:
            if not ready_fds([sock.fileno()], deadline, stop):
                raise Refused(f"unix:{path} did not finish its answer within {timeout:g} s")
            try:
                chunk = sock.recv(min(4096, limit - len(data)))
            except BlockingIOError:
                continue
            if not chunk:
                break
            data += chunk
    return data.decode("utf-8", "replace")

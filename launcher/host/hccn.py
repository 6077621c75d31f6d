"""The driver's ``hccn_tool`` (and ``npu-smi``): where it is, running it safely, reading its answers.

Found on ``PATH``, else in the driver's usual directory, else where ``--hccn-tool`` says; nothing else in
dlaunch needs it. Every call is bounded: a tool that hangs is killed (its whole process group) after
``timeout`` seconds, and no more than ``MAX_OUTPUT`` bytes of its output are kept, so a broken driver
cannot hang or flood the launcher.

The answers are read tolerantly (any case, any spacing around ``:``, other lines ignored) in the formats
Huawei documents and field scripts parse:

- ``-ip -g``: ``ipaddr:192.98.92.100`` and ``netmask:255.255.255.0`` lines;
- ``-link -g``: ``link status: UP`` (or ``DOWN``);
- ``-net_health -g``: ``net health status: Success`` (else ``Fault``, ``Init``, ``Socket fail``, ``Receive
  timeout``, ``Unreachable``, ``Time exceeded``, ``Thread error``, ``Detect ip set``);
- ``-netdetect -g``: ``netdetect address: 11.12.165.1``;
- ``-tls -g``: ``dev_id:0, tls switch[0](0:disable, 1:enable), ...`` followed by certificate lines;
- ``npu-smi info``: a table whose NPU rows read ``| 0     910B3     | OK     | ...``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time

from launcher.base.border import ascii_int
from launcher.base.signals import Stopped
from launcher.base.waiting import ready_fds, until
from launcher.errors import UsageError

TOOL_NAME = "hccn_tool"
DRIVER_TOOLS = "/usr/local/Ascend/driver/tools"
NPU_SMI = "npu-smi"
EXIT_POLL = 0.01              # seconds between looks at a tool that closed its output, until it exits
MAX_OUTPUT = 256 << 10        # bytes of a tool's answer that are read; a tool that says more is killed
MISSING = ("the network checks need the Ascend driver's hccn_tool: it is not on PATH nor in "
           f"{DRIVER_TOOLS}/; install the driver's tools or pass --hccn-tool PATH")

_IPV4 = r"(\d{1,3}(?:\.\d{1,3}){3})"
_IPADDR = re.compile(r"^\s*ip\s*addr(?:ess)?\s*[:=]\s*" + _IPV4, re.I | re.M)
_LINK = re.compile(r"^\s*link\s+status\s*[:=]\s*([A-Za-z]+)", re.I | re.M)
_HEALTH = re.compile(r"^\s*net\s+health\s+status\s*[:=]\s*([A-Za-z][A-Za-z ]*?)\s*$", re.I | re.M)
_NETDETECT = re.compile(r"^\s*net\s*detect\s+address\s*[:=]\s*" + _IPV4, re.I | re.M)
_TLS = re.compile(r"tls\s+switch\s*\[\s*([01])\s*\]", re.I)
_NPU_ROW = re.compile(r"^\|\s*(\d+)\s+[^\s|][^|]*\|\s*([A-Za-z]+)\s*\|", re.M)


class ToolError(Exception):
    """One call of the tool failed: it exited non-zero, ran past its time, or said nothing readable. ``output``:
    what it printed (bounded), kept where a run records its tools' answers (the health gate's)."""

    def __init__(self, message: str, output: str = ""):
        super().__init__(message)
        self.output = output


def find_tool(given: str | None = None) -> str:
    """The hccn_tool to run: ``--hccn-tool`` when given, else PATH, else the driver's directory; or one line
    saying the checks need it."""
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given
        raise UsageError(f"--hccn-tool {given}: not an executable file")
    found = shutil.which(TOOL_NAME) or shutil.which(TOOL_NAME, path=DRIVER_TOOLS)
    if not found:
        raise UsageError(MISSING)
    return found


def find_npu_smi(hccn_tool: str) -> str | None:
    """npu-smi from PATH, else beside hccn_tool, else the driver's directory; None when absent (optional)."""
    return (shutil.which(NPU_SMI) or shutil.which(NPU_SMI, path=os.path.dirname(hccn_tool))
            or shutil.which(NPU_SMI, path=DRIVER_TOOLS))


def run(argv: list[str], timeout: float, stop=None) -> str:
    """The text ``argv`` prints (stdout and stderr), at most MAX_OUTPUT bytes of it, within ``timeout`` seconds
    in all.

    Raises ToolError when it cannot start, exits non-zero or runs out of time (then its process group is
    killed, children included); ``Stopped`` (its group killed too) when ``stop`` (``base.waiting``) says a stop
    signal came meanwhile.
    """
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as exc:
        raise ToolError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    kept, deadline = bytearray(), time.monotonic() + timeout
    timed_out = flooded = False
    with proc:
        while True:
            try:
                ready = ready_fds([proc.stdout.fileno()], deadline, stop)
            except Stopped:
                _kill_group(proc)
                raise
            if not ready:
                timed_out = True
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            kept += chunk[:MAX_OUTPUT - len(kept)]
            if len(kept) >= MAX_OUTPUT:   # a flood: what came first is the answer, if there is one
                flooded = True
                break
        if timed_out or flooded:
            _kill_group(proc)
        try:
            exited = until(lambda: proc.poll() is not None, max(0.1, deadline - time.monotonic()), EXIT_POLL, stop)
        except Stopped:
            _kill_group(proc)
            raise
        if not exited:   # closed its output but did not exit
            _kill_group(proc)
            timed_out = True
        code = proc.wait()
    text = kept.decode("utf-8", "replace")
    words = " ".join(argv[1:])
    if timed_out:
        raise ToolError(f"{os.path.basename(argv[0])} {words}: no answer within {timeout:g} s (killed)", text)
    if code != 0 and not flooded:
        said = _last_line(text)
        raise ToolError(f"{os.path.basename(argv[0])} {words}: exit {code}" + (f" ({said})" if said else ""), text)
    return text


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass   # ended on its own meanwhile: nothing left to kill


def _last_line(text: str, limit: int = 160) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def _match(pattern: re.Pattern, text: str, what: str) -> str:
    found = pattern.search(text)
    if not found:
        said = _last_line(text, 80)
        raise ToolError(f"no {what} in the tool's answer" + (f" ({said!r})" if said else " (it said nothing)"))
    return found.group(1)


def parse_ip(text: str) -> str:
    """``-ip -g``: the device's IPv4 address (``ipaddr:`` line)."""
    return _match(_IPADDR, text, "ipaddr")


def parse_link(text: str) -> str:
    """``-link -g``: UP or DOWN (as the tool says it, upper-cased)."""
    return _match(_LINK, text, "link status").upper()


def parse_health(text: str) -> str:
    """``-net_health -g``: the status word(s), capitalised as documented (Success, Fault, Receive timeout...)."""
    status = " ".join(_match(_HEALTH, text, "net health status").split())
    return status[:1].upper() + status[1:].lower()


def parse_netdetect(text: str) -> str | None:
    """``-netdetect -g``: the detection address, None when none is set (absent or 0.0.0.0)."""
    found = _NETDETECT.search(text)
    return found.group(1) if found and found.group(1) != "0.0.0.0" else None


def parse_tls(text: str) -> int:
    """``-tls -g``: the TLS switch, 0 (disabled) or 1 (enabled)."""
    return int(_match(_TLS, text, "tls switch[...]"))   # one digit, matched by [0-9]


def parse_npu_health(text: str) -> dict[int, str]:
    """``npu-smi info``: {NPU id: Health} from the table's NPU rows (OK, Warning, Alarm, Critical...)."""
    return {npu: health[:40] for number, health in _NPU_ROW.findall(text)
            if (npu := ascii_int(number, max_digits=6)) is not None}

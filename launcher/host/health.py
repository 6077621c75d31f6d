"""The health gate: is this host fit to start its ranks? Asked before the first attempt and before every restart.

A restart on a broken device or link fails again; NVIDIA's ft_launcher checks each node before every
rendezvous, and the seeds' own checks on Ascend (``npu-smi info``, ``hccn_tool -i N -link -g`` and
``-net_health -g``) are such gates. Each check here is bounded in time and in output (``hccn.run``) and
reports what failed with a one-line fix; a check whose tool this host does not have is skipped (a CPU
host has no npu-smi), the storage check never is:

- storage: a file written, synced and removed in the run directory within ``timeout`` (a hung NFS mount
  blocks a save for ever: better found before the ranks start);
- npu: ``npu-smi info``'s Health of each of this host's devices (OK and Warning pass);
- gpu: ``nvidia-smi`` answers (a GPU fallen off the bus makes it fail);
- link, net_health: ``hccn_tool`` says each device's link is UP and its net health is not ``Fault``;
- nic: without hccn_tool (a GPU host), every InfiniBand port in sysfs is ``ACTIVE``
  (``/sys/class/infiniband/<device>/ports/<port>/state``, which ft_launcher's NIC check reads too);
- external: a command of the user's (``--health-check``), or a Unix socket (``--health-check unix:PATH``),
  whose answer is NVIDIA's node-health ``{"fail_count": N}``: N > 0, a failure or no such answer fails.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import threading
import time
from dataclasses import dataclass, field

from launcher.base.border import Refused, parse_json, read_text, socket_answer, whole_number
from launcher.base.waiting import until
from launcher.host import hccn
from launcher.host.hccn import ToolError

NVIDIA_SMI = "nvidia-smi"
PROBE = ".dlaunch-health-probe"
STORAGE_POLL = 0.01   # seconds between looks at the storage probe's thread


@dataclass(frozen=True)
class Finding:
    """One failed check: which, on which device (None: the host), what was seen, what to do."""

    check: str
    detail: str
    fix: str
    device: int | None = None

    def line(self, host: str) -> str:
        where = f"host {host}" + (f", device {self.device}" if self.device is not None else "")
        return f"{where}: {self.check}: {self.detail}; {self.fix}"


@dataclass(frozen=True)
class GateSettings:
    timeout: float = 10.0              # each tool call, and the storage probe
    hccn_tool: str | None = None       # found on PATH (or the driver's directory) when None
    command: str | None = None         # --health-check: the external checker (a command, or unix:PATH)
    infiniband: str = "/sys/class/infiniband"   # the NIC ports' states (tests give a directory of their own)
    kept_in: str | None = None         # where the run keeps the tools' answers (named by a finding's fix)


PASSED, SKIPPED, FAILED = "passed", "skipped", "failed"


@dataclass(frozen=True)
class Outcome:
    """One check of the gate: passed, skipped or failed, and why (what it asked, or what was missing)."""

    check: str
    status: str
    why: str

    def line(self) -> str:
        return f"health gate: {self.check} {self.status}: {self.why}"


@dataclass
class GateReport:
    """What the gate did: each check's outcome, the findings (none: fit to start), and every tool's answer
    (``$ command`` then its output) for the run directory."""

    outcomes: list[Outcome] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)

    def add(self, check: str, found: list[Finding], passed: str) -> None:
        self.findings += found
        details = sorted({f.detail + (f" (device {f.device})" if f.device is not None else "") for f in found})
        shown = "; ".join(details[:3]) + (f"; and {len(details) - 3} more" if len(details) > 3 else "")
        self.outcomes.append(Outcome(check, FAILED, shown) if found else Outcome(check, PASSED, passed))

    def skip(self, check: str, why: str) -> None:
        self.outcomes.append(Outcome(check, SKIPPED, why))

    def lines(self) -> list[str]:
        return [outcome.line() for outcome in self.outcomes]


def recording(run, transcript: list[str]):
    """``run`` (``hccn.run``'s signature) that appends each call's command and answer to ``transcript``."""
    def call(argv: list[str], timeout: float) -> str:
        try:
            text = run(argv, timeout)
        except ToolError as exc:
            transcript.append(f"$ {shlex.join(argv)}\n{exc.output}{'' if exc.output.endswith(chr(10)) else chr(10)}"
                              f"[{exc}]\n")
            raise
        transcript.append(f"$ {shlex.join(argv)}\n{text}" + ("" if text.endswith("\n") else "\n"))
        return text
    return call


def check_storage(directory: str, timeout: float, stop=None) -> list[Finding]:
    """A small file written, synced and removed in ``directory`` within ``timeout`` (in a thread: a hung
    filesystem blocks the call itself, and the thread is left to it; a stop signal ends the wait)."""
    done: list[BaseException | None] = []

    def probe() -> None:
        path = os.path.join(directory, f"{PROBE}.{os.getpid()}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"ok\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.unlink(path)
            done.append(None)
        except OSError as exc:
            done.append(exc)

    thread = threading.Thread(target=probe, name="dlaunch-health-storage", daemon=True)
    thread.start()
    if not until(lambda: done, timeout, STORAGE_POLL, stop):
        return [Finding("storage", f"writing in {directory} took over {timeout:g} s",
                        "check the filesystem (a hung network mount?)")]
    if done[0] is not None:
        return [Finding("storage", f"cannot write in {directory}: {done[0]}", "free space, fix permissions or the "
                                                                             "mount")]
    return []


def check_npus(devices: list[int], npu_smi: str, timeout: float, run=hccn.run) -> list[Finding]:
    try:
        health = hccn.parse_npu_health(run([npu_smi, "info"], timeout))
    except ToolError as exc:
        return [Finding("npu", f"npu-smi info failed: {exc}", "check the NPU driver (npu-smi info)")]
    return [Finding("npu", f"npu-smi says Health {health.get(device, 'missing')}",
                    "check the device (npu-smi info -t health -i N) or exclude this host", device)
            for device in devices if health.get(device) not in ("OK", "Warning")]


def check_gpus(nvidia_smi: str, timeout: float, run=hccn.run) -> list[Finding]:
    try:
        run([nvidia_smi, "--query-gpu=index", "--format=csv,noheader"], timeout)
    except ToolError as exc:
        return [Finding("gpu", f"nvidia-smi failed: {exc}", "check the GPUs and the driver (nvidia-smi)")]
    return []


def check_network(devices: list[int], tool: str, timeout: float, run=hccn.run) -> list[Finding]:
    found = []
    for device in devices:
        try:
            link = hccn.parse_link(run([tool, "-i", str(device), "-link", "-g"], timeout))
            if link != "UP":
                found.append(Finding("link", f"link status {link}", f"check the cable and port "
                                     f"(hccn_tool -i {device} -link -g)", device))
                continue
            health = hccn.parse_health(run([tool, "-i", str(device), "-net_health", "-g"], timeout))
            if health == "Fault":
                found.append(Finding("net_health", "net health status Fault", f"check the device's network "
                                     f"(hccn_tool -i {device} -net_health -g; dlaunch check-network)", device))
        except ToolError as exc:
            found.append(Finding("network", f"hccn_tool failed: {exc}", "check the NPU driver", device))
    return found


def check_nic_ports(root: str) -> list[Finding]:
    """Every InfiniBand port under ``root`` ACTIVE (its ``state`` file says ``4: ACTIVE``)."""
    found = []
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return []   # no InfiniBand here: nothing to check
    for device in devices:
        ports = os.path.join(root, device, "ports")
        try:
            names = sorted(os.listdir(ports))
        except OSError:
            continue
        for port in names:
            try:   # sysfs: its files are links-free regular files of a page at most
                state = (read_text(os.path.join(ports, port, "state"), "port state", 4096, follow=True) or "")
            except Refused:
                continue
            state = state.strip()[:200]
            if not state.endswith("ACTIVE"):
                found.append(Finding("nic", f"{device} port {port} is {state or 'in no state'}",
                                     f"check the cable and the switch port (ibstat {device} {port})"))
    return found


def check_external(command: str, timeout: float, run=hccn.run, stop=None, kept_in: str | None = None,
                   transcript: list[str] | None = None) -> list[Finding]:
    """The user's checker (a command, or ``unix:PATH``): its answer holds NVIDIA's node-health
    ``{"fail_count": N}``; answering within ``timeout`` seconds in all, or it is a finding. ``kept_in``: the
    file its answer is kept in, which a finding names; a socket's answer is added to ``transcript``."""
    see = f"see what the checker reports (kept in {kept_in})" if kept_in else "see what the checker reports"
    try:
        if command.startswith("unix:"):
            text = socket_answer(command[len("unix:"):], timeout, stop=stop)
            if transcript is not None:
                transcript.append(f"$ {command}\n{text}" + ("" if text.endswith("\n") else "\n"))
        else:
            text = run(shlex.split(command), timeout)
    except (ToolError, ValueError, OSError) as exc:
        return [Finding("external", f"{command!r} failed: {exc}", see)]
    try:
        count = parse_answer(text)
    except Refused as exc:
        return [Finding("external", f"{command!r} gave no usable answer ({exc})", f"fix the checker; {see}")]
    return [Finding("external", f"{command!r} says fail_count {count}", see)] if count > 0 else []


def parse_answer(text: str) -> int:
    """The ``fail_count`` of the last line of a checker's answer that is a JSON object; Refused when there is
    none or it is no count (a negative, a float, a bool, a string)."""
    for line in reversed(text.strip().splitlines()[-1000:]):
        try:
            answer = parse_json(line, "the checker's answer")
        except Refused:
            continue
        if isinstance(answer, dict):
            count = answer.get("fail_count")
            if isinstance(count, str):   # NVIDIA's answer is a JSON integer; a string is some other checker's
                raise Refused(f'its {{"fail_count": N}} is the string {count[:20]!r}, not a whole number')
            return whole_number(count, 'its {"fail_count": N}', low=0)
    raise Refused('no {"fail_count": N} line')


def _tools(path: str, hccn_tool: str | None = None) -> tuple[str | None, str | None, str | None]:
    """(hccn_tool, npu-smi, nvidia-smi) as this host has them (PATH, else the driver's directory), or None each."""
    tool = hccn_tool or shutil.which(hccn.TOOL_NAME, path=path) or shutil.which(hccn.TOOL_NAME, path=hccn.DRIVER_TOOLS)
    npu_smi = shutil.which(hccn.NPU_SMI, path=path) or (hccn.find_npu_smi(tool) if tool else None)
    return tool, npu_smi, shutil.which(NVIDIA_SMI, path=path)


def device_tools(path: str) -> list[str]:
    """The device tools the gate would ask on this host (npu-smi, nvidia-smi, hccn_tool), by name: where there
    is none, the gate checks storage alone (``--fault-tolerant`` turns it on only where there is one)."""
    tool, npu_smi, nvidia_smi = _tools(path)
    return [name for name, found in ((hccn.NPU_SMI, npu_smi), (NVIDIA_SMI, nvidia_smi), (hccn.TOOL_NAME, tool))
            if found]


def gate(devices: list[int], run_dir: str, settings: GateSettings, path: str, stop=None) -> GateReport:
    """Every check this host can make, in order, each passed, skipped (its tool is not here) or failed; the
    findings (none: fit to start). ``Stopped`` as soon as ``stop`` (``base.waiting``) says a stop signal
    came: no tool or service is waited for then."""
    from launcher.base.numlists import format_ranges

    report = GateReport()
    run = recording(functools.partial(hccn.run, stop=stop), report.transcript)
    shown = f"device(s) {format_ranges(devices)}" if devices else "no device"
    report.add("storage", check_storage(run_dir, settings.timeout, stop),
               f"a file written, synced and removed in {run_dir} within {settings.timeout:g} s")
    tool, npu_smi, nvidia_smi = _tools(path, settings.hccn_tool)
    if npu_smi:
        report.add("npu", check_npus(devices, npu_smi, settings.timeout, run), f"npu-smi info: {shown} OK or Warning")
    else:
        report.skip("npu", "no npu-smi on PATH")
    if nvidia_smi:
        report.add("gpu", check_gpus(nvidia_smi, settings.timeout, run), "nvidia-smi answers")
    else:
        report.skip("gpu", "no nvidia-smi on PATH")
    if tool:
        report.add("link, net_health", check_network(devices, tool, settings.timeout, run),
                   f"hccn_tool: {shown} link UP, net health not Fault")
        report.skip("nic", "hccn_tool checks the links")
    else:
        report.skip("link, net_health", "no hccn_tool on PATH or in the driver's directory")
        if os.path.isdir(settings.infiniband):
            report.add("nic", check_nic_ports(settings.infiniband), f"every InfiniBand port in {settings.infiniband} "
                                                                    f"ACTIVE")
        else:
            report.skip("nic", f"no InfiniBand ({settings.infiniband})")
    if settings.command:
        report.add("external", check_external(settings.command, settings.timeout, run, stop, settings.kept_in,
                                              report.transcript), f"{settings.command!r} says fail_count 0")
    else:
        report.skip("external", "no --health-check")
    return report


def keep_answers(path: str, attempt: int, checks: list[str], transcript: list[str]) -> str | None:
    """The health gate's outcomes and every tool's answer, appended to ``path`` for attempt ``attempt``; a line
    saying why it could not be, else None."""
    text = f"== attempt {attempt}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n" + "".join(f"{line}\n" for line in checks) \
        + "".join(transcript)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError as exc:
        return f"cannot keep the health gate's answers in {path}: {exc.strerror}"
    return None

"""Which devices this host lets a job use, and how a rank names its own device.

An inherited ``ASCEND_RT_VISIBLE_DEVICES`` or ``CUDA_VISIBLE_DEVICES`` is the set
of devices the user allows (a shared machine, a container, a scheduler's
allocation): ``--ranks N`` takes the first N of them, and ``--devices`` or a
rank table may name only devices inside it.  With neither variable set,
``--ranks auto`` counts what the hardware shows (``/dev/davinci*`` for Ascend,
``nvidia-smi -L`` for NVIDIA), without importing torch or MindSpore.

Device ids in plans and rank tables are *physical* ids, as HCCL's rank table
and hccl_tools' ``--visible_devices`` use them.  What a process passes to its
runtime is a *logical* id, an index into the devices it can see: Ascend's
runtime numbers the devices of ``ASCEND_RT_VISIBLE_DEVICES`` (or of a container
that mounts only some ``/dev/davinciN``) from 0, and CUDA does the same with
``CUDA_VISIBLE_DEVICES``.  So ``DEVICE_ID`` (MindSpore's) is the logical id
whenever the visible set is a subset, and each rank's ``CUDA_VISIBLE_DEVICES``
lists this host's devices in local-rank order, so that ``cuda:LOCAL_RANK`` is
the physical device the plan names (DeepSpeed does the same).

``discover`` touches the machine (environment, /dev, nvidia-smi); everything
else here is pure.
"""

from __future__ import annotations

import errno
import os
import re
import socket
from dataclasses import dataclass

from launcher.base.border import is_number
from launcher.errors import UsageError

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Mapping

ASCEND_VAR = "ASCEND_RT_VISIBLE_DEVICES"
CUDA_VAR = "CUDA_VISIBLE_DEVICES"
DAVINCI_GLOB = "/dev/davinci[0-9]*"
NVIDIA_SMI_SECONDS = 10.0
MAX_DEVICES = 4096
_DAVINCI = re.compile(r"^davinci(\d+)$")
_NVIDIA_GPU = re.compile(r"^GPU (\d+):")


@dataclass(frozen=True)
class DeviceView:
    """The devices this host offers a job, as found before planning.

    ``source`` says where they were found: a variable name, ``/dev/davinci*``,
    ``nvidia-smi -L``, or "" when nothing restricts or describes them (CPU hosts).
    ``tokens`` are the entries as that source lists them (CUDA also allows UUIDs
    such as ``GPU-8f3c...``, in which case device ids are positions in the list).
    ``restricts`` is true for the variables: only their devices may be used.
    """

    source: str = ""
    tokens: tuple[str, ...] = ()
    restricts: bool = False

    @property
    def numeric(self) -> bool:
        return all(is_number(token) for token in self.tokens)

    @property
    def ids(self) -> list[int]:
        """The device ids a plan may use: physical ids, or positions when the list holds UUIDs."""
        return [int(t) for t in self.tokens] if self.numeric else list(range(len(self.tokens)))

    @property
    def ascend(self) -> bool:
        return self.source in (ASCEND_VAR, DAVINCI_GLOB)

    def describe(self) -> str:
        shown = ",".join(self.tokens) if self.tokens else "(empty)"
        return f"{self.source}={shown}" if self.restricts else f"{self.source} ({shown})"

    def first(self, count: int, flag: str = "--ranks") -> list[int]:
        """``--ranks N``: the first N devices offered (0..N-1 when nothing describes them, e.g. CPU ranks)."""
        if not self.tokens:
            return list(range(count))
        if count > len(self.tokens):
            verb = "allows" if self.restricts else "shows"
            raise UsageError(f"{flag} {count}, but {self.describe()} {verb} only {len(self.tokens)} device(s); "
                             f"use {flag} {len(self.tokens)}" + (f" or widen {self.source}" if self.restricts else ""))
        return self.ids[:count]

    def check(self, devices: list[int], what: str) -> None:
        """Devices named by ``--devices`` or a rank table must be among the allowed ones."""
        if not self.restricts or not self.tokens:
            return
        allowed = set(self.ids)
        outside = [d for d in devices if d not in allowed]
        if outside:
            kind = "" if self.numeric else " (its entries are not numbers, so devices are positions in it)"
            raise UsageError(f"{what} names device {outside[0]}, which {self.describe()} does not allow{kind}; "
                             f"allowed: {','.join(map(str, self.ids))}")

    def cuda_visible(self, local_devices: list[int], inherited: dict) -> str | None:
        """Each rank's ``CUDA_VISIBLE_DEVICES``: this host's devices in local-rank order; None leaves it alone.

        An inherited empty value hides every GPU and stays empty (CPU ranks); on Ascend the variable is not
        dlaunch's to set.  Where no variable restricts the devices and the ranks use devices 0..N-1 in
        local-rank order, the list would change no rank's ``cuda:LOCAL_RANK``: it is left unset, as torchrun
        leaves it (a CPU host's 1,024 ranks would each carry a 4 KiB list, quadratic in bytes per host).
        """
        if self.ascend:
            return None
        if inherited.get(CUDA_VAR) == "":
            return ""
        if self.source == CUDA_VAR and not self.numeric:
            return ",".join(self.tokens[d] for d in local_devices)
        if not self.restricts and local_devices == list(range(len(local_devices))):
            return None   # devices 0..N-1 in order: cuda:LOCAL_RANK is the plan's device already
        return ",".join(map(str, local_devices))

    def device_id(self, device: int) -> int:
        """MindSpore's ``DEVICE_ID``: the logical id on Ascend when only some devices are visible, else physical."""
        if self.ascend and self.tokens and self.numeric and str(device) in self.tokens:
            return self.tokens.index(str(device))
        return device


def parse_list(text: str, source: str) -> tuple[str, ...]:
    """A visible-devices variable's entries; repeated entries are an error the runtime would not report."""
    tokens = tuple(t.strip() for t in text.split(",")) if text.strip() else ()
    if any(not t for t in tokens):
        raise UsageError(f"{source}={text!r} has an empty entry")
    if len(tokens) > MAX_DEVICES:
        raise UsageError(f"{source} lists {len(tokens)} devices; at most {MAX_DEVICES} are supported")
    if len(set(tokens)) != len(tokens):
        raise UsageError(f"{source}={text!r} names a device twice")
    return tokens


def from_environment(environ) -> DeviceView | None:
    """The restriction a user set: ``ASCEND_RT_VISIBLE_DEVICES`` first (it names NPUs), then
    ``CUDA_VISIBLE_DEVICES``."""
    for var in (ASCEND_VAR, CUDA_VAR):
        if var in environ:
            tokens = parse_list(environ[var], var)
            if var == ASCEND_VAR and not all(is_number(t) for t in tokens):
                raise UsageError(f"{var}={environ[var]!r}: entries must be device numbers")
            return DeviceView(source=var, tokens=tokens, restricts=True)
    return None


def _davinci_devices() -> tuple[str, ...]:
    import glob

    found = []
    for path in glob.glob(DAVINCI_GLOB):
        match = _DAVINCI.match(os.path.basename(path))
        if match:
            found.append(int(match[1]))
    return tuple(str(d) for d in sorted(found))


def _nvidia_gpus() -> tuple[str, ...] | None:
    """GPU indices ``nvidia-smi -L`` lists, or None when it is not installed or fails."""
    import shutil
    import subprocess

    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_SECONDS,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return tuple(m[1] for m in map(_NVIDIA_GPU.match, done.stdout.splitlines()) if m)


def discover(environ: Mapping[str, str], probe_hardware: bool = False) -> DeviceView:
    """What this host offers: the variables' restriction, else (``probe_hardware``) what the hardware shows.

    Hardware is probed only for ``--ranks auto``, and to learn on an Ascend host whose ``/dev`` shows only some
    NPUs (a container) which logical ids its devices have.
    """
    restricted = from_environment(environ)
    if restricted is not None:
        return restricted
    davinci = _davinci_devices()
    if davinci:
        return DeviceView(source=DAVINCI_GLOB, tokens=davinci)
    if probe_hardware:
        gpus = _nvidia_gpus()
        if gpus:
            return DeviceView(source="nvidia-smi -L", tokens=gpus)
    return DeviceView()


def auto_count(view: DeviceView) -> list[int]:
    """``--ranks auto``: one rank per visible device; on a host with no GPU or NPU at all, one CPU rank (what
    torchrun's default runs), said on the console."""
    if view.tokens:
        return view.ids
    if view.restricts:
        raise UsageError(f"--ranks auto: {view.source} is empty, so no device is visible; pass --ranks N "
                         f"to start N ranks anyway (CPU)")
    from launcher.base.console import say

    say(f"--ranks auto found no device ({ASCEND_VAR} and {CUDA_VAR} are unset, there is no {DAVINCI_GLOB}, "
        f"and nvidia-smi -L shows no GPU): starting one rank on the CPU (--ranks N starts N)")
    return [0]


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
# Where dlaunch picks a master port, in this order: below the kernel's usual ephemeral range (32768-60999) and
# above torch's own ports (29400 rendezvous, 29500 master, 29501 dlaunch's job port), which another job on the
# host may take at any moment.
PORT_WINDOWS = ((30000, 32767), (10000, 19999))


def free_port(address: str) -> int:
    """A TCP port free on ``address`` right now, outside the kernel's ephemeral range: the kernel hands ports
    in that range to outgoing connections, so one picked there (torchrun's way, bind to port 0) can be taken
    by any connection before rank 0 binds it. Random within the window, and claimed (``claim_port``) so that
    launches side by side never hand out the same one (a taken or claimed one is skipped)."""
    try:
        with open(EPHEMERAL_RANGE, encoding="ascii") as fh:
            first, last = map(int, fh.read().split())
    except (OSError, ValueError):
        first, last = 32768, 60999   # Linux's default range
    for low, high in (*PORT_WINDOWS, (last + 1, 65535)):
        if not (high < first or low > last):   # the window overlaps the range: its larger part outside it
            low, high = max((low, first - 1), (last + 1, high), key=lambda window: window[1] - window[0])
        if high - low >= 1000:
            break
    else:   # no room outside the range: the kernel's choice, as torchrun makes it
        return _bound_port(address, 0)
    for port in _candidates(low, high, 64):
        if not claim_port(address, port):
            continue   # another dlaunch on this host handed it out: its rank 0 may not listen on it yet
        try:
            return _bound_port(address, port)
        except OSError:
            continue   # taken: another
    return _bound_port(address, 0)


_CLAIMS: list[socket.socket] = []   # held until this process ends, when the kernel frees them


def claim_port(address: str, port: int) -> bool:
    """Whether this process now holds the host's one claim on ``port`` of ``address``: an abstract Unix socket
    named after them, which one process at a time can bind (per network namespace, as the port itself) and
    which the kernel releases when the process ends, leaving no file behind.  A port found free is free only
    until the job's rank 0 listens on it, seconds later (``import torch``); without the claim two launches side
    by side could both pick it in those seconds, and one job's ranks would join the other's store."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"\0dlaunch-port-{address}-{port}")
    except OSError:
        sock.close()
        return False
    _CLAIMS.append(sock)
    return True


def _candidates(low: int, high: int, count: int) -> list[int]:
    """``count`` ports drawn at random from ``low .. high`` (os.urandom: the random module is not imported on
    the launch path)."""
    return [low + int.from_bytes(os.urandom(4), "big") % (high - low + 1) for _ in range(count)]


def _bound_port(address: str, port: int) -> int:
    """``port`` (0: one the kernel picks) bound on ``address`` and released; OSError when it is taken,
    UsageError when the address is not this host's."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError as exc:
            if port and exc.errno == errno.EADDRINUSE:
                raise
            raise UsageError(f"cannot use master address {address}: {exc.strerror}") from None
        return sock.getsockname()[1]


def host_names(resolve: bool = False) -> set[str]:
    """Every name and address this host answers to: its host name and short name, localhost, the addresses
    of its interfaces; with ``resolve``, also its fully qualified name (a DNS lookup).

    Choosing this host's server in a rank table resolves (a table may name servers by FQDN, and a launch
    can wait a moment); ``dlaunch status`` does not, since a DNS lookup can hang where there is no network
    and it only asks whether a rank's processes are visible from here.
    """
    import psutil

    name = socket.gethostname()
    names = {"localhost", "::1", name, name.split(".")[0]}
    if resolve:
        names.add(socket.getfqdn())
    for addrs in psutil.net_if_addrs().values():
        names.update(addr.address.split("%")[0] for addr in addrs
                     if addr.family in (socket.AF_INET, socket.AF_INET6))
    return {found for found in names if found}


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity, which ``taskset``, a cpuset container or Slurm's task
    binding narrow (``os.cpu_count()`` counts the machine's); every CPU only where the system cannot say."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):   # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def ranks_per_node(text: str, environ: Mapping[str, str]) -> tuple[int, str]:
    """torchrun's --nproc-per-node N|auto|cpu|gpu|npu as a number, and what it was chosen from (torchrun's
    determine_local_world_size): ``dlaunch torchrun`` and a pod's PET_NPROC_PER_NODE use it."""
    word = str(text).strip().lower()
    if word not in ("auto", "cpu", "gpu", "npu"):
        if not is_number(word) or len(word) > 6 or not 1 <= int(word) <= 65536:
            raise UsageError(f"--nproc-per-node: expected a whole number from 1 to 65536, or auto, cpu, gpu, npu; "
                             f"got {word[:40]!r}")
        return int(word), ""
    cpus = usable_cpus()
    if word == "cpu":
        return cpus, f"--nproc-per-node cpu: {cpus} rank(s), one per CPU this process may use"
    view = discover(environ, probe_hardware=True)
    if word == "auto" and not view.tokens:
        return cpus, f"--nproc-per-node auto: no GPU or NPU visible, so {cpus} CPU rank(s), one per CPU this " \
                     f"process may use"
    if word == "npu" and not view.ascend or word == "gpu" and (view.ascend or not view.tokens):
        raise UsageError(f"--nproc-per-node {word}: no {word.upper()} is visible on this host "
                         f"({view.describe() if view.source else 'no device found'})")
    return len(view.tokens), f"--nproc-per-node {word}: {len(view.tokens)} rank(s), one per device of {view.describe()}"

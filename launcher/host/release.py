"""Waiting for the last attempt's processes to let go of device memory before a restart starts new ones.

A restart that starts ranks before the driver released the old processes' memory fails on real NPUs and
GPUs (out of memory at the first allocation, or a device still busy). NVIDIA's ft_launcher waits up to
50 s for usage under 512 MB; MindCluster's agent waits 15 s "for device release". dlaunch asks the
driver's tool of the devices the job was given, every quarter second, until each of this host's devices
uses less than ``RELEASED_MIB`` or the timeout passes (then it says so in one line and starts anyway):

- Ascend (``ASCEND_RT_VISIBLE_DEVICES`` or ``/dev/davinci*``): ``npu-smi info``, the ``HBM-Usage(MB)``
  (``used / total``) at the end of each NPU's chip row;
- NVIDIA (``CUDA_VISIBLE_DEVICES``, ``nvidia-smi -L``, or nothing said about the devices on a host whose
  ``nvidia-smi`` is on ``PATH``: ``--ranks N`` gives its ranks devices 0..N-1, the ``cuda:LOCAL_RANK`` every
  GPU of the host is visible to): ``nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits``.

Hosts without the tool (so CPU jobs there) do not wait; a CPU job on a GPU host asks about GPUs its ranks do
not use, which costs a quarter second when they hold nothing. Device ids are the physical ids the plan gave
the ranks.
"""

from __future__ import annotations

import re
import shutil
import time

from launcher.base.border import ascii_int, cut_line
from launcher.base.waiting import until
from launcher.host import hccn
from launcher.host.devices import ASCEND_VAR, CUDA_VAR, DAVINCI_GLOB

RELEASED_MIB = 512          # a device using less than this is free for the next attempt (ft_launcher's mark)
POLL_SECONDS = 0.25
TOOL_SECONDS = 5.0          # one call of the tool
NVIDIA_QUERY = ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]

_NPU_ROW = re.compile(r"^\|\s*(\d+)\s+[^\s|][^|]*\|\s*[A-Za-z]+\s*\|")
_CHIP_ROW = re.compile(r"^\|\s*\d+\s*\|\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f:.]+\s*\|.*?(\d+)\s*/\s*\d+\s*\|\s*$")
_GPU_ROW = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*$", re.M)


def parse_npu_memory(text: str) -> dict[int, int]:
    """``npu-smi info``: {NPU id: HBM MiB in use}, from the last ``used / total`` of the chip row under each
    NPU row (a number of more than 12 digits is no reading: that row is skipped)."""
    used: dict[int, int] = {}
    npu = None
    for line in text.splitlines():
        line = cut_line(line)
        row = _NPU_ROW.match(line)
        chip = _CHIP_ROW.match(line)
        if chip and npu is not None:
            mib = ascii_int(chip.group(1), max_digits=12)
            if mib is not None:
                used[npu] = mib
            npu = None
        elif row:
            npu = ascii_int(row.group(1), max_digits=6)
    return used


def parse_gpu_memory(text: str) -> dict[int, int]:
    """``nvidia-smi --query-gpu=index,memory.used``: {GPU index: MiB in use} (rows with numbers of more
    digits than a device could have are skipped)."""
    return {index: mib for index_text, mib_text in _GPU_ROW.findall(text)
            if (index := ascii_int(index_text, max_digits=6)) is not None
            and (mib := ascii_int(mib_text, max_digits=12)) is not None}


def memory_reader(source: str, path: str | None):
    """A function ``read(stop)`` returning {device: MiB in use}, for the devices ``source`` says the job has;
    None where the driver's tool is absent. ``source`` "" (nothing restricts or describes the devices: ``--ranks
    N`` without a variable) asks ``nvidia-smi`` where it is on ``path``: every GPU is visible to the ranks then."""
    if source in (ASCEND_VAR, DAVINCI_GLOB):
        tool = shutil.which(hccn.NPU_SMI, path=path) or shutil.which(hccn.NPU_SMI, path=hccn.DRIVER_TOOLS)
        return (lambda stop=None: parse_npu_memory(hccn.run([tool, "info"], TOOL_SECONDS, stop))) if tool else None
    if source in (CUDA_VAR, "nvidia-smi -L", ""):
        tool = shutil.which("nvidia-smi", path=path)
        return (lambda stop=None: parse_gpu_memory(hccn.run([tool, *NVIDIA_QUERY], TOOL_SECONDS, stop))) \
            if tool else None
    return None


def wait_for_release(devices: list[int], reader, timeout: float, say, stop=None) -> float:
    """Wait until every one of ``devices`` uses less than RELEASED_MIB (or ``timeout`` passes); returns the
    seconds waited. A device the tool does not list, or a tool that fails, is not waited for. ``Stopped`` as
    soon as ``stop`` (``base.waiting``) says a stop signal came."""
    started = time.monotonic()
    busy: dict[int, int] = {}

    def released() -> bool:
        try:
            used = reader(stop)
        except hccn.ToolError as exc:
            say(f"cannot tell whether the devices were released ({exc}): restarting without waiting")
            return True
        was_busy = bool(busy)
        busy.clear()
        busy.update({device: used[device] for device in devices if used.get(device, 0) >= RELEASED_MIB})
        if busy and not was_busy and time.monotonic() - started < timeout:
            say(f"waiting up to {timeout:g} s for the last attempt's device memory to be released ({_shown(busy)})")
        elif not busy and was_busy:
            say(f"devices released after {time.monotonic() - started:.1f} s")
        return not busy

    if not until(released, timeout, POLL_SECONDS, stop):
        say(f"devices still hold memory after {timeout:g} s ({_shown(busy)}; --device-release-timeout): restarting "
            f"anyway")
    return time.monotonic() - started


def _shown(busy: dict[int, int]) -> str:
    return ", ".join(f"device {device}: {mib} MiB" for device, mib in sorted(busy.items()))

"""Ascend MindCluster's reset file in an AscendJob pod: what its cluster controller asks of the training
processes on this node.

ClusterD writes the job's reset ConfigMap, which the pod sees at ``/user/restore/reset/config/reset.json``
(docs/en/scheduling/api/ascend_device_plugin.md, "reset-config"). Its format is ascend-common's
``ResetCmInfo`` (component/ascend-common/api, Ascend/mind-cluster; JSON keys are the Go field names)::

    {"RankList": [{"RankId": 5, "LogicId": 1, "Status": "fault", "Policy": "...", "InitialPolicy": "...",
                   "ErrorCode": [80E01801], "ErrorCodeHex": "..."}],
     "UpdateTime": 1732700000, "RetryTime": 0, "FaultFlushing": false, "GracefulExit": 0,
     "RestartFaultProcess": true}

What an agent does with it (msrun's TaskD plugin, ``component/taskd/.../agent/ms_mgr/msrun_plugin.py``):
``GracefulExit`` 1: stop every training process; a rank ``fault`` on this node with ``RestartFaultProcess``
(and not on node 0, which hosts the controller): restart just those processes with the same environment;
a fault without it: stop everything and exit non-zero, so the pod is rescheduled; ``FaultFlushing``
true: wait, acting on nothing, until it is false. This module only reads; ``execute/local`` acts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from launcher.base.border import Refused, expect, parse_json, read_text, whole_number

RESET_CONFIG = "/user/restore/reset/config/reset.json"   # where the operator mounts the reset ConfigMap
MAX_BYTES = 4 << 20   # a reset file larger than this is not MindCluster's: ignored
VERSION_LIMIT = 4096  # the version file holds a number


@dataclass(frozen=True)
class ResetOrders:
    """What one version of the reset file asks, reduced to what this node's launcher acts on."""

    faults: dict[int, str]     # global rank -> its status ("fault", "unrecovered", ...), ranks not recovered
    restart_fault_process: bool
    graceful_exit: bool
    flushing: bool
    retry_time: int
    update_time: int

    def local_faults(self, ranks) -> list[int]:
        """The ranks of ``ranks`` (this node's) MindCluster marks ``fault``."""
        return sorted(rank for rank in ranks if self.faults.get(rank) == "fault")


def read_reset(path: str) -> ResetOrders | None:
    """The reset file's orders, or None when there is none or it does not read as MindCluster's (a file half
    rewritten by the kubelet's ConfigMap update is read again on the next look). The operator's mount is a
    link (the kubelet's ``..data``), so links are followed; what they lead to must still be a regular file."""
    try:
        text = read_text(path, "reset file", MAX_BYTES, follow=True)
        return None if text is None else parse_reset(text)
    except Refused:
        return None


def parse_reset(text: str) -> ResetOrders:
    """The reset file's text as orders; Refused for anything that is not ``ResetCmInfo``'s shape."""
    data = expect(parse_json(text, "reset file"), dict, "reset file")
    faults = {}
    for entry in expect(data.get("RankList") or [], list, "reset file RankList"):
        if not isinstance(entry, dict):
            continue
        try:   # an int in ResetCmInfo; a string of digits tolerated; anything else is no rank
            rank = whole_number(entry.get("RankId"), "reset file RankId", low=0)
        except Refused:
            continue
        status = str(entry.get("Status") or "")[:40].lower()
        if status and status != "recovered":
            faults[rank] = status
    return ResetOrders(faults=faults, restart_fault_process=data.get("RestartFaultProcess") is True,
                       graceful_exit=_number(data.get("GracefulExit")) == 1, flushing=data.get("FaultFlushing") is True,
                       retry_time=_number(data.get("RetryTime")), update_time=_number(data.get("UpdateTime")))


def _number(value) -> int:
    """A field MindCluster writes as an integer; 0 when it is not one."""
    try:
        return whole_number(value, "reset file field")
    except Refused:
        return 0


class ResetWatch:
    """The reset file, looked at about once a second as MindCluster's agents do; new orders only when it
    changed (its modification time or size), so one set of orders is acted on once."""

    def __init__(self, path: str, interval: float = 1.0):
        self.path, self.interval = path, interval
        self.next_look = 0.0
        self.seen: tuple[float, int] | None = None

    def due(self, now: float) -> bool:
        return now >= self.next_look

    def check(self, now: float) -> ResetOrders | None:
        self.next_look = now + self.interval
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        if (stat.st_mtime, stat.st_size) == self.seen:
            return None
        orders = read_reset(self.path)
        if orders is not None:   # a half-written file is read again next time
            self.seen = (stat.st_mtime, stat.st_size)
        return orders


def process_recovery(environ) -> bool:
    """Whether the AscendJob operator enabled process-level recovery for this pod (ascend-operator's env.go:
    PROCESS_RECOVER=on for the recover, retry, dump and recover-in-place strategies, with
    ENABLE_RESTART_FAULT_PROCESS=on for recover-in-place): a failed rank then waits for ClusterD's order."""
    return environ.get("PROCESS_RECOVER") == "on" or environ.get("ENABLE_RESTART_FAULT_PROCESS") == "on"


def version_path(rank_table: str) -> str:
    """The rank table's ``version`` file, beside hccl.json (``/user/serverid/devindex/config/version``): the
    operator makes it grow each time it rewrites the table for a rescheduled pod."""
    return os.path.join(os.path.dirname(os.path.abspath(rank_table)), "version")


def read_version(path: str) -> str | None:
    """The rank table's version file's text (its first line, stripped), or None when absent or unreadable."""
    try:
        text = read_text(path, "the rank table's version file", VERSION_LIMIT, follow=True)
    except Refused:
        return None
    return None if text is None else parse_version(text)


def parse_version(text: str) -> str:
    """What a version file says: its text, stripped, at most 256 characters (it is only compared)."""
    return text.strip()[:256]


def recovered(reset_path: str, version_file: str, since: str | None) -> bool:
    """Every rank ``recovered`` (none listed otherwise, nothing flushing) and the table's version moved on
    from ``since``: the rescheduled pod is in the table, the job may start again."""
    orders = read_reset(reset_path)
    return (orders is not None and not orders.faults and not orders.flushing
            and read_version(version_file) not in (None, since))

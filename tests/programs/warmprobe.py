"""Imported ahead by a warm-restart standby in tests/e2e/test_warm_restarts.py (``--warm-restarts torch,warmprobe``)
and by the job's script: it writes ``probe.<pid>.json`` in the rank's directory with the CPU priority (nice) of the
thread importing it, whether that is the main thread, the restart count the environment says, and the nice of
its session's autogroup."""

import json
import os
import threading

try:
    with open("/proc/self/autogroup") as _group:   # the session's CPU share, where the kernel groups by session
        _autogroup = _group.read().split()[-1]
except OSError:
    _autogroup = None
with open(os.path.join(os.environ["DLAUNCH_RANK_DIR"], f"probe.{os.getpid()}.json"), "w") as _fh:
    json.dump({"nice": os.getpriority(os.PRIO_PROCESS, 0), "main": threading.current_thread() is
               threading.main_thread(), "restart_count": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
               "autogroup": _autogroup}, _fh)

"""Imported ahead by a warm-restart standby in tests/e2e/test_warm_restarts.py (``--warm-restarts torch,warmprobe``)
and by the job's script: it writes ``probe.<pid>.json`` in the rank's directory with the CPU priority (nice) of the
thread importing it, whether that is the main thread, and the restart count the environment says."""

import json
import os
import threading

with open(os.path.join(os.environ["DLAUNCH_RANK_DIR"], f"probe.{os.getpid()}.json"), "w") as _fh:
    json.dump({"nice": os.getpriority(os.PRIO_PROCESS, 0), "main": threading.current_thread() is
               threading.main_thread(), "restart_count": os.environ.get("TORCHELASTIC_RESTART_COUNT")}, _fh)

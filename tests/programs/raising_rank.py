"""A rank for tests/e2e/test_raised.py. RAISE_MODE says what rank 1 does; rank 0 steps until stopped, saving
on notice where a survivors' window is asked for, and notes the notice it got.

- ``raise``: rank 1 raises after its teardown was made slow (an atexit handler sleeping 60 s, as torch's
  teardown can take seconds): a launcher that waits for its exit waits a minute;
- ``record``: the same under torchelastic's ``@record`` (its error file written first);
- ``caught``: rank 1 raises and catches its own exception, then exits 0: not a failure;
- ``exit``: rank 1 calls ``sys.exit(3)``: judged by its exit, as before;
- ``child``: rank 1 runs a child Python that raises, then exits 0: a child never speaks for its rank.
Rank 0 exits 0 on its own after 40 s (only in ``caught``/``child``/``exit`` does the job need that). Rank 1 acts
once rank 0 asked for the notice (its ``listening`` mark): the window waits only for ranks that asked.
"""

import atexit
import os
import pathlib
import subprocess
import sys
import time

mode = os.environ["RAISE_MODE"]
marks = pathlib.Path(os.environ["DLAUNCH_RUN_DIR"])
if os.environ["RANK"] == "0":
    from launcher import checkpoint

    (marks / "path_seen_by_rank").write_text(f"{os.environ.get('PYTHONPATH', '')}\n{os.pathsep.join(sys.path)}")
    end = time.monotonic() + (3 if mode in ("caught", "child", "exit") else 40)
    while time.monotonic() < end:
        found = checkpoint.notice() if os.environ.get("DLAUNCH_NOTICE_FILE") else None
        (marks / "listening").touch()   # rank 1 fails only now: a rank that never asked is not waited for
        if found is not None:
            (marks / "noticed").write_text(str(found.get("failed_rank")))
            sys.exit(0)
        time.sleep(0.02)
    sys.exit(0)

deadline = time.monotonic() + 30
while not (marks / "listening").exists() and time.monotonic() < deadline:   # a loaded machine starts rank 0 late
    time.sleep(0.02)
if mode == "exit":
    sys.exit(3)
if mode == "child":
    subprocess.run([sys.executable, "-c", "raise SystemError('the child')"], check=False)
    sys.exit(0)
if mode == "caught":
    try:
        raise ValueError("caught here")
    except ValueError:
        sys.exit(0)
atexit.register(time.sleep, 60)   # a slow teardown


def main():
    raise ValueError("rank 1 broke")


if mode == "record":
    from torch.distributed.elastic.multiprocessing.errors import record

    main = record(main)
main()

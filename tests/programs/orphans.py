"""A rank that leaves orphans (reparented to dlaunch), then counts the zombies dlaunch has.

Writes ``zombies`` (how many of dlaunch's children, its own parent's, are in state Z after the orphans exited:
dlaunch is a child subreaper, as PID 1 or not) into its rank
directory, prints a last line, then exits with argv[1] or, with "wait", waits for SIGTERM and exits 0.
"""

import os
import signal
import subprocess
import sys
import time

rank_dir = os.environ["DLAUNCH_RANK_DIR"]
for _ in range(5):   # sh exits at once; its background sleeps become orphans, handed to dlaunch (PID 1)
    subprocess.run(["sh", "-c", "sleep 0.2 &"], check=True)
time.sleep(1.5)      # the orphans have exited; a PID 1 that does not reap leaves them as zombies


def zombies() -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            count += fields[:1] == [b"Z"] and int(fields[1]) == os.getppid()
    return count


with open(os.path.join(rank_dir, "zombies"), "w") as fh:
    fh.write(str(zombies()))
print("orphans gone; last words of the rank", flush=True)
if sys.argv[1] == "wait":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    open(os.path.join(rank_dir, "ready"), "w").close()
    time.sleep(60)
    sys.exit(5)
sys.exit(int(sys.argv[1]))

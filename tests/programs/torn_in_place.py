"""A rank for tests/e2e/test_memory_keeper.py's restart in place (``--restart-policy rank``): two ranks without
collectives sharing the host's ``DLAUNCH_MEMORY_DIR``.

Rank 0, first life: saves ``ckpt.pt`` (a zip, as ``torch.save`` writes one) holding step 3, waits until dlaunch
has mirrored it to disk, then starts writing step 4 over it and dies half-way (``os._exit(9)``, as a SIGKILL in
the middle of ``torch.save``): ``ckpt.pt`` is torn. Second life (restarted alone while rank 1 runs on): reads
``ckpt.pt`` and says which step it holds, or that it is torn (exit 3). Rank 1 exits 0 once rank 0 began (a
torch-style job's rank restarts alone once no peer is left: the restart waits for it).
"""
import io
import os
import sys
import time
import zipfile


def archive(step: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("ckpt/data.pkl", f"step {step}".encode() + b"\0" * 4096)
    return buffer.getvalue()


memory, deadline = os.environ["DLAUNCH_MEMORY_DIR"], time.monotonic() + 60
marker = os.path.join(os.environ["DLAUNCH_RUN_DIR"], "rank_000", "first.life")
if os.environ["RANK"] == "1":   # ends once rank 0 began: dlaunch restarts rank 0 alone when no peer is left
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(0 if os.path.exists(marker) else 4)

path = os.path.join(memory, "ckpt.pt")
if not os.path.exists(marker):
    open(marker, "w").close()
    with open(path, "wb") as fh:
        fh.write(archive(3))
    mirrored = os.path.join(os.environ["DLAUNCH_CKPT_DIR"], "memory", "ckpt.pt")
    while not os.path.exists(mirrored) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(path, "wb") as fh:   # step 4 over it, killed half-way
        fh.write(archive(4)[:1000])
        fh.flush()
        os._exit(9)
try:
    with zipfile.ZipFile(path) as zf:
        held = zf.read("ckpt/data.pkl").rstrip(b"\0").decode()
    print(f"resumed {held}", flush=True)
except zipfile.BadZipFile:
    print("ckpt.pt is torn", flush=True)
    sys.exit(3)

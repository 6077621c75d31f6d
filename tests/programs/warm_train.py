"""A small data-parallel torch job for the warm-restart tests (tests/e2e/test_warm_restarts.py): gloo, a Linear
model on seeded data, gradients all-reduced, a checkpoint (launcher.checkpoint) every 3 steps, 10 steps.

Attempt 0: rank 1 exits 3 after step 7 (its checkpoint of step 6 saved), once the next attempt's standbys
run (with WARM_WAIT set), and have imported tests/programs/warmprobe.py (with WARM_PROBE set; at most 120 s).
Every attempt's rank writes ``proc.<attempt>.json``: its pid, when its process was created and when the
script began (both on the monotonic clock, which on Linux counts from boot as /proc's start times do),
whether ``colorsys`` was imported before the script imported it, the restart count it sees, and the nice
values of its threads; rank 0 writes the loss of every step it ran to ``losses.<attempt>.json``, so a warm
restart can be compared with a cold one. Every attempt imports ``colorsys`` (a standard module nobody lists
in --warm-restarts) after its set-up.
"""

import json
import os
import sys
import time

began = time.monotonic()
preloaded = "colorsys" in sys.modules
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from launcher import checkpoint  # noqa: E402

rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank_dir = os.environ["DLAUNCH_RANK_DIR"]
with open(os.path.join(rank_dir, f"proc.{attempt}.json"), "w") as fh:
    with open("/proc/self/stat") as stat:   # its start, in the same clock as time.monotonic (seconds since boot)
        created = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        try:   # a thread that just ended (the standby's import thread) is skipped
            with open(f"/proc/self/task/{tid}/stat") as task:
                threads[tid] = task.read().rsplit(")", 1)[1].split()[16]
        except OSError:
            continue
    json.dump({"pid": os.getpid(), "created": created, "began": began, "argv": sys.argv, "name": __name__,
               "preloaded": preloaded, "restart_count": os.environ["TORCHELASTIC_RESTART_COUNT"],
               "nice": os.getpriority(os.PRIO_PROCESS, 0), "threads_nice": sorted(set(threads.values())),
               "autogroup": open("/proc/self/autogroup").read().split()[-1]
               if os.path.exists("/proc/self/autogroup") else None}, fh)


def standbys_running() -> bool:
    """A process of this run started as a standby (its command line names standby.py, its environment
    this run's directory)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"standby.py" not in fh.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if f"DLAUNCH_RUN_DIR={os.environ['DLAUNCH_RUN_DIR']}\0".encode() in fh.read():
                    return True
        except OSError:
            continue
    return False


dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
start = 0
resumed = checkpoint.resume_step()
if resumed:
    state = checkpoint.load()
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = resumed[1]
data = torch.Generator().manual_seed(1)
xs, ys = torch.randn(10, 4, 8, generator=data), torch.randn(10, 4, 1, generator=data)
losses = []
for step in range(start, 10):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(xs[step] + rank), ys[step])
    loss.backward()
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= dist.get_world_size()
    opt.step()
    total = loss.detach().clone()
    dist.all_reduce(total)
    losses.append(round(total.item(), 6))
    if (step + 1) % 3 == 0:
        checkpoint.save({"model": model.state_dict(), "opt": opt.state_dict()}, 0, step + 1)
    if step == start:
        import colorsys  # noqa: F401 - imported by the job, listed by nobody
    if attempt == 0 and rank == 1 and step + 1 == 7:
        deadline = time.monotonic() + 120
        while os.environ.get("WARM_WAIT") and not standbys_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        run_dir = os.environ["DLAUNCH_RUN_DIR"]   # WARM_PROBE: until both standbys imported warmprobe ahead
        while os.environ.get("WARM_PROBE") and time.monotonic() < deadline and not all(
                any(name.startswith("probe.") for name in os.listdir(os.path.join(run_dir, f"rank_{r:03d}")))
                for r in (0, 1)):
            time.sleep(0.2)
        with open(os.path.join(rank_dir, "failed_at"), "w") as fh:
            fh.write(str(time.monotonic()))
        os._exit(3)
if rank == 0:
    with open(os.path.join(rank_dir, f"losses.{attempt}.json"), "w") as fh:
        json.dump(losses, fh)
dist.barrier()
os._exit(0)   # not destroy_process_group: it crashes a rank now and then under load (bench_restart.py)

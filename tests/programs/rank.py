"""A configurable rank program for launcher tests: each flag is one behaviour a real job shows.

Writes what it observed into DLAUNCH_RANK_DIR so tests can check it after the run.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--dump-env", action="store_true", help="write the environment to env.json")
parser.add_argument("--fail-rank", type=int, help="this rank exits with --code after --after seconds")
parser.add_argument("--code", type=int, default=3)
parser.add_argument("--after", type=float, default=0.0)
parser.add_argument("--kill-self", help="instead of exiting, kill itself with this signal name")
parser.add_argument("--fail-on-attempt", type=int, help="fail only while TORCHELASTIC_RESTART_COUNT equals this")
parser.add_argument("--sleep", type=float, default=0.0, help="then sleep this long")
parser.add_argument("--child", action="store_true", help="start a child process that sleeps (a data loader)")
parser.add_argument("--trap", action="append", default=[], help="record this signal (e.g. SIGINT), then exit 0")
parser.add_argument("--trap-delay", type=float, default=0.0, help="seconds the trap handler works before exiting")
parser.add_argument("--allreduce", action="store_true", help="gloo all_reduce of rank+1, result to allreduce.json")
parser.add_argument("--print", dest="lines", type=int, default=0, help="print this many numbered lines")
parser.add_argument("--torn-lines", action="store_true", help="write each line in three flushed pieces")
parser.add_argument("--exit-early-rank", type=int, help="this rank exits 0 at once")
parser.add_argument("--hang-in-allreduce", type=int, metavar="R",
                    help="rank R never joins; the others block in a gloo all_reduce")
parser.add_argument("--heartbeat-for", type=float, default=0.0, help="beat the heartbeat (silently) this long")
parser.add_argument("--heartbeat-ranks", help="only these ranks beat (comma list; default all)")
parser.add_argument("--daemon", action="store_true",
                    help="double-fork a setsid daemon with an empty environment that sleeps; its pid to daemon.jsonl")
parser.add_argument("--fill-disk", metavar="PATH", help="at the end, write zeros to PATH until the disk is full")
parser.add_argument("--progress-until", metavar="FILE",
                    help="draw a progress bar with \\r, and finish its line only once FILE exists")
parser.add_argument("--save-steps", type=int, default=0, metavar="N",
                    help="save checkpoint steps 0_1..0_N (after DLAUNCH_RESUME_STEP's) into DLAUNCH_CKPT_DIR, as "
                         "launcher.checkpoint names them, each written to a temporary and renamed")
parser.add_argument("--fail-once-all-saved", action="store_true",
                    help="the --fail-rank fails only once every rank of the run holds step 0_N of --save-steps "
                         "(else, on a loaded machine, fail-fast may stop a slower rank before it saved)")
parser.add_argument("--fresh-sleep", type=float, default=0.0,
                    help="sleep this long unless resumed (DLAUNCH_RESUME_STEP): a job waiting to be preempted")
parser.add_argument("--label", action="append", default=[], help="any text; recorded in labels.jsonl as received")
args = parser.parse_args()

rank = int(os.environ["RANK"])
rank_dir = os.environ["DLAUNCH_RANK_DIR"]


def note(name, data):
    with open(os.path.join(rank_dir, name), "a") as fh:
        fh.write(json.dumps(data) + "\n")


def on_signal(signum, frame):
    time.sleep(args.trap_delay)
    note("signals.jsonl", {"signal": signal.Signals(signum).name, "rank": rank})
    os._exit(0)


for name in args.trap:
    signal.signal(getattr(signal, name), on_signal)

note("pids.jsonl", {"pid": os.getpid(), "cwd": os.getcwd()})
if args.label:
    note("labels.jsonl", {"labels": args.label})
if args.dump_env:
    with open(os.path.join(rank_dir, "env.json"), "w") as fh:
        json.dump(dict(os.environ), fh)
if args.child:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    note("pids.jsonl", {"pid": child.pid, "child": True})
if args.daemon:
    read_end, write_end = os.pipe()
    if os.fork() == 0:           # the first child: start the daemon and leave at once, as daemon(3) does
        os.setsid()
        if os.fork() == 0:       # the daemon: its own session, no marker in its environment
            os.close(read_end)
            os.write(write_end, str(os.getpid()).encode())
            os.close(write_end)
            os.execve("/bin/sleep", ["sleep", "1000"], {})
        os._exit(0)
    os.close(write_end)
    daemon_pid = int(os.read(read_end, 64))
    os.close(read_end)
    note("daemon.jsonl", {"pid": daemon_pid})
if args.allreduce:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor)
    note("allreduce.jsonl", {"sum": tensor.item(), "world": dist.get_world_size()})
    dist.destroy_process_group()
if args.heartbeat_for and (args.heartbeat_ranks is None or str(rank) in args.heartbeat_ranks.split(",")):
    from launcher import heartbeat

    until = time.time() + args.heartbeat_for
    while time.time() < until:
        heartbeat.beat()
        time.sleep(0.2)
if args.hang_in_allreduce is not None:
    import threading

    from launcher import heartbeat

    starting = threading.Event()   # alive (heartbeat) while importing torch and joining: slow on a busy machine

    def beat_while_starting():
        while not starting.wait(0.2):
            heartbeat.beat()

    threading.Thread(target=beat_while_starting, daemon=True).start()
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    starting.set()
    print(f"rank {rank} ready", flush=True)
    note("ready.jsonl", {"time": time.time()})
    if rank == args.hang_in_allreduce:
        time.sleep(3600)
    dist.all_reduce(torch.ones(1))
if args.progress_until:
    sys.stdout.write(f"\rrank {rank} progress 1/2")
    sys.stdout.flush()
    waited = time.time() + 60
    while not os.path.exists(args.progress_until) and time.time() < waited:
        time.sleep(0.02)
    sys.stdout.write(f"\rrank {rank} progress 2/2\n")
    sys.stdout.flush()
for i in range(args.lines):
    line = f"rank {rank} line {i} " + "x" * 50 + "\n"
    if args.torn_lines:
        for piece in (line[:10], line[10:30], line[30:]):
            sys.stdout.write(piece)
            sys.stdout.flush()
            time.sleep(0.001)
    else:
        sys.stdout.write(line)
sys.stdout.flush()
if args.exit_early_rank == rank:
    sys.exit(0)
first_step = int(os.environ.get("DLAUNCH_RESUME_STEP", "0_0").split("_")[1]) + 1
for step in range(first_step, args.save_steps + 1):
    path = os.path.join(os.environ["DLAUNCH_CKPT_DIR"], f"ckpt-0_{step}.pt")
    with open(path + ".part", "w") as fh:
        fh.write(f"rank {rank} step {step}\n")
    os.rename(path + ".part", path)
    note("saved.jsonl", {"step": step})
if "DLAUNCH_RESUME_STEP" not in os.environ:
    time.sleep(args.fresh_sleep)
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if args.fail_rank == rank and (args.fail_on_attempt is None or args.fail_on_attempt == attempt):
    if args.fail_once_all_saved:
        import glob

        below = os.path.relpath(os.environ["DLAUNCH_CKPT_DIR"], os.environ["DLAUNCH_RANK_DIR"])
        pattern = os.path.join(os.environ["DLAUNCH_RUN_DIR"], "*", below, f"ckpt-0_{args.save_steps}.pt")
        deadline = time.monotonic() + 60
        while len(glob.glob(pattern)) < int(os.environ["WORLD_SIZE"]) and time.monotonic() < deadline:
            time.sleep(0.02)
    time.sleep(args.after)
    print(f"rank {rank} fails now with code {args.code}", flush=True)
    note("failed.jsonl", {"time": time.time()})
    if args.kill_self:
        os.kill(os.getpid(), getattr(signal, args.kill_self))
    sys.exit(args.code)
time.sleep(args.sleep)
print(f"rank {rank} done", flush=True)
if args.fill_disk:
    try:
        with open(args.fill_disk, "wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
    except OSError:
        pass   # full, as intended

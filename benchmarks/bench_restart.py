"""Restart after a rank failure, measured side by side: dlaunch (cold, and with the survivors' window), torchrun
and NVIDIA's ft_launcher (nvidia-resiliency-ext), in the same run, on this machine.

The job: 4 CPU ranks on gloo (``init_process_group(timeout=10 s)``, so nothing waits longer for a dead peer), a
tiny model (``Linear(64, 64)``, SGD), its gradients all_reduced every step, ~0.05 s of work a step, a checkpoint
every 10 steps.  In attempt 0, rank 2 completes step 35, writes ``time.time()`` and exits 3 (``os._exit``); the
launcher must restart all ranks (``--max-restarts 1``), which resume from a checkpoint and train to step 45.
Rank 0 of the new attempt writes ``time.time()`` once its first all_reduce completed, with the step it resumed
from.  Measured per run:

1. failure to training again: rank 0's stamp minus rank 2's stamp (seconds): the launcher seeing the
   failure, stopping the survivors, the restart, every rank's ``import torch`` and rendezvous, loading the
   checkpoint, and one step.  Also shown, split at the moment rank 0's new process started (its first line,
   before ``import torch``): "to respawn" (the launcher's part) and "respawn to training" (the job's).
2. steps lost: the step reached at the failure (35) minus the step the new attempt resumed from.

The launchers (``--launchers``, default all of them):

- ``dlaunch``: ``python -m launcher run TRAIN.py --ranks 4 --max-restarts 1 --profile structure``; the script
  saves with ``launcher.checkpoint.save(..., replicated=True)`` and resumes from ``DLAUNCH_RESUME_FROM``
  (``checkpoint.load()``, ``checkpoint.resume_step()``), which dlaunch sets on the restart.
- ``dlaunch-window``: the same plus ``--survivor-window 10``: a survivor whose all_reduce failed (or that sees
  the notice at the top of a step) polls ``checkpoint.notice()`` for up to 2 s, saves the step it completed with
  ``checkpoint.save_on_notice(state, 0, step, replicated=True)`` and exits; rank 2 resumes from a replica.
- ``dlaunch-warm`` and ``dlaunch-window-warm``: the two above plus ``--warm-restarts torch``: the restarted
  ranks run in standby interpreters that imported torch while attempt 0 ran.
- ``dlaunch-ft``: ``--fault-tolerant`` alone (no ``--max-restarts 1``): what the one switch turns on here (10
  restarts, the 10 s survivors' window, warm restarts where torch imports, learned hang timeouts, the health gate
  where a device tool is); the script saves on notice, as under ``dlaunch-window``.
- ``torchrun``: ``python -m torch.distributed.run --nproc-per-node 4 --max-restarts 1 --standalone TRAIN.py``;
  the script saves with ``torch.save`` into a per-rank directory and, when ``TORCHELASTIC_RESTART_COUNT`` > 0,
  resumes from the newest step every rank saved.
- ``torchrun-noshare``: the same with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``.  torch 2.13's torchrun keeps one
  rendezvous TCP store server for every attempt and its ranks use it without a per-attempt prefix
  (``TORCHELASTIC_USE_AGENT_STORE``; ``dynamic_rendezvous.py`` creates it once, ``rendezvous.py`` assumes a new
  store every retry), so the restarted ranks read attempt 0's gloo addresses and fail with "Gloo connectFullMesh
  failed ... Connection refused"; with the variable each attempt's rank 0 hosts a store of its own.  Where plain
  torchrun completed no restart, the "/torchrun" ratios are against this variant, and the table says so.
- ``ft_launcher``: nvidia-resiliency-ext's ``ft_launcher`` with torchrun's arguments and
  ``--ignore-missing-fault-tol-cfg`` (its rank monitors run; the script uses no FT client, so no heartbeat
  timeout applies), from its own virtual environment (``--ft-venv``, default /tmp/ftvenv) with the same
  torch==2.13.0 CPU wheel:
      python3 -m venv /tmp/ftvenv && /tmp/ftvenv/bin/pip install torch==2.13.0 nvidia-resiliency-ext
  Where it is not installed, or cannot run here, the table says so and the others are measured all the same.

Every launcher runs with its own defaults otherwise; the order of the launchers is reversed every repetition.
A run counts only if the launcher exits 0, rank 0 finished step 45 in attempt 1 and both stamps exist; a run
that fails (or outlives ``--timeout``, default 120 s, and is killed) is listed with its reason, not averaged.
Ratios are of medians from this same run: ``launcher / ft_launcher`` and ``launcher / torchrun``.  Rank
processes still alive after their launcher exited are reported and killed.

Run:  .venv/bin/python benchmarks/bench_restart.py --repeat 3
      [--launchers dlaunch,dlaunch-window,dlaunch-warm,dlaunch-window-warm,dlaunch-ft,torchrun,torchrun-noshare,
      ft_launcher] [--ranks N] [--ft-venv DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import describe_procs, kill_procs, run_launcher  # noqa: E402  (the shared harness: one run measured)

REPO = Path(__file__).resolve().parent.parent
LAUNCHERS = ("dlaunch", "dlaunch-window", "dlaunch-warm", "dlaunch-window-warm", "dlaunch-ft", "torchrun",
             "torchrun-noshare", "ft_launcher")
NPROC = 4
FAIL_RANK = 2
FAIL_CODE = 3
FAIL_STEP = 35
END_STEP = 45
SAVE_EVERY = 10
STEP_TIME = 0.05
SURVIVOR_WINDOW = 10
RUN_TIMEOUT = 120.0

# The training script every launcher runs.  Modes: "dlaunch" (launcher.checkpoint, resume from dlaunch's
# DLAUNCH_RESUME_FROM), "window" (the same, plus the dying gasp on the notice), "plain" (torch.save into
# CKPT/rank_N, resume from the newest step every rank saved when TORCHELASTIC_RESTART_COUNT > 0).
TRAIN = r'''
import time

T_START = time.time()   # before import torch: when this process began running Python

import argparse
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=("dlaunch", "window", "plain"), required=True)
parser.add_argument("--stamps", required=True)
parser.add_argument("--ckpt", default="")
parser.add_argument("--fail-rank", type=int, default=2)
parser.add_argument("--fail-code", type=int, default=3)
parser.add_argument("--fail-how", choices=("exit", "raise"), default="exit")
parser.add_argument("--fail-step", type=int, default=35)
parser.add_argument("--end-step", type=int, default=45)
parser.add_argument("--save-every", type=int, default=10)
parser.add_argument("--step-time", type=float, default=0.05)
args = parser.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def stamp(name, **values):
    path = os.path.join(args.stamps, name)
    with open(path + ".tmp", "w") as fh:
        json.dump(values, fh)
    os.replace(path + ".tmp", path)


if rank == 0:
    stamp(f"start-{attempt}.json", time=T_START, pid=os.getpid())
dist.init_process_group("gloo", timeout=timedelta(seconds=10))
T_INIT = time.time()
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
params = list(model.parameters())


def state():
    return {"model": model.state_dict(), "opt": opt.state_dict()}


def restore(loaded):
    model.load_state_dict(loaded["model"])
    opt.load_state_dict(loaded["opt"])


def rank_file(r, step):
    return os.path.join(args.ckpt, f"rank_{r}", f"step-{step}.pt")


def plain_save(step):
    path = rank_file(rank, step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(state(), path + ".tmp")
    with open(path + ".tmp", "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(path + ".tmp", path)


def plain_resume():
    """The newest step every rank saved, its state loaded; 0 when there is none."""
    steps = None
    for r in range(world):
        try:
            names = os.listdir(os.path.join(args.ckpt, f"rank_{r}"))
        except FileNotFoundError:
            names = []
        mine = {int(n[5:-3]) for n in names if n.startswith("step-") and n.endswith(".pt")}
        steps = mine if steps is None else steps & mine
    if not steps:
        return 0
    step = max(steps)
    restore(torch.load(rank_file(rank, step), weights_only=True))
    return step


start = 0
if args.mode == "plain":
    if attempt > 0:
        start = plain_resume()
else:
    from launcher import checkpoint

    loaded = checkpoint.load()
    if loaded is not None:
        restore(loaded)
        start = checkpoint.resume_step()[1]


def gasp(done, error=None):
    """The dying gasp (--survivor-window): wait up to 2 s for dlaunch's notice, save the step completed, exit."""
    deadline = time.monotonic() + (2.0 if error is not None else 0.0)
    while True:
        if checkpoint.save_on_notice(state(), 0, done, replicated=True):
            print(f"rank {rank}: peer lost after step {done}: saved on the notice", flush=True)
            os._exit(1)
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


first = True
for step in range(start + 1, args.end_step + 1):
    if args.mode == "window" and checkpoint.notice() is not None:
        gasp(step - 1)
    began = time.perf_counter()
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    left = args.step_time - (time.perf_counter() - began)
    if left > 0:
        time.sleep(left)   # the rest of the step's work
    try:
        dist.all_reduce(flat)
    except Exception as error:   # a peer died: gloo fails the collective (or times out after 10 s)
        print(f"rank {rank}: all_reduce of step {step} failed: {type(error).__name__}: {error}"[:400], flush=True)
        if args.mode == "window":
            gasp(step - 1, error)
        os._exit(1)
    if first and rank == 0 and attempt >= 1:
        stamp(f"resumed-{attempt}.json", time=time.time(), resumed_from=start, started=T_START, init=T_INIT)
    first = False
    flat /= world
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()
    opt.step()
    if step % args.save_every == 0:
        if args.mode == "plain":
            plain_save(step)
        else:
            checkpoint.save(state(), 0, step, replicated=True)
    if attempt == 0 and rank == args.fail_rank and step == args.fail_step:
        stamp("failed.json", time=time.time(), step=step)
        if args.fail_how == "raise":   # an uncaught exception: the interpreter's and torch's teardown follow
            raise RuntimeError(f"rank {rank} failed at step {step}")
        os._exit(args.fail_code)

if rank == 0:
    stamp(f"done-{attempt}.json", time=time.time(), step=args.end_step)
# Every rank past its last collective, then out without gloo's teardown: destroy_process_group() racing peers
# that already closed their sockets sometimes ends a rank in SIGABRT ("terminate called without an active
# exception"), failing a run that had restarted and trained to the end.
dist.barrier()
sys.stdout.flush()
os._exit(0)
'''

# What a launcher's or its ranks' output says when gloo could not form the new group (torchrun's known failure),
# in the order of preference: the reason given for a failed run is the first line with the first of these found.
KNOWN_ERRORS = ("connectFullMesh failed", "Connection refused", "DistNetworkError", "DistStoreError",
                "RendezvousTimeoutError", "RendezvousClosedError")


@dataclass
class Outcome:
    launcher: str
    rep: int
    ok: bool
    seconds: float = float("nan")        # failure (rank 2's exit) to rank 0's first all_reduce of attempt 1
    to_respawn: float = float("nan")     # failure to rank 0's new process running Python
    respawned: float = float("nan")      # that to its first all_reduce
    lost: float = float("nan")           # steps: the failure's step minus the step resumed from
    resumed_from: int | None = None
    wall: float = float("nan")           # the whole launcher run
    why: str = ""
    leftovers: list = field(default_factory=list)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-900:]


class Bench:
    def __init__(self, tmp: Path, args):
        self.tmp, self.args = tmp, args
        self.train = tmp / "train_restart.py"
        self.train.write_text(TRAIN)
        (tmp / "tmpdir").mkdir()
        self.base_env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp / "tmpdir")}
        self.ft_launcher = Path(args.ft_venv) / "bin" / "ft_launcher"
        self._n = 0

    def script_args(self, mode: str, stamps: Path, ckpt: Path) -> list[str]:
        a = self.args
        return ["--mode", mode, "--stamps", str(stamps), "--ckpt", str(ckpt), "--fail-rank", str(FAIL_RANK),
                "--fail-code", str(FAIL_CODE), "--fail-how", a.fail_how, "--fail-step", str(a.fail_step),
                "--end-step", str(a.end_step),
                "--save-every", str(a.save_every), "--step-time", str(a.step_time)]

    def command(self, launcher: str, work: Path) -> tuple[list[str], dict]:
        stamps, ckpt = work / "stamps", work / "ckpt"
        stamps.mkdir()
        env = dict(self.base_env)
        if launcher.startswith("dlaunch"):
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
            window = ["--survivor-window", str(SURVIVOR_WINDOW)] if "window" in launcher else []
            warm = ["--warm-restarts", "torch"] if launcher.endswith("warm") else []
            switch = ["--fault-tolerant"] if launcher == "dlaunch-ft" else ["--max-restarts", "1"]
            mode = "window" if window or launcher == "dlaunch-ft" else "dlaunch"
            return [sys.executable, "-m", "launcher", "run", str(self.train), "--ranks", str(NPROC), *switch,
                    "--profile", "structure", "--output-dir", str(work / "runs"), *window,
                    *warm, "--", *self.script_args(mode, stamps, ckpt)], env
        tail_args = [str(self.train), *self.script_args("plain", stamps, ckpt)]
        if launcher == "torchrun-noshare":   # torchrun's restart with its rendezvous store not shared by the ranks
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        if launcher in ("torchrun", "torchrun-noshare"):
            return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC),
                    "--max-restarts", "1", "--standalone", *tail_args], env
        if launcher == "ft_launcher":
            return [str(self.ft_launcher), "--nproc-per-node", str(NPROC), "--max-restarts", "1", "--standalone",
                    "--ignore-missing-fault-tol-cfg", *tail_args], env
        raise ValueError(launcher)

    def ft_unavailable(self) -> str | None:
        if not self.ft_launcher.exists():
            return (f"{self.ft_launcher} not found: install it with `python3 -m venv {self.args.ft_venv} && "
                    f"{self.args.ft_venv}/bin/pip install torch==2.13.0 nvidia-resiliency-ext`")
        return None

    def leftovers(self) -> list[str]:
        """Rank (or launcher) processes of this benchmark still alive: killed, and described."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if proc.pid != os.getpid() and any(str(self.train) in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        described = describe_procs(found)
        kill_procs(found)
        return described

    def one(self, launcher: str, rep: int) -> Outcome:
        self._n += 1
        work = self.tmp / f"{launcher}-{self._n}"
        work.mkdir()
        argv, env = self.command(launcher, work)
        with open(work / "stdout.log", "wb") as out:
            run = run_launcher(launcher, argv, env, str(work), stdout=out, timeout=self.args.timeout)
        stdout = (work / "stdout.log").read_text("utf-8", "replace")
        (work / "stderr.log").write_text(run.stderr)
        outcome = Outcome(launcher, rep, False, wall=run.wall, leftovers=run.leftovers + self.leftovers())
        stamps = work / "stamps"
        failed, resumed = read_json(stamps / "failed.json"), read_json(stamps / "resumed-1.json")
        done = read_json(stamps / "done-1.json")
        problems = []
        if run.timed_out:
            problems.append(f"did not exit within {self.args.timeout:g} s (killed)")
        if run.exit_code != 0:
            problems.append(f"exited {run.exit_code}")
        if failed is None:
            problems.append(f"rank {FAIL_RANK} never wrote its failure stamp")
        if resumed is None:
            problems.append("rank 0 of attempt 1 never completed an all_reduce")
        elif done is None:
            problems.append(f"attempt 1 did not reach step {self.args.end_step}")
        if failed and resumed:
            outcome.seconds = resumed["time"] - failed["time"]
            outcome.to_respawn = resumed["started"] - failed["time"]
            outcome.respawned = resumed["time"] - resumed["started"]
            outcome.resumed_from = resumed["resumed_from"]
            outcome.lost = failed["step"] - resumed["resumed_from"]
        if problems:
            output = run.stderr + "\n" + stdout + "\n" + self.rank_logs(work)
            lines = output.splitlines()
            known = next(([line.strip() for line in lines if err in line] for err in KNOWN_ERRORS
                          if any(err in line for line in lines)), [])
            outcome.why = "; ".join(problems) + (f"; first error: {known[0][:400]}" if known else "") + \
                f"; last lines: {tail(run.stderr or stdout)}"
        else:
            outcome.ok = True
        if not self.args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return outcome

    @staticmethod
    def rank_logs(work: Path) -> str:
        """dlaunch's per-rank logs (torchrun's and ft_launcher's ranks write to the launcher's own output)."""
        texts = []
        for log in sorted((work / "runs").glob("*/rank_*/output*.log")):
            texts.append(log.read_text("utf-8", "replace"))
        return "\n".join(texts)


# --------------------------------------------------------------------------------------------- the table


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def num(value: float, digits: int = 3, unit: str = "") -> str:
    return "n/a" if value != value else f"{value:.{digits}f}{unit}"


def ratio(a: float, b: float) -> str:
    return "n/a" if a != a or b != b or not b else f"{a / b:.3f}"


def print_table(outcomes: list[Outcome], launchers: list[str], args, unavailable: dict[str, str],
                load_before: tuple) -> None:
    good = {name: [o for o in outcomes if o.launcher == name and o.ok] for name in launchers}
    med = {name: median([o.seconds for o in good[name]]) for name in launchers}
    torchrun = "torchrun" if good.get("torchrun") or not good.get("torchrun-noshare") else "torchrun-noshare"
    print()
    print(f"restart after a rank failure: {NPROC} gloo CPU ranks, rank {FAIL_RANK} exits {FAIL_CODE} after step "
          f"{args.fail_step}, a checkpoint every {args.save_every} steps, {args.step_time:g} s a step, "
          f"training to step {args.end_step}")
    print(f"median of {args.repeat} run(s) each, order reversed every repetition "
          f"({psutil.cpu_count()} CPUs, Python {sys.version.split()[0]}, load average before: "
          f"{' '.join(f'{x:.2f}' for x in load_before)})")
    header = (f"{'launcher':19} {'failure->training':>18} {'to respawn':>11} {'respawn->train':>15} "
              f"{'steps lost':>10} {'/ft_launcher':>12} {'/torchrun':>10} {'runs ok':>8}")
    print(header)
    print("-" * len(header))
    for name in launchers:
        runs = [o for o in outcomes if o.launcher == name]
        if name in unavailable:
            print(f"{name:19} {'not run: see below':>18}")
            continue
        g = good[name]
        print(f"{name:19} {num(med[name], unit=' s'):>18} {num(median([o.to_respawn for o in g]), unit=' s'):>11} "
              f"{num(median([o.respawned for o in g]), unit=' s'):>15} {num(median([o.lost for o in g]), 1):>10} "
              f"{ratio(med[name], med.get('ft_launcher', float('nan'))):>12} "
              f"{ratio(med[name], med.get(torchrun, float('nan'))):>10} {f'{len(g)}/{len(runs)}':>8}")
    if torchrun != "torchrun" and "torchrun" in launchers:
        print("/torchrun: against torchrun-noshare, since plain torchrun completed no restart")
    print()
    print("each run (repetition: failure->training s, steps lost (resumed from step), whole launcher run s):")
    for name in launchers:
        if name in unavailable:
            print(f"  {name}: not run: {unavailable[name]}")
            continue
        cells = []
        for o in (o for o in outcomes if o.launcher == name):
            if o.ok:
                cells.append(f"#{o.rep + 1}: {num(o.seconds)} s, {num(o.lost, 0)} ({o.resumed_from}), "
                             f"{num(o.wall, 1)} s")
            else:
                cells.append(f"#{o.rep + 1}: FAILED")
        print(f"  {name}: " + "; ".join(cells))
    failures = [o for o in outcomes if not o.ok]
    if failures:
        print()
        print("failed runs:")
        for o in failures:
            print(f"  {o.launcher} #{o.rep + 1}: {o.why}")
    left = [(o, d) for o in outcomes for d in o.leftovers]
    print()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"rank processes alive after their launcher exited: {len(left)}"
          + "".join(f"\n    {o.launcher} #{o.rep + 1}: {d}" for o, d in left))


def main() -> int:
    global NPROC, FAIL_RANK   # --ranks: the job's size, read by the commands and the table
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per launcher (default 3)")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS), help="comma list of: " + ", ".join(LAUNCHERS))
    parser.add_argument("--ft-venv", default="/tmp/ftvenv", help="virtual environment with nvidia-resiliency-ext")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT, help="seconds before a run is killed")
    parser.add_argument("--fail-step", type=int, default=FAIL_STEP)
    parser.add_argument("--fail-how", choices=("exit", "raise"), default="exit",
                        help="rank 2 fails by os._exit (default) or by raising (its teardown then follows)")
    parser.add_argument("--end-step", type=int, default=END_STEP)
    parser.add_argument("--save-every", type=int, default=SAVE_EVERY)
    parser.add_argument("--step-time", type=float, default=STEP_TIME)
    parser.add_argument("--keep", action="store_true", help="keep every run's directory (printed) for a look")
    parser.add_argument("--ranks", type=int, default=NPROC, help=f"ranks per run, at least 2 (default {NPROC}); "
                                                                 f"the failing one is rank min({FAIL_RANK}, N-1)")
    args = parser.parse_args()
    if args.ranks < 2:
        parser.error("--ranks: at least 2")
    NPROC, FAIL_RANK = args.ranks, min(FAIL_RANK, args.ranks - 1)
    launchers = [name.strip() for name in args.launchers.split(",") if name.strip()]
    unknown = [name for name in launchers if name not in LAUNCHERS]
    if unknown or args.repeat < 1 or not args.save_every <= args.fail_step < args.end_step:
        parser.error(f"unknown launcher(s) {unknown}" if unknown else
                     "need --repeat >= 1 and --save-every <= --fail-step < --end-step")

    started, load_before = time.perf_counter(), os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench_restart-"))
    outcomes: list[Outcome] = []
    unavailable: dict[str, str] = {}
    try:
        bench = Bench(tmp, args)
        if "ft_launcher" in launchers and (why := bench.ft_unavailable()):
            unavailable["ft_launcher"] = why
        runnable = [name for name in launchers if name not in unavailable]
        for rep in range(args.repeat):
            for name in (runnable if rep % 2 == 0 else runnable[::-1]):
                t0 = time.perf_counter()
                outcome = bench.one(name, rep)
                outcomes.append(outcome)
                state = (f"{num(outcome.seconds)} s to training, {num(outcome.lost, 0)} step(s) lost" if outcome.ok
                         else f"FAILED: {outcome.why[:300]}")
                print(f"  #{rep + 1} {name}: {state} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr,
                      flush=True)
        # a launcher every one of whose runs failed because it cannot run here is said so, not averaged
        for name in runnable:
            runs = [o for o in outcomes if o.launcher == name]
            if runs and not any(o.ok for o in runs) and name == "ft_launcher":
                print(f"ft_launcher could not complete a restart on this machine in {len(runs)} run(s); "
                      "see 'failed runs' below", file=sys.stderr)
        print_table(outcomes, launchers, args, unavailable, load_before)
    finally:
        if args.keep:
            print(f"run directories kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"total time {time.perf_counter() - started:.1f} s")
    return 0 if outcomes and all(o.ok for o in outcomes) and not unavailable else 1


if __name__ == "__main__":
    sys.exit(main())

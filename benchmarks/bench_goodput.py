"""Goodput under faults, on a real client: nanoGPT (tests/clients/nanogpt) trained by each launcher, without
faults and with a fault every T seconds, on this machine.

The job: karpathy/nanoGPT's own train.py with its own tiny-config mechanism (config/bench_cpu.py): a 2-layer
GPT on 2 CPU ranks (gloo, DDP), a random-token dataset written once the way its prepare.py writes one,
``--iters`` iterations (default 450), a checkpoint every ``--ckpt-every`` (its ``eval_interval``, with
``always_save_checkpoint``), resumed on a restart by its own ``init_from='resume'``.  The lines changed in
train.py are said in its header; NANOGPT_BENCH_DIR makes it write, per process, when it started running Python
(before ``import torch``), when torch was imported, when its set-up was done (process group, model, checkpoint
loaded, DDP), each iteration rank 0 logs (time and loss), and to raise once where this benchmark asks.

``--client hf_clm`` trains HF Trainer instead (tests/clients/hf_clm: run_clm.py's options and resume, a
2-layer GPT-2 from ``--config_overrides``, a local tokenizer and text; ``--hf-script`` runs another
run_clm.py-like script in its place), with the same stamps written by a Trainer callback; each client's set-up,
command and defaults are in goodput_clients.py.

The faults: the same seeded schedule for every launcher (``--seed``): ``--faults`` (default 2), each T seconds
(``--every``, default 12 s) after rank 0 logged its first iteration, at the start or since the previous fault
(so every fault hits a job that trained T seconds: on this loaded 2-core machine its start-up alone takes
~10-15 s), alternating a SIGKILL of a rank from outside and an exception raised by a rank in train.py
(``raise-rankN`` file: it raises at the top of its next iteration, once), the rank drawn by the seed.

The launchers (``--launchers``, default all nine), each with ``--max-restarts`` = the number of faults:
``dlaunch`` (``python -m launcher run train.py --ranks 2``), ``dlaunch-warm`` (the same, ``--warm-restarts
torch``), ``dlaunch-torchrun`` (the torchrun front, ``python -m launcher torchrun``), ``torchrun`` (torch 2.13's
own, ``--standalone``), ``torchrun-noshare`` (the same with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; see
bench_restart.py for why plain torchrun's restart fails) and ``ft_launcher`` (nvidia-resiliency-ext, from its own
venv ``--ft-venv``: ``python3 -m venv /tmp/ftvenv && /tmp/ftvenv/bin/pip install torch==2.13.0
nvidia-resiliency-ext numpy``: its ranks run in that venv's Python; with ``--ignore-missing-fault-tol-cfg``).
``dlaunch-memory`` (issue 48) is ``dlaunch`` with ``--memory-ckpt``: nanoGPT's own ``torch.save`` of ``ckpt.pt``
goes to the memory directory dlaunch keeps and mirrors to disk (a config file of nanoGPT's kind sets ``out_dir``
to rank 0's ``DLAUNCH_MEMORY_DIR``: nanoGPT saves on rank 0 only and every rank resumes from ``out_dir``) and
checkpoints every iteration (``--eval_interval=1``, which also evaluates every iteration: nanoGPT saves only
after an evaluation); the rest as for the others, resumed by ``init_from='resume'``. For HF Trainer the same
by its own options: ``--output_dir "$DLAUNCH_MEMORY_DIR" --save_steps 1`` (the rank's ``sh -c`` expands the
path, as docs/checkpoints.md shows), resumed from the last ``checkpoint-N`` there.
``dlaunch-window`` (issue 46) is ``dlaunch`` with ``--survivor-window 10``: neither client asks for dlaunch's
notice, so the window must cost them nothing (the restart waits only for ranks that asked).
``dlaunch-memory-warm`` (issues 46 and 48's goodput goals) is ``dlaunch-memory`` with ``--warm-restarts torch``:
the client's checkpoint in memory every iteration (no iteration redone) and the restarted ranks in interpreters
that imported what the first attempt's ranks imported (no ``import torch`` after a fault).
Every rank has OMP_NUM_THREADS=1.

Measured per launcher and repetition (the order of the launchers reversed every repetition):

- W0, the wall of a fault-free run, and W, the wall with the faults (launcher spawn to exit, the harness's
  run_launcher); goodput W0 / W;
- iterations trained twice: iterations rank 0 logged minus the distinct ones;
- per fault, from the fault (the kill, or the rank's raise): to noticed (the first line of the launcher itself
  saying a rank failed, timed as it arrived on its merged stdout/stderr), to new ranks started (the first new
  process running Python), to torch imported, to set-up done, to the first new iteration, and to caught up
  (the iteration reached at the fault logged again);
- final iteration and loss, checked against the launcher's fault-free run (and every fault-free run against
  the others: the batches are seeded by iteration, so they must be bit-identical).

A run counts only if the launcher exits 0, the final iteration is reached and every fault was injected.  A run
that fails or outlives its time (``--timeout`` for a fault-free run; with faults 2.5 x W0 + 30 s, at least
``--timeout`` + 60 s: the load of this machine changes the wall by 2x from one run to the next) is killed and
listed with its reason.  Rank processes left alive after their launcher exited are reported and killed.

Run:  .venv/bin/python benchmarks/bench_goodput.py --repeat 2 [--client nanogpt|hf_clm] [--hf-script PATH]
      [--launchers dlaunch,dlaunch-warm,dlaunch-torchrun,torchrun,torchrun-noshare,ft_launcher,dlaunch-memory,
      dlaunch-window,dlaunch-memory-warm]
      [--iters 450] [--ckpt-every 20] [--every 12] [--faults 2] [--seed 46] [--ft-venv DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from goodput_clients import CLIENT_TYPES  # noqa: E402  (the clients: nanoGPT, HF Trainer)
from harness import describe_procs, kill_procs, run_launcher  # noqa: E402  (the shared harness: one run measured)

REPO = Path(__file__).resolve().parent.parent
CLIENT = REPO / "tests" / "clients" / "nanogpt"
LAUNCHERS = ("dlaunch", "dlaunch-warm", "dlaunch-torchrun", "torchrun", "torchrun-noshare", "ft_launcher",
             "dlaunch-memory", "dlaunch-window", "dlaunch-memory-warm")
NPROC = 2
SURVIVOR_WINDOW = 10   # seconds, dlaunch-window's --survivor-window (the measure)
FAULT_FREE_TIMEOUT = 150.0

# The launcher's own line saying a rank failed (not a rank's output, which torchrun and ft_launcher also print).
NOTICED = {
    "dlaunch": re.compile(r"^dlaunch.*(fail|exit|died|signal|raised|killed)", re.I),
    "torchrun": re.compile(r"(failed \(exitcode|Worker group failed|WorkerGroupFailure|SignalException|"
                           r"ChildFailedError|Stopping worker group|Restarting worker group)"),
}
for _variant in ("dlaunch-warm", "dlaunch-torchrun", "dlaunch-memory", "dlaunch-window", "dlaunch-memory-warm"):
    NOTICED[_variant] = NOTICED["dlaunch"]
NOTICED["torchrun-noshare"] = NOTICED["ft_launcher"] = NOTICED["torchrun"]
KNOWN_ERRORS = ("ModuleNotFoundError", "connectFullMesh failed", "Connection refused", "DistNetworkError",
                "DistStoreError", "RendezvousTimeoutError", "RendezvousClosedError", "Traceback")


# --------------------------------------------------------------------------------------------- what a run wrote


@dataclass
class Proc:
    rank: int
    pid: int
    start: float
    imported: float = float("nan")
    ready: float = float("nan")
    iters: list = field(default_factory=list)    # (iteration, time, loss) rank 0 logged
    raised: tuple | None = None                   # (iteration, time)


def read_procs(stamps: Path) -> list[Proc]:
    procs = []
    for path in stamps.glob("rank*-*.log"):
        rank, pid = (int(x) for x in path.stem[4:].split("-"))
        proc = None
        for line in path.read_text().splitlines():
            parts = line.split()
            try:
                if parts[0] == "start":
                    proc = Proc(rank, pid, float(parts[1]))
                elif proc is None:
                    continue
                elif parts[0] == "imported":
                    proc.imported = float(parts[1])
                elif parts[0] == "ready":
                    proc.ready = float(parts[1])
                elif parts[0] == "iter" and len(parts) == 4:
                    proc.iters.append((int(parts[1]), float(parts[2]), float(parts[3])))
                elif parts[0] == "raise" and len(parts) == 3:
                    proc.raised = (int(parts[1]), float(parts[2]))
            except (IndexError, ValueError):   # a line cut by a SIGKILL
                continue
        if proc is not None:
            procs.append(proc)
    return sorted(procs, key=lambda p: p.start)


@dataclass
class Fault:
    kind: str              # "kill" or "raise"
    rank: int
    at: float = float("nan")           # time.time() of the kill, or of the rank's raise
    iteration: int | None = None       # the last iteration rank 0 logged before it
    noticed: float = float("nan")      # seconds from the fault: the launcher's line
    respawned: float = float("nan")    # the first new rank process running Python
    imported: float = float("nan")     # its torch imported
    ready: float = float("nan")        # its set-up done (every new rank's: the slowest)
    first_iter: float = float("nan")   # rank 0's first new iteration logged
    caught_up: float = float("nan")    # rank 0 logging the iteration reached at the fault again
    resumed_from: int | None = None
    line: str = ""                     # the launcher's line counted as noticed


@dataclass
class Outcome:
    launcher: str
    rep: int
    faults_on: bool
    ok: bool = False
    wall: float = float("nan")
    final_iter: int | None = None
    final_loss: float | None = None
    logged: int = 0                    # iterations rank 0 logged, repeats included
    faults: list = field(default_factory=list)
    why: str = ""
    leftovers: list = field(default_factory=list)

    first_iter: int = 0                # the client's first iteration number (nanoGPT 0, HF Trainer 1)

    @property
    def twice(self) -> int:
        return self.logged - (self.final_iter + 1 - self.first_iter if self.final_iter is not None else 0)


# --------------------------------------------------------------------------------------------- the runs


class Lines(threading.Thread):
    """The launcher's merged stdout/stderr, each line stamped with time.time() as it arrived."""

    def __init__(self, fd: int, path: Path):
        super().__init__(daemon=True)
        self.fd, self.path, self.lines = fd, path, []

    def run(self) -> None:
        with os.fdopen(self.fd, "rb") as pipe, open(self.path, "w") as log:
            for raw in pipe:
                now = time.time()
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.lines.append((now, line))
                log.write(f"{now:.3f} {line}\n")


class Injector(threading.Thread):
    """Injects the schedule's faults into one run: each ``every`` seconds after the job's first iteration (at the
    start, or since the previous fault)."""

    def __init__(self, stamps: Path, schedule: list[tuple[str, int]], every: float):
        super().__init__(daemon=True)
        self.stamps, self.every = stamps, every
        self.faults = [Fault(kind, rank) for kind, rank in schedule]
        self.done = threading.Event()
        self.errors: list[str] = []

    def trained_since(self, since: float) -> float | None:
        """When rank 0 of a process started after ``since`` logged its first iteration; None: not yet."""
        return min((t for p in read_procs(self.stamps) if p.rank == 0 and p.start > since for _, t, _ in p.iters),
                   default=None)

    def live_rank(self, rank: int) -> Proc | None:
        for proc in reversed(read_procs(self.stamps)):
            if proc.rank == rank and psutil.pid_exists(proc.pid):
                try:
                    if psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
                        return proc
                except psutil.Error:
                    pass
        return None

    def run(self) -> None:
        last = 0.0
        for i, fault in enumerate(self.faults):
            while not self.done.is_set():
                trained = self.trained_since(last)
                if trained is not None and time.time() >= trained + self.every:
                    break
                self.done.wait(0.05)
            if self.done.is_set():
                return
            if fault.kind == "kill":
                proc = self.live_rank(fault.rank)
                if proc is None:
                    self.errors.append(f"fault {i + 1}: no live process of rank {fault.rank}")
                    return
                fault.at = time.time()
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    self.errors.append(f"fault {i + 1}: rank {fault.rank} (pid {proc.pid}) gone before the kill")
                    return
            else:
                path = self.stamps / f"raise-rank{fault.rank}"
                (self.stamps / "raise.tmp").write_text("")
                os.replace(self.stamps / "raise.tmp", path)
                asked = time.time()
                while not self.done.is_set():
                    raised = [p.raised for p in read_procs(self.stamps) if p.rank == fault.rank and p.raised
                              and p.raised[1] >= asked - 1]
                    if raised:
                        fault.at = raised[0][1]
                        break
                    self.done.wait(0.02)
                else:
                    return
            last = fault.at


def alive_ranks(marker: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid != os.getpid() and any(marker in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    described = describe_procs(found)
    kill_procs(found)
    return described


class Bench:
    def __init__(self, tmp: Path, args):
        self.tmp, self.args = tmp, args
        self.kind = CLIENT_TYPES[args.client](tmp, args)
        self.client = self.kind.dir     # its path marks this benchmark's rank processes
        (tmp / "tmpdir").mkdir()
        self.base_env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp / "tmpdir"),
                         "OMP_NUM_THREADS": "1", **self.kind.env}
        for kind in CLIENT_TYPES.values():
            self.base_env.pop(kind.stamps_env, None)
        self.ft_launcher = Path(args.ft_venv) / "bin" / "ft_launcher"
        rng = random.Random(args.seed)
        kinds = ["kill", "raise"] if rng.random() < 0.5 else ["raise", "kill"]
        self.schedule = [(kinds[i % 2], rng.randrange(NPROC)) for i in range(args.faults)]
        self._n = 0

    def command(self, launcher: str, work: Path, restarts: int) -> tuple[list[str], dict]:
        env = dict(self.base_env, **{self.kind.stamps_env: str(work / "stamps")})
        train, config = self.kind.script(work)
        if launcher.startswith("dlaunch"):
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
            if launcher == "dlaunch-torchrun":
                return [sys.executable, "-m", "launcher", "torchrun", "--nproc-per-node", str(NPROC),
                        "--max-restarts", str(restarts), "--standalone", train, *config], env
            warm = ["--warm-restarts", "torch"] if launcher == "dlaunch-warm" else []
            if launcher == "dlaunch-window":   # issue 46 item 3: a window the client never uses must cost nothing
                warm = ["--survivor-window", str(SURVIVOR_WINDOW)]
            if launcher.startswith("dlaunch-memory"):   # the client's own checkpoint into memory, every iteration
                warm = ["--memory-ckpt"] + (["--warm-restarts", "torch"] if launcher.endswith("-warm") else [])
                if self.kind.name == "nanogpt":
                    config = [*config[:-1], str(self.memory_config()), "--eval_interval=1"]
                else:   # HF: the memory directory is a path the rank's shell expands (dlaunch rewrites no argument)
                    warm += ["--no-python"]
                    config = ["-c", 'exec "$0" "$@" --output_dir "$DLAUNCH_MEMORY_DIR" --save_steps 1',
                              sys.executable, train, *config]
                    train = "sh"
            return [sys.executable, "-m", "launcher", "run", train, "--ranks", str(NPROC), "--max-restarts",
                    str(restarts), "--profile", "structure", "--output-dir", str(work / "runs"), *warm, "--",
                    *config], env
        if launcher == "torchrun-noshare":
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        if launcher in ("torchrun", "torchrun-noshare"):
            return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC),
                    "--max-restarts", str(restarts), "--standalone", train, *config], env
        if launcher == "ft_launcher":
            return [str(self.ft_launcher), "--nproc-per-node", str(NPROC), "--max-restarts", str(restarts),
                    "--standalone", "--ignore-missing-fault-tol-cfg", train, *config], env
        raise ValueError(launcher)

    def memory_config(self) -> Path:
        """dlaunch-memory: a nanoGPT config file (its own mechanism) setting out_dir to the host's memory directory
        (one per host, shared by its ranks: nanoGPT saves ckpt.pt on rank 0 and every rank resumes from it)."""
        path = self.tmp / "memory_out.py"
        path.write_text("import os\nout_dir = os.environ['DLAUNCH_MEMORY_DIR']\n")
        return path

    def memory_unavailable(self) -> str | None:
        usage = subprocess.run([sys.executable, "-m", "launcher", "run", "--help"], capture_output=True, text=True,
                               cwd=REPO, env=dict(self.base_env, PYTHONPATH=str(REPO))).stdout
        return None if "--memory-ckpt" in usage else "this dlaunch has no --memory-ckpt (issue 48's keeper)"

    def ft_unavailable(self) -> str | None:
        install = (f"`python3 -m venv {self.args.ft_venv} && {self.args.ft_venv}/bin/pip install torch==2.13.0 "
                   f"nvidia-resiliency-ext {self.kind.ft_packages}`")
        if not self.ft_launcher.exists():
            return f"{self.ft_launcher} not found: install it with {install}"
        missing = [m for m in self.kind.ft_modules
                   if not list(Path(self.args.ft_venv).glob(f"lib/python*/site-packages/{m}"))]
        if missing:
            return f"{', '.join(missing)} not in {self.args.ft_venv} (its ranks run there): install with {install}"
        return None

    def one(self, launcher: str, rep: int, faults_on: bool, timeout: float) -> Outcome:
        self._n += 1
        work = self.tmp / f"{self._n:02d}-{launcher}-{'faults' if faults_on else 'free'}"
        (work / "stamps").mkdir(parents=True)
        self.kind.prepare_work(work)
        argv, env = self.command(launcher, work, len(self.schedule) if faults_on else 0)
        # stdout and stderr merged into one pipe (sh execs the launcher: the same process), each line timed
        argv = ["sh", "-c", 'exec "$@" 2>&1', "sh", *argv]
        read_end, write_end = os.pipe()
        lines = Lines(read_end, work / "console.log")
        lines.start()
        injector = Injector(work / "stamps", self.schedule, self.args.every) if faults_on else None
        if injector:
            injector.start()
        try:
            run = run_launcher(launcher, argv, env, str(work), stdout=write_end, timeout=timeout)
        finally:
            os.close(write_end)
            if injector:
                injector.done.set()
                injector.join()
        leftovers = run.leftovers + alive_ranks(str(self.client))
        lines.join(10)
        outcome = Outcome(launcher, rep, faults_on, wall=run.wall, leftovers=leftovers,
                          first_iter=self.kind.first_iter)
        procs = read_procs(work / "stamps")
        rank0 = [it for p in procs if p.rank == 0 for it in p.iters]
        outcome.logged = len(rank0)
        if rank0:
            last = max(rank0, key=lambda it: (it[0], it[1]))
            outcome.final_iter, outcome.final_loss = last[0], last[2]
        problems = []
        if run.timed_out:
            problems.append(f"did not exit within {timeout:.0f} s (killed)")
        if run.exit_code != 0:
            problems.append(f"exited {run.exit_code}")
        if outcome.final_iter != self.args.iters:
            problems.append(f"rank 0 reached iteration {outcome.final_iter}, not {self.args.iters}")
        if injector:
            outcome.faults = injector.faults
            problems += injector.errors
            missing = [i + 1 for i, f in enumerate(injector.faults) if f.at != f.at]
            if missing and not injector.errors:
                problems.append(f"fault(s) {missing} never happened")
            for fault in injector.faults:
                self.measure(fault, launcher, procs, lines.lines)
        if problems:
            text = "\n".join(line for _, line in lines.lines)
            known = next(([ln.strip() for ln in text.splitlines() if err in ln] for err in KNOWN_ERRORS
                          if err in text), [])
            outcome.why = "; ".join(problems) + (f"; first error: {known[0][:300]}" if known else "")
        else:
            outcome.ok = True
        if not self.args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return outcome

    @staticmethod
    def measure(fault: Fault, launcher: str, procs: list[Proc], lines: list) -> None:
        if fault.at != fault.at:
            return
        before = [it for p in procs if p.rank == 0 and p.start < fault.at for it in p.iters if it[1] <= fault.at]
        fault.iteration = max((it[0] for it in before), default=None)
        pattern = NOTICED[launcher]
        for t, line in lines:
            if t >= fault.at - 0.01 and pattern.search(line):
                fault.noticed, fault.line = t - fault.at, line.strip()[:160]
                break
        new = [p for p in procs if p.start > fault.at]
        if not new:
            return
        fault.respawned = min(p.start for p in new) - fault.at
        fault.imported = min(p.imported for p in new) - fault.at
        # the first new attempt: the new processes started before the first of them was ready
        first_ready = min((p.ready for p in new if p.ready == p.ready), default=float("nan"))
        attempt = [p for p in new if p.start <= first_ready] if first_ready == first_ready else new
        fault.ready = max(p.ready for p in attempt) - fault.at
        new_iters = sorted((it for p in new if p.rank == 0 for it in p.iters), key=lambda it: it[1])
        if new_iters:
            fault.first_iter = new_iters[0][1] - fault.at
            fault.resumed_from = new_iters[0][0]
            again = [it for it in new_iters if fault.iteration is not None and it[0] >= fault.iteration]
            if again:
                fault.caught_up = again[0][1] - fault.at


# --------------------------------------------------------------------------------------------- the table


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def num(value: float, digits: int = 2) -> str:
    return "n/a" if value != value else f"{value:.{digits}f}"


def print_table(outcomes: list[Outcome], launchers: list[str], args, schedule, unavailable: dict[str, str],
                load_before: tuple, client: str) -> None:
    print()
    print(f"goodput on {client}, {NPROC} gloo CPU ranks; faults, each {args.every:g} s after the job trained (again): "
          + ", ".join(f"{k} rank {r}" for k, r in schedule))
    print(f"median of {args.repeat} repetition(s), order reversed every repetition ({psutil.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}, load average before: {' '.join(f'{x:.2f}' for x in load_before)})")
    kinds = sorted({k for k, _ in schedule})
    cols = ["noticed", "respawned", "imported", "ready", "first_iter", "caught_up"]
    header = (f"{'launcher':17} {'W0 s':>6} {'W s':>6} {'goodput':>7} {'twice':>5} {'ok':>5}  "
              + " ".join(f"{kind + ' ' + c:>16}" for kind in kinds for c in ("noticed", "first_iter")))
    print(header)
    print("-" * len(header))
    for name in launchers:
        if name in unavailable:
            print(f"{name:17} not run: see below")
            continue
        free = [o for o in outcomes if o.launcher == name and not o.faults_on]
        hit = [o for o in outcomes if o.launcher == name and o.faults_on]
        w0, w = median([o.wall for o in free if o.ok]), median([o.wall for o in hit if o.ok])
        good = [o for o in hit if o.ok]
        cells = []
        for kind in kinds:
            fs = [f for o in good for f in o.faults if f.kind == kind]
            cells += [num(median([f.noticed for f in fs])), num(median([f.first_iter for f in fs]))]
        print(f"{name:17} {num(w0, 1):>6} {num(w, 1):>6} {num(w0 / w if w == w else w, 3):>7} "
              f"{num(median([o.twice for o in good]), 0):>5} {f'{len(good)}/{len(hit)}':>5}  "
              + " ".join(f"{c:>16}" for c in cells))
    print()
    print("per fault, seconds from the fault (median over repetitions) to: noticed (the launcher's line), new ranks "
          "started, torch imported, set-up done, first new iteration, caught up")
    for name in launchers:
        if name in unavailable:
            continue
        good = [o for o in outcomes if o.launcher == name and o.faults_on and o.ok]
        for kind in kinds:
            fs = [f for o in good for f in o.faults if f.kind == kind]
            print(f"  {name:17} {kind:5} " + "  ".join(f"{c} {num(median([getattr(f, c) for f in fs]))}"
                                                      for c in cols))
    print()
    print("every run (W0 s / W s, iterations twice, final iteration and loss; per fault: kind rank @iteration, "
          "noticed / respawned / imported / ready / first iteration / caught up s, resumed from):")
    free_losses = {}
    for name in launchers:
        if name in unavailable:
            print(f"  {name}: not run: {unavailable[name]}")
            continue
        for o in (o for o in outcomes if o.launcher == name):
            tag = "faults" if o.faults_on else "free"
            state = "ok" if o.ok else f"FAILED ({o.why[:400]})"
            loss = f"{o.final_loss!r}" if o.final_loss is not None else "n/a"
            print(f"  {name} #{o.rep + 1} {tag}: {num(o.wall, 1)} s, twice {o.twice}, iteration {o.final_iter} "
                  f"loss {loss}, {state}")
            if not o.faults_on and o.ok:
                free_losses.setdefault(o.final_loss, []).append(f"{name}#{o.rep + 1}")
            for f in o.faults:
                print(f"      {f.kind} rank {f.rank} @{f.iteration}: " + " / ".join(
                    num(getattr(f, c)) for c in cols) + f", resumed from {f.resumed_from}; noticed: {f.line!r}")
    print()
    hit_losses = {o.final_loss for o in outcomes if o.faults_on and o.ok}
    print(f"final losses of the fault-free runs: {len(free_losses)} distinct value(s) "
          + "; ".join(f"{k!r}: {', '.join(v)}" for k, v in free_losses.items()))
    print(f"final losses of the runs with faults equal to the fault-free one: "
          f"{'yes' if hit_losses <= set(free_losses) and len(free_losses) == 1 else 'NO: ' + repr(hit_losses)}")
    left = [(o, d) for o in outcomes for d in o.leftovers]
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"rank processes alive after their launcher exited: {len(left)}"
          + "".join(f"\n    {o.launcher} #{o.rep + 1}: {d}" for o, d in left))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2, help="repetitions per launcher (default 2)")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS), help="comma list of: " + ", ".join(LAUNCHERS))
    parser.add_argument("--client", default="nanogpt", choices=sorted(CLIENT_TYPES),
                        help="the client trained (default nanogpt; see goodput_clients.py)")
    parser.add_argument("--hf-script", default=None, help="with --client hf_clm: a run_clm.py-like script to run "
                        "instead of tests/clients/hf_clm/train_clm.py")
    parser.add_argument("--iters", type=int, default=None,
                        help="iterations (HF: steps) to train (default: nanogpt 450, hf_clm 700)")
    parser.add_argument("--ckpt-every", type=int, default=None, help="iterations between checkpoints: nanoGPT's "
                        "eval_interval, HF's --save_steps (default: nanogpt 20, hf_clm 50)")
    parser.add_argument("--every", type=float, default=None,
                        help="seconds of training before each fault (default: nanogpt 12, hf_clm 20)")
    parser.add_argument("--faults", type=int, default=2, help="faults per run (default 2)")
    parser.add_argument("--seed", type=int, default=46, help="seed of the fault schedule")
    parser.add_argument("--ft-venv", default="/tmp/ftvenv", help="virtual environment with nvidia-resiliency-ext")
    parser.add_argument("--timeout", type=float, default=FAULT_FREE_TIMEOUT, help="seconds before a fault-free "
                        "run is killed (with faults: 2.5 x its W0 + 30 s, at least this + 60 s)")
    parser.add_argument("--keep", action="store_true", help="keep every run's directory (printed) for a look")
    args = parser.parse_args()
    for key, value in CLIENT_TYPES[args.client].defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    launchers = [name.strip() for name in args.launchers.split(",") if name.strip()]
    unknown = [name for name in launchers if name not in LAUNCHERS]
    if unknown or args.repeat < 1 or args.faults < 0:
        parser.error(f"unknown launcher(s) {unknown}" if unknown else "need --repeat >= 1 and --faults >= 0")

    started, load_before = time.perf_counter(), os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench_goodput-"))
    outcomes: list[Outcome] = []
    unavailable: dict[str, str] = {}
    bench = None
    try:
        bench = Bench(tmp, args)
        if "ft_launcher" in launchers and (why := bench.ft_unavailable()):
            unavailable["ft_launcher"] = why
        for variant in ("dlaunch-memory", "dlaunch-memory-warm"):
            if variant in launchers and (why := bench.memory_unavailable()):
                unavailable[variant] = why
        runnable = [name for name in launchers if name not in unavailable]
        for rep in range(args.repeat):
            for name in (runnable if rep % 2 == 0 else runnable[::-1]):
                for faults_on in (False, True):
                    w0 = outcomes[-1].wall if faults_on and outcomes[-1].ok else args.timeout
                    timeout = max(2.5 * w0 + 30, args.timeout + 60) if faults_on else args.timeout
                    t = time.perf_counter()
                    o = bench.one(name, rep, faults_on, timeout)
                    outcomes.append(o)
                    state = (f"wall {o.wall:.1f} s, twice {o.twice}, loss {o.final_loss!r}" if o.ok
                             else f"FAILED: {o.why[:300]}")
                    faults = "; ".join(f"{f.kind} r{f.rank}: noticed {num(f.noticed)} first iter "
                                       f"{num(f.first_iter)}" for f in o.faults)
                    print(f"  #{rep + 1} {name} {'faults' if faults_on else 'free'}: {state} {faults} "
                          f"({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
        print_table(outcomes, launchers, args, bench.schedule, unavailable, load_before, bench.kind.describe())
    finally:
        if bench is not None:
            alive_ranks(str(bench.client))
        if args.keep:
            print(f"run directories kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"total time {time.perf_counter() - started:.1f} s")
    return 0 if outcomes and all(o.ok for o in outcomes) and not unavailable else 1


if __name__ == "__main__":
    sys.exit(main())

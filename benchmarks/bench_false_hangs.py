"""False hangs under ``--hang-learn`` on real clients, and a real hang's verdict (issue 47, item 2).

Clients (``--client``), each on 2 CPU ranks (gloo) under ``dlaunch run ... --hang-learn --hang-timeout 60``:

- ``megatron``: tests/programs/megatron_shaped.py, Megatron's loop shape: the iteration line on the last rank only
  (``print_rank_last``, ``training_log``'s format), saves by every rank with a barrier, rank 0 saying them;
- ``nanogpt``: tests/clients/nanogpt (karpathy/nanoGPT, MIT): ``iter N: loss X, time Y ms`` on rank 0, an eval and
  a save on rank 0 every ``eval_interval`` while rank 1 waits in DDP's all-reduce;
- ``fabric``: tests/clients/fabric/train.py, Lightning Fabric with DDP, rank 0's ``fabric.print`` read with
  ``--step-pattern``, ``fabric.save`` (rank 0 writes, every rank waits in its barrier);
- ``hf``: HF Trainer, tests/clients/hf_clm/train_clm.py (run_clm.py's options and data path, transformers 5.x),
  run unchanged by tests/programs/hf_faults.py (a Trainer callback adds the slow spots and the stop); its tqdm
  bar on rank 0 is the step line, ``save_steps`` saves (rank 0 writes, the others wait in the next all-reduce).

Per client: one **learning run** (nothing slow), whose learned clock (``hang_timeouts.json``) and longest step
(from the step lines) set the rest; then ``--repeat`` (10) **runs that must not hang**, each in a run directory
holding the learned clock already (as a requeued job resuming in its run directory has: the budget learned applies
from the first step on), each with every rank's first batch loading for 2 x the learned budget (at least 3 s) and
every save taking 3 x the longest step of the learning run after its warm-up (the 5 steps the clock does not count;
the save's own time added on the saving rank); a
false hang is exit 124 or a `` hung`` line. Then ``--hangs`` (3) **real hangs** in the same setting: one rank
(rank 0, then the last rank, alternately: the one that prints nothing, then the one that prints) stops outside any
collective (sleeps, after writing the time) while the other waits in its next all-reduce; measured: the time from
the stop to dlaunch's `` hung`` line beside the budget the verdict names, and which rank it says stopped first.

Nothing is asserted (tests/e2e/test_hang_silent_ranks.py asserts the outcomes); every value is printed, then a
summary line per client.  Run one client at a time on a shared machine:

  .venv/bin/python benchmarks/bench_false_hangs.py --client nanogpt [--repeat 10] [--hangs 3] [--launcher-root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from launcher.execute.local.hangclock import WARMUP_STEPS  # noqa: E402
from tests.launching import kill_run  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from harness import timed_lines  # noqa: E402  (a launcher's stderr, timed line by line)

TIMEOUT = 240.0
BOUND = 60   # --hang-timeout: the bound every learned budget stays under
FABRIC_PATTERN = r"iteration: (?P<step>[0-9]+) - loss [-0-9.naif]+ - (?P<ms>[0-9.]+) ms"
HUNG = re.compile(r"rank (\d+) hung: .*?\((?:learned (?:\w+ )?(?:hang timeout|budget) ([0-9.]+) s|([^)]*))\)")


class Client:
    """How to start one client: its program, arguments and working directory; how to read its step times."""

    name = ""
    iters = 30
    save_every = 20
    stop_at = 25
    flags: list[str] = []

    def __init__(self, tmp: Path):
        self.tmp = tmp

    def argv(self, work: Path, load: float, save: float, stop: tuple[int, Path] | None) -> list[str]:
        raise NotImplementedError

    def step_seconds(self, log: str, work: Path) -> list[float]:
        """The step times the printing rank's log says (a step that held a save or eval left out)."""
        raise NotImplementedError

    def printing_rank(self) -> int:
        return 0


class Megatron(Client):
    name = "megatron"

    def argv(self, work, load, save, stop):
        stops = ["--stop-rank", stop[0], "--stop-at", self.stop_at, "--stopped-file", stop[1]] if stop else []
        return [ROOT / "tests" / "programs" / "megatron_shaped.py", "--", "--train-iters", self.iters, "--hidden",
                768, "--micro-batch", 128, "--save", work / "save", "--save-interval", self.save_every,
                "--save-seconds", save, "--load-seconds", load, *stops]

    def printing_rank(self):
        return 1

    def step_seconds(self, log, work):
        return [float(ms) / 1000 for ms in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", log)]


class NanoGPT(Client):
    name = "nanogpt"

    def __init__(self, tmp):
        super().__init__(tmp)
        self.client = ROOT / "tests" / "clients" / "nanogpt"
        data = tmp / "nanogpt_data" / "synthetic"
        data.mkdir(parents=True)
        subprocess.run([sys.executable, str(self.client / "data" / "synthetic" / "prepare.py"), str(data)],
                       check=True, stdout=subprocess.DEVNULL, timeout=60)

    def argv(self, work, load, save, stop):
        os.symlink(self.tmp / "nanogpt_data", work / "data")
        os.symlink(self.client / "configurator.py", work / "configurator.py")   # train.py reads both from its cwd
        stops = [f"--stop_rank={stop[0]}", f"--stop_at={self.stop_at}", f"--stopped_file={stop[1]}"] if stop else []
        return [self.client / "train.py", "--", self.client / "config" / "bench_cpu.py", f"--max_iters={self.iters}",
                f"--lr_decay_iters={self.iters}", f"--eval_interval={self.save_every}", "--batch_size=16",
                f"--load_seconds={float(load)}", f"--save_seconds={float(save)}", *stops]

    def step_seconds(self, log, work):
        return [float(ms) / 1000 for it, ms in re.findall(r"iter ([0-9]+): loss \S+, time ([0-9.]+)ms", log)
                if int(it) % self.save_every and int(it) > 1]   # iteration 0 and one after an eval hold it


class Fabric(Client):
    name = "fabric"
    flags = ["--step-pattern", FABRIC_PATTERN]

    def argv(self, work, load, save, stop):
        stops = ["--stop-rank", stop[0], "--stop-at", self.stop_at, "--stopped-file", stop[1]] if stop else []
        return [ROOT / "tests" / "clients" / "fabric" / "train.py", "--", "--iters", self.iters, "--batch-size", 32,
                "--save-every", self.save_every, "--save-seconds", save, "--load-seconds", load, "--out",
                work / "out", *stops]

    def step_seconds(self, log, work):
        return [float(ms) / 1000 for ms in re.findall(r"iteration: [0-9]+ - loss \S+ - ([0-9.]+) ms", log)]


class Hf(Client):
    name = "hf"
    overrides = "n_layer=2,n_head=2,n_embd=64,n_positions=64,vocab_size=512,resid_pdrop=0,embd_pdrop=0,attn_pdrop=0"

    def __init__(self, tmp):
        super().__init__(tmp)
        self.data = tmp / "hf_data"
        subprocess.run([sys.executable, str(ROOT / "tests" / "clients" / "hf_clm" / "prepare.py"), str(self.data)],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        os.environ.update({"HF_HOME": str(tmp / "hf_home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                           "TOKENIZERS_PARALLELISM": "false"})

    def argv(self, work, load, save, stop):
        stops = ["--stop-rank", stop[0], "--stop-at", self.stop_at, "--stopped-file", stop[1]] if stop else []
        return [ROOT / "tests" / "programs" / "hf_faults.py", "--", "--load-seconds", load, "--save-seconds", save,
                "--step-times", work / "step_times", *stops, ROOT / "tests" / "clients" / "hf_clm" / "train_clm.py",
                "--model_type", "gpt2",
                "--config_overrides", self.overrides, "--tokenizer_name", self.data / "tokenizer", "--train_file",
                self.data / "train.txt", "--block_size", 64, "--output_dir", work / "out", "--do_train",
                "--max_steps", self.iters, "--save_steps", self.save_every, "--use_cpu", "--ddp_backend", "gloo",
                "--report_to", "none", "--per_device_train_batch_size", 16, "--learning_rate", "1e-3", "--seed", 46]

    def step_seconds(self, log, work):
        """The steps' times rank 0's callback wrote (tqdm's bar says its elapsed time to the second)."""
        ends = [float(line) for line in (work / "step_times").read_text().split()]
        return [b - a for index, (a, b) in enumerate(zip(ends, ends[1:]), 2) if (index - 1) % self.save_every]


CLIENTS = {client.name: client for client in (Megatron, NanoGPT, Fabric, Hf)}


LAUNCHER_ROOT = ROOT   # --launcher-root: the checkout whose dlaunch runs (another branch's, beside this one)


def launch(client: Client, work: Path, run_id: str, load: float, save: float, stop=None) -> dict:
    """One dlaunch run in ``work``; its exit code, stderr lines with arrival times, and run directory."""
    work.mkdir(parents=True, exist_ok=True)
    argv = client.argv(work, load, save, stop)
    cut = argv.index("--")
    command = [sys.executable, "-m", "launcher", "run", argv[0], "--ranks", "2", "--output-dir", work / "runs",
               "--run-id", run_id, "--hang-learn", "--hang-timeout", BOUND, *client.flags, *argv[cut:]]
    env = {**os.environ, "PYTHONPATH": str(LAUNCHER_ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen([str(part) for part in command], cwd=work, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    reader = timed_lines(proc.stderr, lines)
    try:
        code = proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    finally:
        kill_run(run_id)
    reader.join(timeout=10)
    return {"code": code, "lines": lines, "run": work / "runs" / run_id}


def step_times(client: Client, run: Path) -> list[float]:
    """The printing rank's step times after the warm-up."""
    log = (run / f"rank_{client.printing_rank():03d}" / "output.log").read_text(errors="replace")
    return client.step_seconds(log, run.parent.parent)[WARMUP_STEPS:]


def seeded(work: Path, run_id: str, clock: dict) -> None:
    """The run directory a requeued job resumes in: the learned clock there before the first step."""
    run = work / "runs" / run_id
    run.mkdir(parents=True)
    (run / "hang_timeouts.json").write_text(json.dumps(clock))


def bench(name: str, repeat: int, hangs: int) -> int:
    with tempfile.TemporaryDirectory(prefix="falsehangs-") as tmp_text:
        tmp = Path(tmp_text)
        client = CLIENTS[name](tmp)
        learn = launch(client, tmp / "learn", "learn", 0.0, 0.0)
        if learn["code"] != 0:
            print(f"{name}: the learning run ended {learn['code']}:\n" + "\n".join(text for _, text in learn["lines"]))
            return 1
        clock = json.loads((learn["run"] / "hang_timeouts.json").read_text())
        steps = step_times(client, learn["run"])
        longest = max(steps)   # of the steps after the warm-up (the first holds DDP's set-up: 1.5 s where others 0.4)
        budget = clock["step_budget_s"]
        load, save = round(max(3.0, 2 * budget), 2), round(3 * longest, 2)
        print(f"{name}: learning run: {len(steps)} steps, median {statistics.median(steps) * 1000:.0f} ms, longest "
              f"{longest * 1000:.0f} ms; learned silence {clock['silence_s']:.3f} s, budget {budget:.2f} s; "
              f"then first batch +{load} s, each save +{save} s", flush=True)
        false_hangs, failed = 0, 0
        for index in range(repeat):
            work = tmp / f"run{index}"
            seeded(work, "run", clock)
            run = launch(client, work, "run", load, save)
            hung = [line for _, line in run["lines"] if " hung" in line]
            if run["code"] == 124 or hung:
                false_hangs += 1
                verdict = "FALSE HANG: " + (hung[0] if hung else f"exit {run['code']}")
            elif run["code"] != 0:
                failed += 1
                verdict = f"failed, exit {run['code']}: " + " | ".join(text for _, text in run["lines"][-4:])
            else:
                verdict = "no hang"
            after = json.loads((run["run"] / "hang_timeouts.json").read_text())
            run_steps = step_times(client, run["run"])
            print(f"  run {index + 1}: exit {run['code']}, {verdict}; longest step {max(run_steps, default=0):.2f} s, "
                  f"budget at the end {after['step_budget_s']:.2f} s", flush=True)
        delays, ratios, named = [], [], 0
        for index in range(hangs):
            work = tmp / f"hang{index}"
            seeded(work, "hang", clock)
            rank = 0 if index % 2 == 0 else 1
            stopped = work / "stopped"
            run = launch(client, work, "hang", load, save, (rank, stopped))
            found = [(at, HUNG.search(line)) for at, line in run["lines"] if " hung: " in line]
            first = next(((at, match) for at, match in found if match), None)
            if run["code"] != 124 or first is None or not stopped.exists():
                print(f"  hang {index + 1} (rank {rank} stops): not called: exit {run['code']}: "
                      + " | ".join(text for _, text in run["lines"][-4:]), flush=True)
                continue
            at, match = first
            delay = at - float(stopped.read_text())
            said = next(line for _, line in run["lines"] if " hung: " in line)
            budget_named = float(match.group(2)) if match.group(2) else None
            right = int(match.group(1)) == rank and "stopped first" in said
            named += right
            delays.append(delay)
            if budget_named:
                ratios.append(delay / budget_named)
            print(f"  hang {index + 1} (rank {rank} stops at step {client.stop_at}): called {delay:.2f} s after the "
                  f"stop, budget named {budget_named if budget_named else match.group(3)} s"
                  f"{f' ({delay / budget_named:.2f}x)' if budget_named else ''}; rank named {match.group(1)} "
                  f"({'right' if right else 'WRONG'}): {said[:300]}", flush=True)
        load_avg = os.getloadavg()[0]
        summary = (f"{name}: {false_hangs} false hangs in {repeat} runs ({failed} failed otherwise); learned budget "
                   f"{budget:.2f} s (silence {clock['silence_s']:.3f} s), first batch +{load} s, saves +{save} s "
                   f"(3 x longest step {longest:.2f} s); real hangs called {len(delays)}/{hangs}, right rank {named}")
        if delays:
            summary += (f", {min(delays):.2f}-{max(delays):.2f} s after the stop"
                        + (f" ({min(ratios):.2f}-{max(ratios):.2f}x the budget named)" if ratios else ""))
        print(summary + f"; load average {load_avg:.1f}", flush=True)
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--client", choices=sorted(CLIENTS), required=True)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--hangs", type=int, default=3)
    parser.add_argument("--launcher-root", type=Path, default=ROOT,
                        help="a checkout whose dlaunch to run (e.g. main's, to compare); the clients are this one's")
    args = parser.parse_args()
    global LAUNCHER_ROOT
    LAUNCHER_ROOT = args.launcher_root.resolve()
    return bench(args.client, args.repeat, args.hangs)


if __name__ == "__main__":
    sys.exit(main())

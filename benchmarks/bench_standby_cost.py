"""What a warm-restart standby costs the attempt it waits beside: nanoGPT (bench_goodput.py's job and config)
without faults, ``--max-restarts 1`` so that standbys exist, cold against ``--warm-restarts torch``, alternated.

Per run: the wall (launcher spawn to exit), rank 0's iterations per second after its first 20 iterations
(from the benchmark's stamps), and, sampled every 0.25 s while they live, each standby's CPU seconds
(user + system), its resident memory, when it started after the launch and until when its CPU time still
grew (its imports), and its threads' nice values.

Run:  .venv/bin/python benchmarks/bench_standby_cost.py --repeat 2 [--iters 600]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_goodput import Bench, read_procs  # noqa: E402  (the goodput benchmark's job, unchanged)


class Standbys(threading.Thread):
    """Samples every process running standby.py under ``launcher_pid`` until ``done``."""

    def __init__(self, launcher_pid: int, began: float):
        super().__init__(daemon=True)
        self.launcher_pid, self.began = launcher_pid, began
        self.seen: dict[int, dict] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):
            try:
                children = psutil.Process(self.launcher_pid).children(recursive=True)
            except psutil.Error:
                continue
            for proc in children:
                try:
                    if not any("standby.py" in part for part in proc.cmdline()):
                        continue
                    times = proc.cpu_times()
                    nices = set()
                    for thread in proc.threads():
                        try:
                            with open(f"/proc/{proc.pid}/task/{thread.id}/stat") as stat:
                                nices.add(int(stat.read().rsplit(")", 1)[1].split()[16]))
                        except (OSError, ValueError, IndexError):
                            continue
                    entry = self.seen.setdefault(proc.pid, {"started": proc.create_time() - self.began,
                                                            "nices": set()})
                    cpu = times.user + times.system
                    if cpu > entry.get("cpu", 0.0) + 0.05:   # still importing
                        entry["busy_until"] = time.time() - self.began
                    entry.update(cpu=cpu, rss=proc.memory_info().rss)
                    entry["nices"].update(nices)
                except psutil.Error:
                    continue


def one(bench: Bench, launcher: str, n: int, iters: int) -> dict:
    work = bench.tmp / f"{n:02d}-{launcher}"
    (work / "stamps").mkdir(parents=True)
    (work / "configurator.py").symlink_to(bench.client / "configurator.py")
    (work / "data").symlink_to(bench.tmp / "data")
    argv, env = bench.command(launcher, work, 1)
    began = time.time()
    proc = subprocess.Popen(argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = Standbys(proc.pid, began)
    sampler.start()
    code = proc.wait(timeout=600)
    wall = time.time() - began
    sampler.done.set()
    sampler.join()
    iters_at = sorted(t for p in read_procs(work / "stamps") if p.rank == 0 for _, t, _ in p.iters)
    rate = (len(iters_at) - 21) / (iters_at[-1] - iters_at[20]) if len(iters_at) > 40 else float("nan")
    return {"launcher": launcher, "code": code, "wall": wall, "rate": rate, "standbys": list(sampler.seen.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--iters", type=int, default=600)
    args = parser.parse_args()
    shim = argparse.Namespace(seed=46, faults=0, ft_venv="/nonexistent", iters=args.iters, ckpt_every=20)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_standby_cost-") as tmp:
        bench = Bench(Path(tmp), shim)
        n = 0
        for rep in range(args.repeat):
            for launcher in (("dlaunch", "dlaunch-warm") if rep % 2 == 0 else ("dlaunch-warm", "dlaunch")):
                n += 1
                result = one(bench, launcher, n, args.iters)
                results.append(result)
                standbys = "; ".join(f"standby started {s['started']:.1f} s, busy until "
                                     f"{s.get('busy_until', float('nan')):.1f} s, {s['cpu']:.2f} CPU s, "
                                     f"{s['rss'] / 2**20:.0f} MiB, nice {sorted(s['nices'])}"
                                     for s in result["standbys"])
                print(f"#{rep + 1} {launcher}: exit {result['code']}, wall {result['wall']:.1f} s, "
                      f"{result['rate']:.2f} it/s after iteration 20{'; ' + standbys if standbys else ''}",
                      flush=True)
    for launcher in ("dlaunch", "dlaunch-warm"):
        mine = [r for r in results if r["launcher"] == launcher]
        print(f"{launcher}: wall median {statistics.median(r['wall'] for r in mine):.1f} s, "
              f"rate median {statistics.median(r['rate'] for r in mine):.2f} it/s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in psutil.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

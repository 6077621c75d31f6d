"""DLRover's Flash Checkpoint on this machine (issue 48's comparison): save stall into memory and restore after a
restart, under ``dlrover-run`` with 2 gloo CPU ranks, for 1 GiB of state per rank and for nanoGPT's checkpoint
(tests/clients/nanogpt, config/bench_cpu.py: model + AdamW state, nanoGPT's own checkpoint dict).

DLRover runs from its own venv (``--venv``, default /tmp/dlrvenv)::

    python3 -m venv /tmp/dlrvenv
    /tmp/dlrvenv/bin/pip install torch==2.13.0 'dlrover[k8s,torch]==0.6.1' protobuf numpy

``dlrover[torch]`` alone is not enough: ``dlrover-run`` imports grpc (the k8s extra has it), and its job master
imports kubernetes and protobuf.  ``dlrover-run --standalone`` fails with torch 2.13 (dlrover 0.6.1,
elastic_run.py:326, ``SubprocessHandler(cmd, args, {}, "", "", 0)``: torch 2.13's SubprocessHandler takes a
``numa_options`` argument more), so this benchmark starts DLRover's local job master itself (``python -m
dlrover.python.master.main --platform local``, what ``--standalone`` would start) and gives ``dlrover-run`` its
address (``DLROVER_MASTER_ADDR``), with ``--save_at_breakpoint``.

Each run: attempt 0 of every rank (benchmarks/ranks/fcp.py) times ``--saves`` saves into memory
(``DdpCheckpointer.save_checkpoint(..., storage_type=StorageType.MEMORY)``, every rank its own shard), a copy into
kept buffers and a ``torch.save`` to disk + fsync, then exits 1; dlrover-run restarts it, and attempt 1 times
``load_checkpoint()`` from the agent's shared memory plus the copy of what it returned into the live state, beside
``torch.load`` of the disk file (its pages dropped from the cache first) plus the same copy, and checks the values.
Also counted: files in /dev/shm before and after each run (what DLRover leaves in memory: its
``*_ckpt_shm_<rank>`` segments stay after dlrover-run exited 0; this benchmark removes the ones its run left).

The same rank, timed the same way, on dlaunch's memory tier (``--impls``): ``dlaunch run --memory-ckpt
--max-restarts 1`` with ``checkpoint.save(..., memory=True, persist=False)`` (no background write to disk, as
DLRover's memory saves; dlaunch persists the newest step at the failure) and ``checkpoint.load()`` after the
restart; the two alternate, in reversed order every repetition.

Run:  .venv/bin/python benchmarks/bench_flash.py [--repeat 2] [--gib 1] [--saves 5] [--impls dlrover,dlaunch]
      [--states bytes,nanogpt] [--venv /tmp/dlrvenv]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RANK = HERE / "ranks" / "fcp.py"
REPO = HERE.parent
CLIENT = REPO / "tests" / "clients" / "nanogpt"
sys.path.insert(0, str(REPO))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False


def read(out: Path) -> dict:
    """{(rank, attempt): {key: [values]}} from the ranks' ``key value`` lines."""
    found: dict = {}
    for path in out.glob("rank*-attempt*.txt"):
        rank, attempt = (int(x) for x in path.stem[4:].split("-attempt"))
        values: dict = {}
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            values.setdefault(key, []).append(value)
        found[(rank, attempt)] = values
    return found


def one(args, state: str, work: Path) -> dict:
    out, disk = work / "out", work / "disk"
    out.mkdir(parents=True)
    disk.mkdir()
    port, job = free_port(), f"fcpbench{os.getpid()}{time.monotonic_ns() % 100000}"
    python = str(Path(args.venv) / "bin" / "python")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    shm_before = set(os.listdir("/dev/shm"))
    with open(work / "master.log", "w") as log:
        master = subprocess.Popen([python, "-u", "-m", "dlrover.python.master.main", "--port", str(port),
                                   "--node_num", "1", "--job_name", job, "--platform", "local"],
                                  stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        if not wait_port(port, master, 60):
            return {"error": f"DLRover's master did not listen on {port} (see {work / 'master.log'})"}
        run_env = dict(env, DLROVER_MASTER_ADDR=f"127.0.0.1:{port}", JOB_NAME=job, FCP_OUT=str(out),
                       FCP_DISK=str(disk), FCP_GIB=str(args.gib), FCP_STATE=state, FCP_SAVES=str(args.saves),
                       FCP_CLIENT=str(CLIENT))
        t = time.perf_counter()
        with open(work / "dlrover-run.log", "w") as log:
            rc = subprocess.run([str(Path(args.venv) / "bin" / "dlrover-run"), "--nnodes=1", "--nproc_per_node=2",
                                 "--max_restarts=1", "--save_at_breakpoint", str(RANK)], cwd=work, env=run_env,
                                stdout=log, stderr=subprocess.STDOUT, timeout=600).returncode
        wall = time.perf_counter() - t
    finally:
        master.terminate()
        try:
            master.wait(10)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait()
    time.sleep(1)
    left = sorted(n for n in set(os.listdir("/dev/shm")) - shm_before if "_ckpt_shm_" in n)   # DLRover's only
    left_bytes = sum(os.path.getsize(os.path.join("/dev/shm", n)) for n in left
                     if os.path.isfile(os.path.join("/dev/shm", n)))
    for name in left:   # DLRover leaves its segments behind: this run's are freed here
        os.unlink(os.path.join("/dev/shm", name))
    persisted = sorted(str(p.relative_to(out / "ckpt")) for p in (out / "ckpt").rglob("*") if p.is_file()) \
        if (out / "ckpt").is_dir() else []
    return {"rc": rc, "wall": wall, "ranks": read(out), "left": left, "left_bytes": left_bytes,
            "persisted": persisted}


def one_dlaunch(args, state: str, work: Path, mapped: bool = False) -> dict:
    """The same rank on dlaunch's memory tier: ``dlaunch run --memory-ckpt --max-restarts 1``; ``mapped``: the
    restore by ``checkpoint.load(map_memory=True)``."""
    out, disk = work / "out", work / "disk"
    out.mkdir(parents=True)
    disk.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "FCP_IMPL": "dlaunch", "FCP_OUT": str(out),
           "FCP_DISK": str(disk), "FCP_GIB": str(args.gib), "FCP_STATE": state, "FCP_SAVES": str(args.saves),
           "FCP_CLIENT": str(CLIENT), "FCP_MAP": "1" if mapped else "0",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    t = time.perf_counter()
    with open(work / "dlaunch.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "launcher", "run", str(RANK), "--ranks", "2",
                                 "--max-restarts", "1", "--memory-ckpt", "--output-dir", str(work / "runs")],
                                cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        rc = proc.wait(600)
    wall = time.perf_counter() - t
    time.sleep(1)
    from launcher.checkpoint.tier import area_owner_pid

    left = sorted(n for n in os.listdir("/dev/shm") if area_owner_pid(n) == proc.pid)
    left_bytes = sum(p.stat().st_size for n in left for p in Path("/dev/shm", n).rglob("*") if p.is_file())
    persisted = sorted(str(p.relative_to(work / "runs")) for p in (work / "runs").rglob("ckpt/*") if p.is_file())
    return {"rc": rc, "wall": wall, "ranks": read(out), "left": left, "left_bytes": left_bytes,
            "persisted": persisted}


def first_value(values: dict, key: str) -> float:
    return float(values.get(key, ["nan"])[0])


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(state: str, impl: str, runs: list[dict]) -> dict:
    """Print ``impl``'s runs of ``state``; return its medians."""
    name = {"dlrover": "DLRover Flash Checkpoint (dlrover-run)", "dlaunch": "dlaunch memory tier (dlaunch run "
            "--memory-ckpt)", "dlaunch-map": "dlaunch memory tier, load(map_memory=True)"}[impl]
    print(f"\n== {state}: {name} ==")
    for i, run in enumerate(runs):
        if "error" in run:
            print(f"  run {i + 1}: {run['error']}")
            continue
        ranks = run["ranks"]
        size = max((int(v["bytes"][0]) for v in ranks.values()), default=0)
        print(f"  run {i + 1}: exit {run['rc']}, {run['wall']:.1f} s, {size / 2**20:.1f} MiB per rank, "
              f"attempts seen {sorted(ranks)}; persisted: {run['persisted'] or 'nothing'}; "
              f"left in /dev/shm after exit: {len(run['left'])} ({run['left_bytes'] / 2**20:.0f} MiB) "
              f"{run['left'][:6]}")
        for rank in (0, 1):
            a0, a1 = ranks.get((rank, 0), {}), ranks.get((rank, 1), {})
            saves = [float(x) for x in a0.get("fcp_save", [])]
            kept = [float(x) for x in a0.get("kept_copy", [])]
            line = (f"    rank {rank}: memory save first {saves[0] if saves else float('nan'):.3f} s, then median "
                    f"{med(saves[1:]):.3f} s {[round(s, 3) for s in saves[1:]]}; kept-buffer copy median "
                    f"{med(kept[1:]):.3f} s; torch.save+fsync {first_value(a0, 'torch_save'):.3f} s")
            if a1:
                g = functools.partial(first_value, a1)
                line += (f"\n            restore: load {g('fcp_load'):.3f} + copy {g('fcp_copy'):.3f} = "
                         f"{g('fcp_load') + g('fcp_copy'):.3f} s (values equal: {a1.get('fcp_ok')}); torch.load from "
                         f"disk {g('torch_load'):.3f} + copy {g('torch_copy'):.3f} = "
                         f"{g('torch_load') + g('torch_copy'):.3f} s (values equal: {a1.get('disk_ok')})")
            print(line)
    good = [r for r in runs if "error" not in r]

    def every(attempt: int, key: str, skip: int = 0) -> list[float]:
        return [float(x) for r in good for (_, at), v in r["ranks"].items() if at == attempt
                for x in v.get(key, [])[skip:]]

    m = {"stall": med(every(0, "fcp_save", 1)), "first": med([float(v["fcp_save"][0]) for r in good for (_, at), v
                                                               in r["ranks"].items() if at == 0 and "fcp_save" in v]),
         "kept": med(every(0, "kept_copy", 1)), "torch_save": med(every(0, "torch_save")),
         "restore": med([a + b for a, b in zip(every(1, "fcp_load"), every(1, "fcp_copy"))]),
         "load": med(every(1, "fcp_load")),
         "disk_restore": med([a + b for a, b in zip(every(1, "torch_load"), every(1, "torch_copy"))])}
    print(f"  median over runs and ranks: save stall {m['stall']:.3f} s (first save {m['first']:.3f} s), "
          f"kept-buffer copy {m['kept']:.3f} s: {m['stall'] / m['kept']:.2f}x; torch.save+fsync "
          f"{m['torch_save']:.3f} s; restore from memory {m['restore']:.3f} s (load {m['load']:.3f} + copy) vs "
          f"torch.load from disk {m['disk_restore']:.3f} s: {m['disk_restore'] / m['restore']:.1f}x faster")
    return m


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--gib", type=float, default=1.0, help="GiB of state per rank (default 1)")
    parser.add_argument("--saves", type=int, default=5, help="memory saves timed per rank (default 5)")
    parser.add_argument("--states", default="bytes,nanogpt", help="bytes, nanogpt or both (default)")
    parser.add_argument("--impls", default="dlrover,dlaunch,dlaunch-map",
                        help="any of dlrover, dlaunch, dlaunch-map (load(map_memory=True)); default all three")
    parser.add_argument("--venv", default="/tmp/dlrvenv", help="the venv with dlrover[k8s,torch] and torch 2.13.0")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if "dlrover" in impls and not (Path(args.venv) / "bin" / "dlrover-run").exists():
        print(f"bench_flash: {args.venv}/bin/dlrover-run not found; install it as this file's docstring says",
              file=sys.stderr)
        return 2
    version = subprocess.run([str(Path(args.venv) / "bin" / "python"), "-c", "import importlib.metadata as m; "
                              "print(m.version('dlrover'), m.version('torch'))"],
                             capture_output=True, text=True).stdout.strip()
    print(f"DLRover Flash Checkpoint on {os.cpu_count()} CPUs (dlrover, torch: {version}), 2 gloo ranks, "
          f"--repeat {args.repeat}, load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_flash-", dir=os.environ.get("BENCH_DISK_DIR")))
    try:
        for state in [s.strip() for s in args.states.split(",") if s.strip()]:
            runs: dict = {impl: [] for impl in impls}
            for rep in range(args.repeat):   # the order alternated every repetition
                for impl in (impls if rep % 2 == 0 else impls[::-1]):
                    work = tmp / f"{state}-{impl}-{rep}"
                    runs[impl].append(one(args, state, work) if impl == "dlrover" else
                                      one_dlaunch(args, state, work, mapped=impl == "dlaunch-map"))
            medians = {impl: report(state, impl, runs[impl]) for impl in impls}
            for impl in (i for i in impls if i != "dlrover" and "dlrover" in medians):
                d, r = medians[impl], medians["dlrover"]
                print(f"  {impl} / DLRover: save stall {d['stall'] / r['stall']:.2f}x, first save "
                      f"{d['first'] / r['first']:.2f}x, restore {d['restore'] / r['restore']:.2f}x")
    finally:
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whole-process timings of the rank-table CLI: `dlaunch --help`, and validating a
512-server, 4,096-device table (goal: each under 100 ms wall on a 2-core machine).

Run: .venv/bin/python benchmarks/bench_validate.py [--repeat N]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def big_table(servers: int) -> dict:
    server_list = []
    for s in range(servers):
        server_list.append({"server_id": f"10.{s // 250}.{s % 250}.1", "host_nic_ip": "reserve",
                            "device": [{"device_id": str(d), "device_ip": f"172.{16 + s // 250}.{s % 250}.{d + 1}",
                                        "rank_id": str(8 * s + d)} for d in range(8)]})
    server_list.sort(key=lambda srv: srv["server_id"])
    for s, srv in enumerate(server_list):
        for d, dev in enumerate(srv["device"]):
            dev["rank_id"] = str(8 * s + d)
    return {"version": "1.0", "server_count": str(servers), "server_list": server_list, "status": "completed"}


def wall(argv: list[str], repeat: int, expect: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - start)
        if result.returncode != expect:
            sys.exit(f"{argv} exited {result.returncode}: {result.stderr.decode()}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    dlaunch = str(Path(sys.executable).parent / "dlaunch")
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "rt512.json"
        table.write_text(json.dumps(big_table(512)))
        rows = [("python -c pass (interpreter floor)", wall([sys.executable, "-c", "pass"], args.repeat, 0)),
                ("dlaunch --help", wall([dlaunch, "--help"], args.repeat, 0)),
                ("dlaunch validate-ranktable (512 servers, 4096 devices)",
                 wall([dlaunch, "validate-ranktable", "-q", str(table)], args.repeat, 0))]
    print(f"{'command':58} {'median ms':>10} {'max ms':>8}  goal")
    for name, times in rows:
        goal = "" if name.startswith("python") else ("< 100 ms: " + ("met" if statistics.median(times) < 0.1
                                                                       else "MISSED"))
        print(f"{name:58} {statistics.median(times) * 1000:10.1f} {max(times) * 1000:8.1f}  {goal}")


if __name__ == "__main__":
    main()

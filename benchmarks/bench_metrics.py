"""What a Prometheus scrape of ``--metrics-port`` costs at 1,024 ranks (issue 47, item 4; goal: under 5 ms).

The snapshot of 1,024 ranks (128 hosts of 8, each rank with 200 step times, scored) is built directly in a
``MetricsFeed``, as the launch's event loop builds it, and served by its ``MetricsServer`` on loopback, in a
process of its own (as a launcher is to Prometheus: the client's work does not share the server's
interpreter). Timed, each ``--repeat`` times:

  scrape    GET /metrics and the whole answer read, a new connection each time (Prometheus keeps one open:
            this is the dearer case), against a snapshot the loop published just before
  snapshot  the loop's side, at most once a second: the families built and written in the text format
  scores    the straggler scores of 1,024 ranks (the loop's side, at most once every 5 s)

Run:  .venv/bin/python benchmarks/bench_metrics.py [--ranks 1024] [--repeat 200]
Printed: median and 99th percentile of each in ms, the body's size, and the goal met or missed.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from launcher.base.stragglers import RankSteps, scores  # noqa: E402
from launcher.execute.local.metrics import MetricsFeed  # noqa: E402

GOAL_MS = 5.0


def feed_of(ranks: int) -> MetricsFeed:
    feed = MetricsFeed("node-0")
    steps = {}
    for rank in range(ranks):
        times = RankSteps(rank, f"node-{rank // 8}")
        for step in range(200):
            times.add(random.uniform(95, 105) * (1.4 if rank == 5 else 1.0), step + 1)
        steps[rank] = times
    feed.reader = SimpleNamespace(steps=steps)
    feed.report = scores(list(steps.values()))
    feed.states = {rank: "running" for rank in range(ranks)}
    feed.seen = {rank: time.time() for rank in range(ranks)}
    feed.attempt, feed.attempts, feed.hang_budget = 1, 2, 42.0
    feed.restarts = {("job", "error"): 1, ("job", "signal"): 0, ("job", "hang"): 0}
    feed.checkpoint = (200, time.time())
    feed.fault_at, feed.recovered = time.time() - 60, 12.5
    feed.publish()
    return feed


def timed(function, repeat: int) -> list[float]:
    spent = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        spent.append((time.perf_counter() - start) * 1000)
    return spent


def serve(ranks: int, port_pipe, publish_pipe) -> None:
    """The server's process: the feed served, a new snapshot published on every byte the pipe brings."""
    feed = feed_of(ranks)
    assert feed.serve("127.0.0.1", 0) and feed.server is not None
    port_pipe.send(feed.server.port)
    while publish_pipe.recv() != "stop":
        feed.publish()
        publish_pipe.send("published")
    feed.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    port_pipe, port_child = multiprocessing.Pipe()
    publish_pipe, publish_child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(args.ranks, port_child, publish_child), daemon=True)
    server.start()
    port = port_pipe.recv()
    size = 0

    def get() -> None:
        nonlocal size
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/metrics")
        answer = connection.getresponse()
        body = answer.read()
        connection.close()
        assert answer.status == 200 and body
        size = len(body)

    scrape_ms: list[float] = []
    for _ in range(args.repeat):
        publish_pipe.send("publish")   # untimed: the loop's side, measured as "snapshot" below
        publish_pipe.recv()
        start = time.perf_counter()
        get()
        scrape_ms.append((time.perf_counter() - start) * 1000)
    publish_pipe.send("stop")
    server.join(timeout=30)
    feed = feed_of(args.ranks)
    figures = {"scrape": scrape_ms, "snapshot": timed(feed.publish, args.repeat),
               "scores": timed(lambda: scores(list(feed.reader.steps.values())), max(5, args.repeat // 20))}
    print(f"{args.ranks:,} ranks on {args.ranks // 8} hosts, body {size:,} bytes; ms, median and 99th percentile "
          f"of {args.repeat}")
    for name, values in figures.items():
        ordered = sorted(values)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        print(f"  {name:<9} {statistics.median(values):8.2f} {p99:8.2f}")
    met = statistics.median(scrape_ms) < GOAL_MS
    print(f"goal: a scrape under {GOAL_MS:g} ms (median): {'met' if met else 'missed'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

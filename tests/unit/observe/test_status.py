"""``dlaunch status``'s headline and table for an operator's MindSpore scheduler pod (issue 38, item 10): the
scheduler alone, shown as the scheduler (``sched``, no device), never as rank 0 nor as "0 rank(s)"."""

from launcher.observe.status import format_status, headline


def snapshot(rows) -> dict:
    return {"run_id": "ascendjob-1", "run_dir": "/runs/ascendjob-1", "status": "succeeded", "finished": True,
            "exit_code": 0, "root_causes": [], "hosts": ["scheduler"], "world_size": 16, "ranks": rows,
            "missing_hosts": []}


SCHED = {"rank": -1, "role": "scheduler", "local_rank": -1, "host": "scheduler", "device_id": -1, "attempt": 0,
         "pid": 4242, "state": "exited 0", "cpu_percent": None, "rss_bytes": None, "idle_seconds": 0.4,
         "last_line": "serving"}


def test_a_scheduler_pods_run_is_the_scheduler_only():
    [line] = headline(snapshot([SCHED]))
    assert line.endswith("succeeded, exit code 0; the MindSpore scheduler only (an operator's scheduler pod: the "
                         "job's ranks run in other pods)")
    row = format_status(snapshot([SCHED]), width=None).splitlines()[-1]
    assert row.split()[:3] == ["sched", "scheduler", "-"]


def test_a_run_with_ranks_still_counts_its_ranks():
    rank = {**SCHED, "rank": 0, "role": "rank", "device_id": 0}
    assert headline(snapshot([SCHED, rank]))[0].endswith("; 1 rank(s) on 1 host(s)")

"""The report's step-time section (launcher/observe/stepchart.py): every rank's step lines, every host's, drawn
and scored; none at all when no rank printed one."""

import re

from launcher.base.steps import UserPattern
from launcher.contract import Role
from launcher.observe import stepchart
from launcher.observe.charts import rank_colour
from launcher.rundir.read import RankRef


def megatron(ms_per_step, steps=30):
    return "".join(f" iteration {i:8d}/     100 | elapsed time per iteration (ms): {ms:.1f} |\n"
                   for i, ms in zip(range(1, steps + 1), ms_per_step if isinstance(ms_per_step, list)
                                    else [ms_per_step] * steps))


def ranks_with_logs(tmp_path, logs, hosts=1, attempt=0):
    """RankRefs of len(logs) ranks spread over ``hosts`` hosts, rank r's newest log holding logs[r]."""
    refs = []
    for rank, text in enumerate(logs):
        rank_dir = tmp_path / f"rank_{rank:03d}"
        rank_dir.mkdir()
        if attempt:
            (rank_dir / "output.log").write_text(megatron(10.0))   # an earlier attempt: not read
        (rank_dir / ("output.log" if not attempt else f"output.{attempt}.log")).write_text(text)
        host = f"10.0.0.{rank * hosts // len(logs) + 1}"
        refs.append(RankRef(rank, rank, host, rank, str(rank_dir), "" if hosts == 1 else f".{host}"))
    return refs


def test_the_rank_40_percent_slower_leads_the_table_flagged_and_has_its_line(tmp_path):
    refs = ranks_with_logs(tmp_path, [megatron(140.0 if rank == 2 else 100.0) for rank in range(4)])
    section = stepchart.step_section(refs)
    slowest = section["ranks"][0]
    assert (slowest["rank"], slowest["flagged"], slowest["relative"], slowest["last_step"]) == (2, True, 0.714, 30)
    assert slowest["colour"] == rank_colour(2) and slowest["median_ms"] == 140.0
    assert [row["rank"] for row in section["ranks"] if row["flagged"]] == [2]
    assert (section["count"], section["flagged"], section["hidden"], section["hosts"]) == (4, 1, 0, [])
    # the metric charts' drawer: a line per rank in its colour, 30 points each, over the step lines
    lines = dict(re.findall(r'<polyline fill="none" stroke="(#[0-9a-f]{6})"[^>]*points="([^"]+)"', section["svg"]))
    assert set(lines) == {rank_colour(r) for r in range(4)}
    assert all(len(points.split()) == 30 for points in lines.values())
    assert "step time (ms)" in section["svg"] and ">step line<" in section["svg"]
    ys = {colour: sum(float(p.split(",")[1]) for p in points.split()) / 30 for colour, points in lines.items()}
    assert ys[rank_colour(2)] < min(y for colour, y in ys.items() if colour != rank_colour(2))   # drawn higher


def test_no_step_line_no_section(tmp_path):
    refs = ranks_with_logs(tmp_path, ["epoch: 1 step: 1, loss is 2.3\n", ""])
    assert stepchart.step_section(refs) is None
    assert stepchart.step_section([]) is None


def test_every_hosts_ranks_are_read_and_hosts_ranked_when_there_are_several(tmp_path):
    times = [megatron(150.0 if rank >= 4 else 100.0) for rank in range(8)]
    section = stepchart.step_section(ranks_with_logs(tmp_path, times, hosts=2))
    assert section["count"] == 8 and {row["host"] for row in section["ranks"]} == {"10.0.0.1", "10.0.0.2"}
    assert [(h["host"], h["ranks"], h["flagged"]) for h in section["hosts"]] == [("10.0.0.2", 4, True),
                                                                               ("10.0.0.1", 4, False)]


def test_the_newest_attempt_is_read_and_the_scheduler_is_no_rank(tmp_path):
    refs = ranks_with_logs(tmp_path, [megatron(100.0), megatron(100.0)], attempt=2)
    scheduler_dir = tmp_path / "scheduler"
    scheduler_dir.mkdir()
    (scheduler_dir / "output.log").write_text(megatron(900.0))
    refs.append(RankRef(-1, 0, "10.0.0.1", 0, str(scheduler_dir), "", Role.SCHEDULER))
    section = stepchart.step_section(refs)
    assert section["count"] == 2 and all(row["median_ms"] == 100.0 for row in section["ranks"])
    assert "attempt 2: 30 points" in section["svg"]


def test_a_long_table_lists_the_slowest_and_every_flagged_rank(tmp_path, monkeypatch):
    monkeypatch.setattr(stepchart, "MAX_SHOWN", 12)
    times = [megatron(200.0 if rank < 14 else 100.0 + rank * 0.01) for rank in range(40)]
    section = stepchart.step_section(ranks_with_logs(tmp_path, times))
    assert len(section["ranks"]) == 12 and all(row["flagged"] for row in section["ranks"])
    assert (section["flagged"], section["hidden"], section["hidden_flagged"]) == (14, 28, 2)
    (tmp_path / "few").mkdir()
    few = stepchart.step_section(ranks_with_logs(tmp_path / "few", [megatron(100.0)] * 15))
    assert (len(few["ranks"]), few["hidden"], few["hidden_flagged"], few["flagged"]) == (10, 5, 0, 0)


def test_a_users_pattern_and_the_progress_bars_count_too(tmp_path):
    bars = "".join(f"\r{i * 10:3d}%|          | {i}/10 [00:0{i}<00:01,  {rate}it/s]" for i, rate in
                   ((1, "5.00"), (2, "5.00"), (3, "5.00"))) + "\n"
    refs = ranks_with_logs(tmp_path, [bars, "took 300 ms\n" * 3])
    section = stepchart.step_section(refs, UserPattern.parse(r"took (?P<ms>\d+) ms"))
    assert {row["rank"]: (row["median_ms"], row["steps"]) for row in section["ranks"]} == {0: (200.0, 3),
                                                                                         1: (300.0, 3)}
    assert [row["rank"] for row in stepchart.step_section(refs)["ranks"]] == [0]   # without the pattern

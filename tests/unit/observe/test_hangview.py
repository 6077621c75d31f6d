import json

from launcher.execute.blame import header
from launcher.observe.hangview import hang_view
from launcher.rundir.read import Run

WAITING = ('Process 10: python\n\nThread 10 (idle): "MainThread"\n'
           '    all_reduce (torch/distributed/distributed_c10d.py:1)\n')
SLEEPING = 'Process 11: python\n\nThread 11 (idle): "MainThread"\n    <module> (train.py:6)\n'


def test_every_ranks_last_step_from_the_summaries_and_the_master_hosts_job_stacks(tmp_path):
    own = tmp_path / "rank_000" / "stack.txt"
    own.parent.mkdir()
    own.write_text(header(100.0, 50) + WAITING)
    jobs = tmp_path / "job_stacks"
    jobs.mkdir()
    (jobs / "rank_000.txt").write_text("# rank 0 on host a\n" + header(100.0, 50) + WAITING)
    (jobs / "rank_001.txt").write_text("# rank 1 on host b\n" + header(90.0, 1) + WAITING)   # an older attempt's
    (jobs / "rank_001.1.txt").write_text("# rank 1 on host b\n" + header(98.5, 49) + SLEEPING)
    summary = {"attempts": [{"ranks": [{"rank": 0, "host": "a", "stack_file": str(own)}]}]}
    run = Run(run_dir=str(tmp_path), run_id="r", world_size=2, summaries={".a": json.loads(json.dumps(summary))})
    view = hang_view(run)
    assert view["stopped_first"] == ("rank 1 on host b stopped first: its stack is in no collective while the "
                                     "other rank waits in one")
    assert view["rank"] == 1 and view["ranks"] == [
        {"rank": 0, "host": "a", "last_step": 50, "behind_s": 0.0, "in_collective": True, "stack": str(own),
         "step_age_s": None},
        {"rank": 1, "host": "b", "last_step": 49, "behind_s": 1.5, "in_collective": False,
         "stack": str(jobs / "rank_001.1.txt"), "step_age_s": None}]


def test_no_stack_no_view(tmp_path):
    assert hang_view(Run(run_dir=str(tmp_path), run_id="r", world_size=1)) is None


def test_the_report_shows_the_hang_another_host_called(tmp_path):
    """This host's own attempt was stopped by the job (another host called the hang first): the job's verdict in
    its summary says hung, and the report's hang section is there (it once read only the host's own causes)."""
    from launcher.observe.report import _hang

    own = tmp_path / "rank_000" / "stack.txt"
    own.parent.mkdir()
    own.write_text(header(100.0, 50) + WAITING)
    summary = {"root_cause": {"rank": 0, "stopped_by_job": True},
               "attempts": [{"root_cause": {"rank": 0}, "ranks": [{"rank": 0, "host": "a", "stack_file": str(own)}]}],
               "job": {"root_cause": {"rank": 1, "host": "b", "hung": True}}}
    run = Run(run_dir=str(tmp_path), run_id="r", world_size=2, summaries={".a": summary})
    assert _hang(run, [summary]) is not None
    del summary["job"]
    assert _hang(run, [summary]) is None


def test_how_old_each_ranks_step_is_shown_where_status_shows_the_steps(tmp_path):
    """A heartbeat says its step at most once a second: ``last steps: 0: 37`` while the log shows 39 said
    nothing of how old 37 was (issue 47). The header records when the step was reported; status shows its age."""
    from launcher.observe.status import hang_lines

    for rank, (sign, step, at, stack) in enumerate([(100.0, 37, 99.1, WAITING), (98.0, 30, 97.8, SLEEPING)]):
        path = tmp_path / f"rank_{rank:03d}" / "stack.txt"
        path.parent.mkdir()
        path.write_text(header(sign, step, at) + stack)
    entries = [{"rank": r, "host": "a", "stack_file": str(tmp_path / f"rank_{r:03d}" / "stack.txt")} for r in (0, 1)]
    view = hang_view(Run(run_dir=str(tmp_path), run_id="r", world_size=2,
                         summaries={"": {"attempts": [{"ranks": entries}]}}))
    assert [row["step_age_s"] for row in view["ranks"]] == [0.9, 0.2]
    lines = hang_lines(view)
    assert lines[1] == "last steps: 0: 37, 1: 30* (*: in no collective, ?: no stack)"
    assert lines[2].startswith("step ages: 0: 0.9 s, 1: 0.2 s (how long before the rank's last sign of life"), lines

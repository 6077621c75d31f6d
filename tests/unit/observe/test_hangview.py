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
        {"rank": 0, "host": "a", "last_step": 50, "behind_s": 0.0, "in_collective": True, "stack": str(own)},
        {"rank": 1, "host": "b", "last_step": 49, "behind_s": 1.5, "in_collective": False,
         "stack": str(jobs / "rank_001.1.txt")}]


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

"""The run directory's one validated model (``launcher/rundir/model.py``) declares everything dlaunch writes.

The reader keeps only what the model's TypedDicts declare and drops anything else without a word (a damaged
or foreign file's extra keys are nobody's business), so a field the writer adds and the model lacks would be
invisible to status, logs, report and prune. Here the plan's dataclasses are held against the model, and
every plan, summary and pids file real runs wrote (a failure with a restart, then a resume) is read back
through the model and must come back whole: no key dropped, no value changed, nothing told as ignored; so
must the head's summary of a ``cluster --ssh`` job, made in-process from the head's record of two hosts.
"""

import dataclasses
import json
import types
import typing

from launcher.checkpoint.resume import ResumePoint
from launcher.plan.make import LaunchPlan, Policy, RankSpec
from launcher.rundir.model import PlanFile, RankSpecFile, ResumePointFile, checked


def _declared(model) -> set[str]:
    return set(typing.get_type_hints(model))


def _lost(written, read, where="") -> list[str]:
    """Every place where ``read`` (the model's view) differs from ``written`` (the file)."""
    if isinstance(written, dict) and isinstance(read, dict):
        found = []
        for key, value in written.items():
            found += [f"{where}.{key}: dropped"] if key not in read else _lost(value, read[key], f"{where}.{key}")
        return found
    if isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        return [problem for index, (w, r) in enumerate(zip(written, read))
                for problem in _lost(w, r, f"{where}[{index}]")]
    return [] if written == read else [f"{where}: {written!r} read as {read!r}"]


def test_the_model_declares_every_field_of_the_plan():
    # plan.json is LaunchPlan.to_dict(): every field of the plan, its ranks and its resume point
    for dataclass, model in [(LaunchPlan, PlanFile), (RankSpec, RankSpecFile), (ResumePoint, ResumePointFile)]:
        names = {f.name for f in dataclasses.fields(dataclass)}
        if dataclass is LaunchPlan:   # its policy is written flat, one key per field, as plan.json always was
            names = names - {"policy"} | {f.name for f in dataclasses.fields(Policy)}
        missing = names - _declared(model)
        assert not missing, f"{model.__name__} lacks {sorted(missing)} of {dataclass.__name__}"
    assert "layout" in _declared(PlanFile)


def test_the_checker_sees_what_it_drops():
    # the comparison below must be able to fail: an undeclared key and a value of the wrong type
    value, problem = checked({"run_id": "r", "surprise": 1, "world_size": "2"}, PlanFile, "plan.json")
    assert _lost({"run_id": "r", "surprise": 1, "world_size": "2"}, value) == [".surprise: dropped",
                                                                             ".world_size: dropped"]
    assert problem == "plan.json: ignored world_size: \"2\" is not a whole number"


def test_the_heads_summary_reads_back_whole():
    # summary.head.json of a cluster --ssh job: one host succeeded, one was lost, as the head records them
    from launcher.execute.ssh.outcome import head_summary
    from launcher.execute.ssh.plan import HostLaunch, Target
    from launcher.execute.ssh.session import HostRun
    from launcher.rundir.model import HeadSummaryFile

    runs = []
    for index, (ranks, exit_code) in enumerate((((0, 1), 0), ((2, 3), 255))):
        target = Target(server_id=f"127.0.0.{index + 2}", hostname=f"127.0.0.{index + 2}", port=2222, user="u",
                        identity_files=(), identities_only=False, known_hosts_files=(), record_file="",
                        connect_timeout=None)
        run = HostRun(HostLaunch(target=target, ranks=ranks, request={}), None, None)
        run.exit_code, run.started_at, run.ended_at = exit_code, 100.0 + index, 110.0
        if exit_code:
            run.lost = "the connection closed"
        else:
            run.summary, run.summary_path = {"status": "succeeded", "exit_code": 0}, "/runs/job/summary.x.json"
        runs.append(run)
    plan = types.SimpleNamespace(run_id="job", run_dir="/runs/job", world_size=4, spares=0)   # what head_summary reads
    written = json.loads(json.dumps(head_summary(plan, runs, None, 99.0)))
    read, problem = checked(written, HeadSummaryFile, "summary.head.json")
    assert problem is None and not _lost(written, read), _lost(written, read)
    assert read["hosts"][1]["reason"] == "the connection closed" and read["root_cause"]["host"] == "127.0.0.3"


def test_a_plan_with_the_mindspore_scheduler_reads_back_whole(tmp_path, monkeypatch):
    # issue 38, item 6: every status/logs/report of an --ms-scheduler (or msrun) run warned "plan.json: ignored
    # scheduler.ckpt_dir: null is not text": the scheduler has no checkpoint directory and the writer says null
    from launcher.cli.parsers import build_parser
    from launcher.cli.request import request_from_args
    from launcher.plan.make import make_plan
    from launcher.plan.settle import launch_options
    from launcher.plan.share import launch_table
    from launcher.rundir.paths import LAYOUT_VERSION

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    args = build_parser("run").parse_args(["run", "train.py", "--ranks", "2", "--ms-scheduler", "--master-port",
                                           "8118", "--run-id", "job"])
    request = request_from_args(args, False, environ={})
    table, index, _, view = launch_table(request, {})
    opts = launch_options(request, table, index, {}, view=view)
    plan = make_plan(table, index, opts, str(tmp_path / "rt.json"), {})
    assert plan.scheduler is not None and plan.scheduler.ckpt_dir is None
    written = json.loads(json.dumps({"layout": LAYOUT_VERSION, **plan.to_dict()}))
    read, problem = checked(written, PlanFile, "plan.json")
    assert problem is None and not _lost(written, read), (problem, _lost(written, read))

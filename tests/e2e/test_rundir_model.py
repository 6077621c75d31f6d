"""The run directory's one validated model (``launcher/rundir/model.py``) declares everything dlaunch writes.

The reader keeps only what the model's TypedDicts declare and drops anything else without a word (a damaged
or foreign file's extra keys are nobody's business), so a field the writer adds and the model lacks would be
invisible to status, logs, report and prune. Here the plan's dataclasses are held against the model, and
every plan, summary and pids file real runs wrote (a failure with a restart, then a resume) is read back
through the model and must come back whole: no key dropped, no value changed, nothing told as ignored; so
must the head's summary of a ``cluster --ssh`` job, made in-process from the head's record of two hosts.
"""

import json

from launcher.rundir.model import PidsFile, PlanFile, SummaryFile, checked
from launcher.rundir.paths import LAYOUT_VERSION
from launcher.rundir.read import load_run
from tests.launching import RANK_PROGRAM, latest_run, run_dlaunch
from tests.unit.rundir.test_model import _lost

MODELS = {"plan": PlanFile, "summary": SummaryFile, "pids": PidsFile}


def test_every_file_real_runs_write_reads_back_whole(tmp_path):
    out = tmp_path / "out"
    failed = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--max-restarts", "1",
                         "--", "--save-steps", "1", "--fail-rank", "1", "--code", "3", "--fail-once-all-saved",
                         cwd=tmp_path)
    assert failed.returncode == 3, failed.stderr
    first = latest_run(out)
    resumed = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--resume", first,
                          cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    second = latest_run(out)
    assert second != first

    files = sorted(path for run in (first, second) for path in run.glob("*.json")
                   if path.name.split(".")[0] in MODELS)
    assert [p.name for p in files] == ["pids.json", "plan.json", "summary.json"] * 2
    for path in files:
        written = json.loads(path.read_text())
        read, problem = checked(written, MODELS[path.name.split(".")[0]], str(path))
        assert problem is None
        assert not _lost(written, read), f"{path.name} of {path.parent.name}: " + "; ".join(_lost(written, read))

    # the fields this test is about were there to be lost: a restart, a root cause, a resume point
    summary = json.loads((first / "summary.json").read_text())
    assert len(summary["attempts"]) == 2 and summary["root_cause"]["rank"] == 1
    plan = json.loads((second / "plan.json").read_text())
    assert plan["layout"] == LAYOUT_VERSION and plan["resume"]["label"] == "ckpt-0_1"
    assert set(plan["resume"]["files"]) == {"0", "1"}
    run = load_run(str(second))
    assert run.problems == [] and run.plans[""]["resume"] == plan["resume"]
    assert run.summaries[""]["resumed_from"] == {"run_dir": str(first), "step": "ckpt-0_1"}



"""The report page's step-time section (launcher/observe/report.py with the template): shown with the flagged
rank named when the ranks print step lines, absent when they print none; ``--step-pattern`` as for status."""

from launcher import cli
from launcher.plan.make import make_plan
from launcher.plan.settle import launch_options
from launcher.plan.share import launch_table
from launcher.rundir.create import create as create_run_dir
from launcher.table.model import dumps
from tests.unit.test_pure_layers import settled


def a_run(tmp_path, logs, *more):
    """A run directory as dlaunch creates it for len(logs) ranks, rank r's log holding logs[r]."""
    args = settled(tmp_path, "run", "--ranks", str(len(logs)), "--run-id", "steps", "--master-port", "29413", *more)
    table, index, _, view = launch_table(args, {})
    plan = make_plan(table, index, launch_options(args, table, index, {}, view=view), str(tmp_path / "rt.json"), {})
    create_run_dir(plan, dumps(table), shared=False)
    for spec in plan.ranks:
        with open(spec.log_file, "w") as fh:
            fh.write(logs[spec.rank])
    return plan.run_dir


def page(run_dir, *more) -> str:
    assert cli.main(["report", run_dir, "-o", "page.html", "--force", *more]) == 0
    with open("page.html") as fh:
        return fh.read()


def megatron(ms):
    return "".join(f" iteration {i:8d}/      40 | elapsed time per iteration (ms): {ms:.1f} |\n" for i in range(1, 41))


def test_the_page_names_the_slow_rank_flagged(in_tmp):
    text = page(a_run(in_tmp, [megatron(140.0 if rank == 1 else 100.0) for rank in range(3)]))
    assert text.count('<section class="steps"') == 1 and "Step time per rank" in text
    assert "<strong>1 of 3 rank(s) flagged</strong>" in text
    flagged = text[text.index('<tr class="flagged">'):]
    flagged = flagged[:flagged.index("</tr>")]
    assert "</span>1</td>" in flagged and "140.0" in flagged and "0.71" in flagged and ">flagged<" in flagged
    assert text.count('<tr class="flagged">') == 1 and "Slowest hosts" not in text   # one host: no host table


def test_no_step_lines_no_step_section(in_tmp):
    text = page(a_run(in_tmp, ["epoch: 1 step: 1, loss is 2.3\n", "hello\n"]))
    assert 'class="steps"' not in text and "Step time per rank" not in text


def test_a_users_step_pattern(in_tmp, capsys):
    run_dir = a_run(in_tmp, ["took 100 ms\n" * 20, "took 200 ms\n" * 20])
    assert "Step time per rank" not in page(run_dir)
    text = page(run_dir, "--step-pattern", r"took (?P<ms>\d+) ms")
    assert "Step time per rank" in text and "<code>--step-pattern</code>" in text
    assert cli.main(["report", run_dir, "-o", "other.html", "--step-pattern", r"(?P<t>\d+)"]) == 2
    assert "named group" in capsys.readouterr().err


def test_a_single_rank_is_its_own_fastest(in_tmp):
    text = page(a_run(in_tmp, [megatron(100.0)]))
    assert "none of 1 rank(s) flagged" in text and '<tr class="flagged">' not in text


def test_the_runs_own_step_pattern_from_its_plan(in_tmp):
    """A run launched with --step-pattern: its report reads those lines with no flag, as status does (issue 47)."""
    run_dir = a_run(in_tmp, ["took 100 ms\n" * 20, "took 200 ms\n" * 20], "--step-pattern", r"took (?P<ms>\d+) ms")
    text = page(run_dir)
    assert "Step time per rank" in text and "<strong>1 of 2 rank(s) flagged</strong>" in text


def test_a_synchronous_jobs_straggler_by_the_work_its_launch_measured(in_tmp):
    """Every rank's step takes as long (they wait for the slowest in the collective); the launch measured rank 1
    working 1.4x the CPU per step (rank_NNN/step_work.json): the report flags rank 1, as status does."""
    import json
    import os

    run_dir = a_run(in_tmp, [megatron(100.0) for _ in range(3)])
    for rank in range(3):
        with open(os.path.join(run_dir, f"rank_{rank:03d}", "step_work.json"), "w") as fh:
            json.dump({"cpu_ms_per_step": [42.0 if rank == 1 else 30.0] * 10}, fh)
    text = page(run_dir)
    assert "<strong>1 of 3 rank(s) flagged</strong>" in text
    flagged = text[text.index('<tr class="flagged">'):]
    assert "</span>1</td>" in flagged[:flagged.index("</tr>")] and "0.71" in flagged[:flagged.index("</tr>")]

"""Run directories are input too: status, logs, report, ckpt list and prune over damaged or hostile files.

Each case starts from a real run (two ranks, rank 1 fails with code 3), copied, then damaged: special files
in place of its JSON files and logs, wrong types and absurd numbers, escapes in names, a catastrophic metric
line. The commands run in-process through ``launcher.cli.main`` under an alarm, so a hang fails the test
instead of hanging the suite.
"""

import contextlib
import json
import os
import shutil
import textwrap
import threading
import time
import tracemalloc

import pytest

from launcher import cli
from launcher.observe import charts
from launcher.observe.metrics import parse_metrics
from launcher.rundir.read import load_run
from tests.launching import run_dlaunch, within

TRAIN = textwrap.dedent("""
    import os, sys, time
    rank = int(os.environ["RANK"])
    print(f"[rank{rank}]: already prefixed by the program, as torch does")
    for step in (1, 2):
        print(f"epoch: 1 step: {step}, loss is {2.0 / step}")
    print("accuracy is 0.9")
    print("escape \\x1b]0;owned\\x07 and \\u202e reversed")
    ckpt = os.environ["DLAUNCH_CKPT_DIR"]
    open(os.path.join(ckpt, "\\x1b[31mevil\\u202e-1_2.pt"), "wb").write(b"x")
    sys.stdout.flush()
    printed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank0.printed")
    if rank == 0:
        open(printed, "w").close()
    else:   # fail only once rank 0 has printed all: else fail-fast may stop it first (a loaded machine)
        deadline = time.monotonic() + 60
        while not os.path.exists(printed) and time.monotonic() < deadline:
            time.sleep(0.01)
    sys.exit(3 if rank == 1 else 0)
""")

COMMANDS = {
    "status": lambda run: ["status", str(run), "--json"],
    "logs": lambda run: ["logs", str(run)],
    "report": lambda run: ["report", str(run), "-o", str(run.parent.parent / f"report-{time.monotonic_ns()}.html")],
    "ckpt list": lambda run: ["ckpt", "list", str(run)],
    "prune": lambda run: ["prune", "--keep", "0", "--output-dir", str(run.parent)],
}


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """A real failed run of two ranks, made once for the module."""
    where = tmp_path_factory.mktemp("base")
    (where / "train.py").write_text(TRAIN)
    result = run_dlaunch("run", "--ranks", "2", "--run-id", "base", "--output-dir", where / "runs", "--console",
                         "none", where / "train.py", cwd=where)
    assert result.returncode == 3, result.stderr
    return where / "runs" / "base", result


def copy_run(base, tmp_path, name="r"):
    """The base run copied to ``tmp_path/runs/name``, its files' paths pointing at the copy."""
    target = tmp_path / "runs" / name
    shutil.copytree(base, target, symlinks=True)
    for path in target.glob("*.json"):
        path.write_text(path.read_text().replace(str(base), str(target)))
    return target


def call(argv, seconds=20):
    """``dlaunch argv`` in-process: its exit code; a hang (past ``seconds``) raises Hang."""
    return within(seconds, lambda: cli.main(argv), str(argv))


def _zero(path):
    path.unlink()
    path.symlink_to("/dev/zero")


def _fifo(path):
    path.unlink()
    os.mkfifo(path)


def _deep(path):
    path.write_text("[" * 200_000 + "]" * 200_000)


SPECIALS = {"dev-zero": _zero, "fifo": _fifo, "deep": _deep}


@pytest.mark.parametrize("damage", sorted(SPECIALS))
@pytest.mark.parametrize("name", ["plan.json", "summary.json", "pids.json"])
def test_special_run_files_are_named_never_read_forever(base_run, tmp_path, capsys, name, damage):
    run = copy_run(base_run[0], tmp_path)
    SPECIALS[damage](run / name)
    for command, argv in COMMANDS.items():
        code = call(argv(run))
        err = capsys.readouterr().err
        assert code == 0 and str(run / name) in err, (command, code, err)   # one line naming the file
    # its summary, or its launcher's pid, says it is over: pruned all the same (unless that pid was reused)
    assert not run.exists() or "its launcher (pid" in err, err


@pytest.mark.parametrize("damage", ["dev-zero", "fifo"])
def test_special_logs_never_hang_or_flood(base_run, tmp_path, capsys, damage):
    run = copy_run(base_run[0], tmp_path)
    SPECIALS[damage](run / "rank_001" / "output.log")
    for command in ("status", "logs", "report"):
        assert call(COMMANDS[command](run)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "[rank0]: epoch: 1 step: 1" in out   # the other rank is still shown


# ------------------------------------------------------------------ wrong types and absurd numbers

def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


ABSURD = {
    "world_size 1e40": ("plan.json", lambda d: d.update(world_size=1e40)),
    "world_size Infinity": ("plan.json", lambda d: d.update(world_size=float("inf"))),
    "rank Infinity": ("plan.json", lambda d: d["ranks"][0].update(rank=float("inf"))),
    "device Infinity": ("plan.json", lambda d: d["ranks"][1].update(device_id=float("inf"))),
    "peers not a list": ("plan.json", lambda d: d.update(peers="x")),
    "peer ranks huge": ("plan.json", lambda d: d.update(peers=[{"suffix": ".h", "ranks": "0-999999999"}])),
    "ranks a string": ("plan.json", lambda d: d.update(ranks="0-1")),
    "summary ranks an object": ("summary.json", lambda d: d.update(ranks={"0": 1})),
    "root_cause a list": ("summary.json", lambda d: d.update(root_cause=[1])),
    "attempts of numbers": ("summary.json", lambda d: d.update(attempts=[1, "x", None])),
    "started a string": ("summary.json", lambda d: d.update(started="yesterday")),
    "log_tail a string": ("summary.json", lambda d: d["root_cause"].update(log_tail="abc")),
    "rank_dir with a NUL": ("plan.json", lambda d: d["ranks"][0].update(rank_dir="a\x00b")),
    "pid x": ("pids.json", lambda d: d["ranks"]["0"].update(pid="x")),
    "pid -1": ("pids.json", lambda d: d["ranks"]["0"].update(pid=-1)),
    "launcher_pid huge": ("pids.json", lambda d: d.update(launcher_pid=10**30)),
    "top level a list": ("plan.json", lambda d: d.clear()),
}


@pytest.mark.parametrize("case", sorted(ABSURD))
def test_wrong_types_and_absurd_numbers_are_left_out_with_one_line(base_run, tmp_path, capsys, case):
    name, change = ABSURD[case]
    run = copy_run(base_run[0], tmp_path)
    if case == "top level a list":
        (run / name).write_text("[1, 2]")
    else:
        _edit(run / name, change)
    if name != "summary.json":
        (run / "summary.json").unlink()   # a running run: the plan and pids are what status and prune read
    checked = load_run(str(run))
    assert checked.problems and str(run / name) in checked.problems[0]
    assert checked.world_size <= 10**6
    for command, argv in COMMANDS.items():
        code = call(argv(run))
        err = capsys.readouterr().err
        assert code in (0, 1, 3), (command, code, err)
        assert sum(str(run / name) in line for line in err.splitlines()) == 1, (command, err)


def test_lone_surrogates_in_a_summary_are_shown_not_raised(base_run, tmp_path, capsys):
    run = copy_run(base_run[0], tmp_path)
    _edit(run / "summary.json", lambda d: d["attempts"][0]["root_cause"].update(log_tail=["\ud800 x"],
                                                                                   host="h\udce9"))
    for command, argv in COMMANDS.items():
        assert call(argv(run)) == 0, (command, capsys.readouterr().err)


def test_prune_goes_on_past_a_damaged_run_and_removes_old_ones(base_run, tmp_path, capsys):
    old = [copy_run(base_run[0], tmp_path, f"old{i}") for i in range(3)]
    for name in ("plan.json", "summary.json", "pids.json"):   # nothing says its launcher is gone: kept
        _zero(old[1] / name)
    assert call(["prune", "--keep", "0", "--output-dir", str(tmp_path / "runs")]) == 0
    err = capsys.readouterr().err
    assert "removed 2 run(s)" in err and f"kept {old[1].name}" in err, err
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["old1"]


# ------------------------------------------------------------------ item 6: nesting and racing prune

def _noop(where):
    (where / "noop.py").write_text("pass\n")
    return where / "noop.py"


def test_output_dir_inside_a_run_directory_is_refused(base_run, tmp_path):
    run = copy_run(base_run[0], tmp_path)
    for flag in (["--output-dir", run / "rank_000" / "nested"], ["--output-dir", run]):
        result = run_dlaunch("run", "--ranks", "1", *flag, _noop(tmp_path), cwd=tmp_path)
        assert result.returncode == 2 and "is inside the run directory" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not (run / "rank_000" / "nested").exists()
    msrun = run_dlaunch("msrun", "--worker_num=1", "--local_worker_num=1", f"--log_dir={run / 'msrun'}",
                        _noop(tmp_path), cwd=tmp_path)
    assert msrun.returncode == 2 and "is inside the run directory" in msrun.stderr, msrun.stderr


def test_prune_keeps_a_run_being_created(base_run, tmp_path, capsys):
    run = copy_run(base_run[0], tmp_path)
    for name in ("plan.json", "summary.json", "pids.json"):
        (run / name).unlink()   # as rundir.create leaves it between the rank table and the plan
    assert call(["prune", "--keep", "0", "--output-dir", str(run.parent)]) == 0
    assert "is creating it" in capsys.readouterr().err and run.is_dir()


def test_prune_keeps_a_shared_run_whose_other_host_has_yet_to_start(base_run, tmp_path, capsys):
    run = copy_run(base_run[0], tmp_path)
    _edit(run / "plan.json", lambda d: d.update(peers=[{"server_id": "h2", "suffix": ".h2", "ranks": "2-3"}]))
    _edit(run / "summary.json", lambda d: d.update(started=time.time()))
    assert call(["prune", "--keep", "0", "--output-dir", str(run.parent)]) == 0
    assert "host h2 of the job has not written its plan yet" in capsys.readouterr().err and run.is_dir()


def test_prune_racing_launches_and_another_prune(base_run, tmp_path):
    """Launches and two prunes at once: every launch succeeds, neither prune fails, old runs go."""
    out = tmp_path / "runs"
    for i in range(6):
        copy_run(base_run[0], tmp_path, f"old{i}")
    results, stop = [], threading.Event()

    def prune_loop():
        while not stop.is_set():
            results.append(run_dlaunch("prune", "--keep", "0", "--output-dir", out, cwd=tmp_path))

    pruners = [threading.Thread(target=prune_loop) for _ in range(2)]
    for thread in pruners:
        thread.start()
    try:
        launches = [run_dlaunch("run", "--ranks", "1", "--output-dir", out, "--console", "none", _noop(tmp_path),
                                cwd=tmp_path) for _ in range(4)]
    finally:
        stop.set()
        for thread in pruners:
            thread.join()
    assert all(r.returncode == 0 for r in launches), [r.stderr for r in launches]
    assert results and all(r.returncode == 0 and "Traceback" not in r.stderr for r in results), \
        [r.stderr for r in results if r.returncode]
    assert not any(p.name.startswith("old") for p in out.iterdir())


def test_prune_never_crashes_on_a_run_written_while_it_is_removed(base_run, tmp_path, capsys):
    """Something still writing into an old run (a stray process of it) while prune removes it: prune says so,
    never a traceback (rmtree: directory not empty)."""
    run = copy_run(base_run[0], tmp_path)
    busy = run / "rank_000" / "ckpt"
    for i in range(3000):
        (busy / f"old{i}").write_bytes(b"")
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            with contextlib.suppress(OSError):
                (busy / f"new{i}").write_bytes(b"")
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        code = call(["prune", "--keep", "0", "--output-dir", str(run.parent)])
    finally:
        stop.set()
        thread.join()
    assert code in (0, 1), capsys.readouterr().err
    assert not run.exists()   # renamed aside at once: the launch of a new run never meets it


def test_prune_removes_what_a_stopped_prune_left_aside(base_run, tmp_path, capsys):
    run = copy_run(base_run[0], tmp_path)
    aside = run.parent / f".{run.name}.pruning-0a1b"
    run.rename(aside)
    assert call(["prune", "--keep", "0", "--output-dir", str(run.parent)]) == 0
    assert not aside.exists()


# ------------------------------------------------------------------ item 9: metrics

def test_catastrophic_metric_lines_parse_in_linear_time():
    for line in ("acc:" + " " * 30000, "epoch: 1" + " " * 30000 + "x", "epoch: 1 step: 2" + " " * 30000,
                 "epoch" + " " * 30000 + "acc: 1", "accuracy is [" + " " * 30000):
        assert within(10, lambda line=line: parse_metrics([line])) is not None   # quadratic would take minutes




def test_report_memory_stays_bounded_by_a_huge_log_line(base_run, tmp_path, capsys):
    run = copy_run(base_run[0], tmp_path)
    with open(run / "rank_000" / "output.log", "ab") as fh:
        fh.write(b"loss is " + b"9" * (48 << 20) + b"\naccuracy is 0.95\n")
    tracemalloc.start()
    try:
        assert call(COMMANDS["report"](run)) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    capsys.readouterr()
    assert peak < 24 << 20, f"report held {peak >> 20} MiB for a 48 MiB line"


def test_a_single_accuracy_point_keeps_its_axis_within_0_and_1():
    ticks = charts.nice_ticks(0.9, 0.9, 6, within=charts.value_range("accuracy", [0.9]))
    assert 0 <= ticks[0] < 0.9 < ticks[-1] <= 1.0, ticks
    assert charts.nice_ticks(0, 0, 6, within=charts.value_range("loss", [0.0]))[0] == 0


# ------------------------------------------------------------------ escapes, prefixes, verdicts

def test_escapes_never_reach_the_terminal(base_run, tmp_path, capsys):
    run, launched = base_run[0], base_run[1]
    assert "\x1b]0;owned" not in launched.stderr and "\\x1b]0;owned" in launched.stderr   # closing log tail
    assert "\u202e" not in launched.stderr
    assert call(["ckpt", "list", str(run)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b[31mevil\\u202e-1_2" in out, out


def test_logs_keep_a_prefix_the_rank_printed_itself(base_run, capsys):
    assert call(["logs", str(base_run[0]), "--rank", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[rank0]: already prefixed by the program, as torch does", lines


def test_a_scheduler_root_cause_is_named_as_the_scheduler(base_run, tmp_path, capsys):
    run = copy_run(base_run[0], tmp_path)

    def scheduler(data):
        data["root_cause"].update(rank=None, device_id=None, local_rank=None, role="scheduler")
        data["attempts"][0]["root_cause"] = data["root_cause"]

    _edit(run / "summary.json", scheduler)
    assert call(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "root cause: the MindSpore scheduler (host" in out and "rank None" not in out, out
    report = tmp_path / "report.html"
    assert call(["report", str(run), "-o", str(report)]) == 0
    page = report.read_text()
    assert "the MindSpore scheduler</strong>" in page and "rank None" not in page
    _edit(run / "summary.json", lambda d: d["root_cause"].update(hung=True, reason="no sign of life for 9 s"))
    assert call(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "root cause (the MindSpore scheduler, host" in out and "device None" not in out, out


def test_follow_and_watch_end_with_the_verdict_and_its_code(base_run, capsys):
    run = base_run[0]
    assert call(["logs", str(run), "--follow"]) == 3
    assert "run base (" in capsys.readouterr().err
    assert call(["status", str(run), "--watch", "--interval", "0.1"]) == 3
    assert "run base finished: failed, exit code 3" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["fifo", "dev-zero"])
def test_follow_and_watch_of_a_run_whose_plan_cannot_be_read_end(base_run, tmp_path, capsys, damage):
    run = copy_run(base_run[0], tmp_path)
    (run / "summary.json").unlink()
    SPECIALS[damage](run / "plan.json")
    assert call(["logs", str(run), "--follow"], seconds=10) == 1
    assert call(["status", str(run), "--watch", "--interval", "0.1"], seconds=10) == 1
    assert "unreadable" in capsys.readouterr().out


def test_ckpt_list_of_a_directory_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    assert call(["ckpt", "list", str(tmp_path / "notes")]) == 2
    assert "not a dlaunch run directory" in capsys.readouterr().err


ERROR_FILE = textwrap.dedent("""
    import json, os, sys
    path = os.environ["TORCHELASTIC_ERROR_FILE"]
    if sys.argv[1] == "fifo":
        os.mkfifo(path)
    else:
        json.dump({"message": {"message": "boom \\x1b[2J here"}}, open(path, "w"))
    sys.exit(1)
""")


@pytest.mark.parametrize("kind", ["fifo", "message"])
def test_a_ranks_error_file_is_read_bounded_and_shown_printable(tmp_path, kind):
    (tmp_path / "fail.py").write_text(ERROR_FILE)
    result = run_dlaunch("run", "--ranks", "1", "--output-dir", tmp_path / "runs", "--console", "none",
                         tmp_path / "fail.py", "--", kind, cwd=tmp_path, timeout=30)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    if kind == "message":
        assert "its error file says: boom \\x1b[2J here" in result.stderr, result.stderr

"""Reading a run directory: status, logs, the report page, checkpoints, pruning."""


def tell_problems(run, told: set[str] | None = None) -> None:
    """One warning line per damaged file of ``run`` (what rundir's model left out); each only once with
    ``told`` (a watch that reloads the run every interval)."""
    from launcher.console import printable, say

    for problem in run.problems:
        if told is None or problem not in told:
            say(f"warning: {printable(problem)}")
            if told is not None:
                told.add(problem)


def add_run_arguments(p) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?",
                   help="a run directory, or an output directory (its latest run); default: the latest run "
                        "in --output-dir")
    p.add_argument("--output-dir", default="dlaunch_runs", metavar="DIR",
                   help="where run directories are (default ./dlaunch_runs)")
    p.add_argument("--rank", action="append", metavar="R",
                   help="only these ranks: 3, 0,3 or 4-7 (repeatable; default all)")

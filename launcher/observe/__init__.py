"""Reading a run directory: status, logs, the report page, checkpoints, pruning."""


def tell_problems(run, told: set[str] | None = None) -> None:
    """One warning line per damaged file of ``run`` (what rundir's model left out); each only once with
    ``told`` (a watch that reloads the run every interval)."""
    from launcher.base.console import printable, say

    for problem in run.problems:
        if told is None or problem not in told:
            say(f"warning: {printable(problem)}")
            if told is not None:
                told.add(problem)

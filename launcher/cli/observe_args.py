"""The arguments every command that reads a run takes: which run, which ranks."""

from __future__ import annotations


def add_run_arguments(p) -> None:
    """RUN_DIR, --output-dir and --rank, as ``status`` and ``logs`` take them."""
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?",
                   help="a run directory, or an output directory (its latest run); default: the latest run "
                        "in --output-dir")
    p.add_argument("--output-dir", default="dlaunch_runs", metavar="DIR",
                   help="where run directories are (default ./dlaunch_runs)")
    p.add_argument("--rank", action="append", metavar="R",
                   help="only these ranks: 3, 0,3 or 4-7 (repeatable; default all)")

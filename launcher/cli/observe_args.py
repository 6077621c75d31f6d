"""The arguments every command that reads a run takes: which run, which ranks."""

from __future__ import annotations

from dataclasses import replace

from launcher.settings.launch import OUTPUT_DIR

RUN_DIR_HELP = "a run directory, or an output directory (its latest run); default: the latest run in --output-dir"


def add_run_dir(p, help: str = RUN_DIR_HELP) -> None:
    """RUN_DIR and --output-dir (the launch commands' option, default and all), as every reader takes them."""
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?", help=help)
    add_output_dir(p)


def add_output_dir(p) -> None:
    """--output-dir, declared once with the launch commands' (``settings.launch.OUTPUT_DIR``); from the
    command line only here."""
    replace(OUTPUT_DIR, layered=False, help="where run directories are (default ./dlaunch_runs)").add_to(p)


def add_run_arguments(p) -> None:
    """RUN_DIR, --output-dir and --rank, as ``status`` and ``logs`` take them."""
    add_run_dir(p)
    p.add_argument("--rank", action="append", metavar="R",
                   help="only these ranks: 3, 0,3 or 4-7 (repeatable; default all)")

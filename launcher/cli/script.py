"""``dlaunch script``: its parser, and the Namespace settled into a ``ScriptRequest`` for ``scripts.render``."""

from __future__ import annotations

import argparse
import functools
import os

from launcher.scripts.render import SHIPPED, SUFFIX, script_options
from launcher.settings.launch import add_launch_arguments


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Layer the options (flags > DLAUNCH_* > --config files > defaults) and write the script."""
    from launcher.cli.request import request_of
    from launcher.errors import UsageError
    from launcher.scripts.render import script
    from launcher.settings.layers import apply_layers
    from launcher.settings.request import SCRIPT_FIELDS, ScriptRequest

    values, sources = apply_layers(vars(args), script_options(), os.environ, args.script_args_given)
    settled = {**vars(args), **values}
    if not settled["script"]:
        raise UsageError("dlaunch script: no SCRIPT given (on the command line or as script: in a config)",
                         usage=parser.format_usage())
    own = {dest: settled[dest] for dest in SCRIPT_FIELDS}
    own["sbatch"] = tuple(own["sbatch"] or ())
    return script(ScriptRequest(template=settled["template"], request=request_of("script", settled, sources=sources),
                                **own))


def add_parser(sub) -> argparse.ArgumentParser:
    """Register ``dlaunch script`` on the subparsers ``sub``."""
    shipped = "; ".join(f"{name}: {what}" for name, (_, what) in SHIPPED.items())
    p = sub.add_parser(
            "script", help="write a standalone launch script (run.sh, run_cluster.sh, a Slurm batch script)",
            usage="dlaunch script TEMPLATE SCRIPT [launch options] -o FILE [-- script arguments]",
            description="Render a launch script from a template: " + shipped + ". Launch options are those of "
                        "dlaunch run and cluster, layered the same way (flags > DLAUNCH_<OPTION> > --config files > "
                        "defaults); every one that is not a default is written into the script as a flag, and its "
                        "header records the dlaunch version and each setting's source. Values are shell-quoted; "
                        "the script is executable, runs this dlaunch (this Python, -m launcher) unless the DLAUNCH "
                        "variable names another command, and passes its own arguments on to dlaunch (options, "
                        "then -- and more script arguments).",
            epilog="examples: dlaunch script run.sh train.py --ranks 8 -o run.sh -- --epochs 3;  "
                   "dlaunch script slurm train.py --rank-table rt16.json --partition npu --time 2:00:00 "
                   "--signal USR1@120 --requeue -o job.sbatch (a requeued job resumes from its newest complete "
                   "checkpoint step)")
    # TEMPLATE and SCRIPT may come before, between or after options (``script slurm -o job.sh train.py``):
    # the command parsers (cli.parsers.CommandParser) read such a command's options first, positionals after
    p.intermixed = True
    p.add_argument("template", metavar="TEMPLATE",
                   help=f"{', '.join(SHIPPED)}, or the name of a template NAME{SUFFIX} in --template-dir")
    add_launch_arguments(p, script_options())
    p.set_defaults(handler=functools.partial(_run, parser=p))
    return p

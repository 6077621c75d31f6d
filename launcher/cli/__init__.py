"""dlaunch's command line: split at "--", parse, dispatch, turn errors into exit codes.

One module per command (``cli/run.py``, ``cli/status.py``, ...: as pip does) declares the command's parser
and registers its handler; ``parsers`` builds the top-level parser from them; ``request`` is where run's and
cluster's Namespace becomes a typed ``LaunchRequest``. A ``UsageError`` is one line on stderr and exit code
2, never a traceback.
"""

from __future__ import annotations

import os
import sys

from launcher.base.console import printable, say, settle_streams, silence
from launcher.cli.command_parser import separated, short
from launcher.cli.parsers import COMMANDS, SCRIPT_ARG_COMMANDS, build_parser, unrecognized
from launcher.contract import ExitCode
from launcher.errors import DlaunchError, UsageError
from launcher.settings.launch import LAUNCH_COMMANDS


def separator_as_value(argv: list[str]) -> str | None:
    """The first ``--OPTION=--`` among dlaunch's own arguments, or None.

    argparse takes the ``--`` of ``--profile=--`` for the end-of-options marker and hands the option an empty
    list, which no handler expects; the value ``--`` is refused here, before parsing, for every option at once.
    """
    if argv[:1] == ["msrun"]:   # msrun's script and its arguments follow its options without a "--"
        at = 1
        while at < len(argv) and argv[at].startswith("-"):
            at += 1 if "=" in argv[at] or argv[at] == "--dry-run" else 2
        argv = argv[:at]
    return next((a for a in argv if a.startswith("-") and a.endswith("=--") and a.index("=") > 1), None)


SCRIPT_LIKE_OPTIONS = ("--config", "--resume")   # dlaunch's and, often, the training script's


def _after_script_hint(argv: list[str], cut_at: int | None) -> str:
    """For a refusal of ``dlaunch run train.py --ranks 2 --config x.yaml`` (options after the script, no "--"):
    those options were read as dlaunch's own; the fix keeps dlaunch's own flags before -- and the script's after."""
    if cut_at is not None or not argv or argv[0] not in SCRIPT_ARG_COMMANDS:
        return ""
    script = next((i for i, a in enumerate(argv) if i and a.endswith(".py") and not a.startswith("-")), None)
    if script is None:
        return ""
    # only options a training script commonly takes too: dlaunch's own options may follow the script
    late: list[str] = []
    for at in range(script + 1, len(argv)):
        if argv[at].split("=", 1)[0] in SCRIPT_LIKE_OPTIONS:
            given = "=" in argv[at] or at + 1 == len(argv) or argv[at + 1].startswith("-")
            late += argv[at:at + (1 if given else 2)]
    if not late:
        return ""
    flags = [a for a in late if a.startswith("-")]
    verb = "were" if len(flags) > 1 else "was"
    return (f" ({' '.join(short(a) for a in flags[:3])} after {short(argv[script])} {verb} read as dlaunch's; "
            f"arguments for the script go after --: {separated(argv, late)})")


def entry() -> None:
    """The ``dlaunch`` program: ``main``, then an exit without the interpreter's teardown.  Everything dlaunch
    writes is closed by then (its threads are daemons, its files written whole and renamed), so the teardown
    of some 200 modules only costs CPU: tens of ms per host, all at once when one job's hosts stop together."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            if stream is sys.stdout and code == 0:
                code = 1   # what was printed did not all arrive (a closed pipe): the code says so
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    script_args: list[str] = []
    cut_at = None
    if argv and argv[0] in SCRIPT_ARG_COMMANDS and "--" in argv:
        cut_at = argv.index("--")
        argv, script_args = argv[:cut_at], argv[cut_at + 1:]
    bad = separator_as_value(argv)
    if bad is not None:
        option = bad.split("=", 1)[0]
        sub = parser.subcommands.get(argv[0]) if argv else None
        say(f"error: {printable(bad)}: '--' is not a value for {printable(option)} (it ends the options); "
            f"give {printable(option)} a value", usage=(sub or parser).format_usage())
        return UsageError.exit_code
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        import difflib

        meant = difflib.get_close_matches(argv[0], list(COMMANDS), n=1, cutoff=0.6)
        say(f"error: unknown command {printable(argv[0])!r}" + (f"; did you mean {meant[0]!r}?" if meant else
            f" (commands: {', '.join(COMMANDS)})"), usage=parser.format_usage())
        return UsageError.exit_code
    if argv in (["cluster", "--from-head"], ["cluster", "--from-head", "--announce"]):   # the SSH head's, verbatim
        from launcher.cli.cluster import cmd_from_head

        handler = lambda: cmd_from_head(announce=len(argv) == 3)  # noqa: E731
    else:
        args, extras = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help()
            return UsageError.exit_code
        run = args.handler   # every command's module registers its handler (cli.parsers)
        if args.command == "config":
            args.launch_flags = extras   # launch flags, judged by run's or cluster's parser in cmd_config
        elif extras:
            sub = parser.subcommands[args.command]
            sub.error(unrecognized(sub, args.command, extras, argv=argv, script=getattr(args, "script", None),
                                   script_args=script_args))
        if args.command in SCRIPT_ARG_COMMANDS:
            args.script_args, args.script_args_given = script_args, cut_at is not None
        if args.command in LAUNCH_COMMANDS:   # the Namespace ends here: run and cluster take a LaunchRequest
            from launcher.cli.request import request_from_args

            usage = parser.subcommands[args.command].format_usage()
            handler = lambda: run(request_from_args(args, cut_at is not None, usage=usage))  # noqa: E731
        else:
            handler = lambda: run(args)  # noqa: E731
    try:
        return handler()
    except DlaunchError as exc:
        say(f"error: {printable(exc)}{_after_script_hint(argv, cut_at)}",
            *(f"error: {printable(line)}" for line in exc.also), usage=exc.usage)
        return exc.exit_code
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:   # a command's own output (a report, a table) could not be delivered: as SIGPIPE would
        silence(sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
    finally:
        settle_streams()

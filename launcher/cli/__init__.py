"""dlaunch's command line: split at "--", parse, dispatch, turn errors into exit codes.

``parsers`` declares every command's options; ``commands`` holds the built-in handlers; other commands
register their own. A ``UsageError`` is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys

from launcher.cli.commands import HANDLERS, cmd_cluster
from launcher.cli.parsers import SCRIPT_ARG_COMMANDS, build_parser, unrecognized
from launcher.console import printable, say, settle_streams, silence
from launcher.contract import ExitCode
from launcher.errors import DlaunchError, UsageError
from launcher.options import LAUNCH_COMMANDS, options_for, settle


def cmd_from_head() -> int:
    """``cluster --from-head``: this host's launcher, its request read from the SSH channel (ssh.protocol)."""
    from launcher.execute.ssh import protocol

    request, pending = protocol.read_request(0)
    args = build_parser().parse_args(["cluster", *map(str, request["argv"])])
    args.script_args = [str(a) for a in request.get("script_args", [])]
    settle(args, options_for("cluster"), True, environ={})
    args.rank_table_text = request.get("rank_table")
    args.head_env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}

    def started(ranks):
        protocol.emit("started", ranks=len(ranks), at=min(r.start for r in ranks))

    return cmd_cluster(args, control=(0, pending), on_started=started)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    cut_at = None
    if argv and argv[0] in SCRIPT_ARG_COMMANDS and "--" in argv:
        cut_at = argv.index("--")
        argv, script_args = argv[:cut_at], argv[cut_at + 1:]
    given_dashes = next((a for a in argv if a.startswith("-") and a.endswith("=--")), None)
    if given_dashes is not None:   # argparse would hand the option an empty list: every handler's surprise
        say(f"error: {printable(given_dashes.partition('=')[0])} needs a value, not '--' (script arguments go after "
            f"a separate --)")
        return UsageError.exit_code
    if argv and not argv[0].startswith("-") and argv[0] not in parser.subcommands:
        import difflib

        close = difflib.get_close_matches(argv[0], list(parser.subcommands), n=1, cutoff=0.5)
        say(f"error: no command {printable(argv[0][:40])!s}" + (f"; did you mean {close[0]}?" if close else "") +
            " ('dlaunch --help' lists the commands)")
        return UsageError.exit_code
    if argv == ["cluster", "--from-head"]:
        handler = cmd_from_head
    else:
        args, extras = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help()
            return UsageError.exit_code
        run = getattr(args, "handler", None) or HANDLERS[args.command]
        if args.command == "config":
            args.launch_flags = extras   # launch flags, judged by run's or cluster's parser in cmd_config
        elif extras:
            sub = parser.subcommands[args.command]
            sub.error(unrecognized(sub, args.command, extras))
        if args.command in SCRIPT_ARG_COMMANDS:
            args.script_args, args.script_args_given = script_args, cut_at is not None
        if args.command in LAUNCH_COMMANDS:
            usage = parser.subcommands[args.command].format_usage()
            handler = lambda: run(settle(args, options_for(args.command), cut_at is not None,  # noqa: E731
                                         usage=usage))
        else:
            handler = lambda: run(args)  # noqa: E731
    try:
        return handler()
    except DlaunchError as exc:
        say(f"error: {printable(exc)}", usage=exc.usage)
        return exc.exit_code
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:   # a command's own output (a report, a table) could not be delivered: as SIGPIPE would
        silence(sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
    finally:
        settle_streams()

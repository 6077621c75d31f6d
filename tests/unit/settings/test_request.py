"""The typed request between the command line and the launch: one field per declared option, and the flags a
``cluster --ssh`` head sends its hosts derived from the declarations (what a host settles equals the head's)."""

import dataclasses

from launcher.cli.parsers import build_parser
from launcher.cli.request import request_from_args, settled_request
from launcher.plan.share import head_launch
from launcher.settings.launch import launch_option_names, options_for
from launcher.settings.request import OPTION_FIELDS, LaunchRequest
from tests.launching import write_rank_table


def test_one_field_per_declared_option():
    assert OPTION_FIELDS == set(launch_option_names())
    assert dataclasses.is_dataclass(LaunchRequest) and LaunchRequest.__dataclass_params__.frozen


def test_a_host_settles_what_the_head_settled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    table = write_rank_table(tmp_path / "rt.json", devices_per_host=1)
    (tmp_path / "c.yaml").write_text("waiting_notice: 7\n")
    argv = ["cluster", "train.py", "--rank-table", str(table), "--ssh", "--profile", "a2", "--cwd", "rank",
            "--console", "ALL", "--grace-period", "2.5", "--forward-signals", "WINCH,URG", "--max-restarts", "3",
            "--hang-timeout", "40", "--ms-scheduler", "--ms-topo-timeout", "60", "--host-timeout", "9",
            "--join-timeout", "30", "--job-port", "29777", "--config", str(tmp_path / "c.yaml")]
    head = request_from_args(build_parser().parse_args(argv), False,
                             environ={"DLAUNCH_OUTPUT_DIR": str(tmp_path / "-runs")})
    _, _, opts = head_launch(head, {})
    words = list(opts.host_argv)
    assert words[0] == str(tmp_path / "train.py")
    host = settled_request("cluster", vars(build_parser().parse_args(["cluster", *words, "--server-id", "x"])),
                           False, environ={})
    for option in options_for("cluster"):
        if option.to_hosts:
            expected = {"run_id": opts.run_id, "master_addr": opts.master_addr, "master_port": opts.master_port,
                        "output_dir": str(tmp_path / "-runs"), "console": "all"}.get(option.dest,
                                                                                      getattr(head, option.dest))
            assert getattr(host, option.dest) == expected, option.dest
    assert host.waiting_notice == 7.0 and host.forward_signals == head.forward_signals   # a config, signal names


def test_the_namespace_stays_in_the_cli():
    """No module below ``launcher/cli`` names argparse's Namespace: each command hands its stage a typed request."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[3] / "launcher"
    for path in package.rglob("*.py"):
        if path.relative_to(package).parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            named = (isinstance(node, ast.Attribute) and node.attr == "Namespace"
                     and isinstance(node.value, ast.Name) and node.value.id == "argparse") or \
                    (isinstance(node, ast.ImportFrom) and node.module == "argparse"
                     and any(alias.name == "Namespace" for alias in node.names))
            assert not named, f"{path.relative_to(package.parent)}:{node.lineno} uses argparse.Namespace"


def test_a_generated_script_names_forwarded_signals(tmp_path, monkeypatch, capsys):
    from launcher.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    out = tmp_path / "run.sh"
    assert main(["script", "run.sh", "train.py", "--forward-signals", "WINCH,URG", "-o", str(out)]) == 0
    assert "--forward-signals SIGWINCH,SIGURG" in out.read_text()   # as the flag takes it back, not (28, 23)


def test_below_the_cli_nothing_probes_arguments_or_argparse_internals():
    """Stages read typed fields: no ``getattr(args, ...)`` outside ``launcher/cli``, and argparse's private
    attributes (``_option_string_actions``, ``_actions``) nowhere."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[3] / "launcher"
    found = []
    for path in package.rglob("*.py"):
        in_cli = path.relative_to(package).parts[0] == "cli"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (not in_cli and isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr"
                    and node.args and getattr(node.args[0], "id", "") in ("args", "ns", "namespace")):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno} getattr")
            if isinstance(node, ast.Attribute) and node.attr in ("_option_string_actions", "_actions",
                                                                 "_subparsers", "_defaults"):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.attr}")
    assert found == []


def test_the_process_environment_is_read_at_the_edge():
    """``os.environ`` is read by the commands (``launcher/cli``) and passed down, and by the ranks' own side
    (``launcher/checkpoint``, the warm-restart standby that becomes a rank, and the hook every Python rank runs
    first, all of which run in the rank); no stage reads it behind its caller's back."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[3] / "launcher"
    readers = []
    for path in package.rglob("*.py"):
        if path.relative_to(package).parts[0] in ("cli", "checkpoint") or path.name in ("standby.py",
                                                                                       "sitecustomize.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
                    and getattr(node.value, "id", "") == "os"):
                readers.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    assert readers == []


def test_the_script_request_has_a_field_per_script_option():
    """``dlaunch script`` hands the renderer a typed ``ScriptRequest``: its own fields are exactly the script's
    own options (the launch options live in its ``LaunchRequest``)."""
    from launcher.scripts.render import SCRIPT_OPTIONS
    from launcher.settings.request import SCRIPT_FIELDS

    assert SCRIPT_FIELDS == {option.dest for option in SCRIPT_OPTIONS}

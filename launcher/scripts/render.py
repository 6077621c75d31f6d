"""``dlaunch script``: standalone launch scripts rendered from Jinja2 templates.

``dlaunch script TEMPLATE SCRIPT [launch options] -o FILE [-- script arguments]``
renders one of the templates shipped in ``launcher/scripts/templates/`` (or one of the
user's, ``--template-dir``) into an executable shell script that runs
``dlaunch run`` or ``dlaunch cluster`` with exactly the settings given now:

* ``run.sh``          one host: ``dlaunch run``
* ``run_cluster.sh``  one host of many: ``dlaunch cluster``
* ``slurm``           a batch script: ``srun --ntasks-per-node=1 dlaunch cluster``, each node's
                      share of the rank table chosen by its ``SLURM_NODEID``; ``--signal``/``--requeue``
                      for preemption (a requeued job resumes by itself: ``resume.slurm_requeue``)

The launch options are the very options of ``run`` and ``cluster`` (built from
their declarations in ``launcher.plan.settle``, so a new flag appears here too) and are layered like theirs:
flags > ``DLAUNCH_<OPTION>`` variables > ``--config`` files > defaults.  Every
setting that did not come from a default is baked into the script as a flag,
so the script depends on neither the config file nor the environment it was
rendered in; its header records the dlaunch version, each setting with its
source, and a command line that renders it again.

Safety: templates render in an autoescape-free environment with
``StrictUndefined``; every value reaches the shell through the ``q`` filter
(``shlex.quote``), comments through ``comment`` (control characters escaped, so
a newline in a value can never end a comment and start a command), and
``#SBATCH`` lines through ``directive`` (quoted the way sbatch reads them;
newlines, control characters and backslashes refused).  jinja2 is imported
only when a script is rendered.

Template context (for ``--template-dir`` authors): ``version``, ``template``,
``command`` (``run``/``cluster``), ``dlaunch`` (argv of the rendering
dlaunch), ``launch_groups`` (the script and each option with its value, one
list of words per group), ``launch_options`` (the same, flat),
``script_args``, ``settings`` (``words`` and ``source`` per setting),
``remake`` (argv to render again), ``rank_table``, ``servers``,
``world_size`` (``None`` when the table cannot be read now), ``run_id``,
``output_name`` and the Slurm settings ``nodes``, ``time``, ``partition``,
``account``, ``job_name``, ``exclusive``, ``signal`` (``SIG@SECONDS``), ``requeue``, ``sbatch``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import sys
from dataclasses import replace
from typing import Any

from launcher.base.console import printable, say
from launcher.errors import UsageError
from launcher.settings.argtypes import whole
from launcher.settings.launch import LAUNCH_COMMANDS, launch_option_names, options_for
from launcher.settings.layers import FLAG, LIST, Option
from launcher.settings.request import OPTION_FIELDS, SCRIPT_FIELDS, ScriptRequest

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
SUFFIX = ".j2"
SHIPPED_PREFIX = "shipped"
SHIPPED = {
    "run.sh": ("run", "one host: dlaunch run"),
    "run_cluster.sh": ("cluster", "one host of a multi-host job: dlaunch cluster (run it on every host)"),
    "slurm": ("cluster", "a Slurm batch script: srun starts one dlaunch cluster per node, whose share of the "
                         "rank table is chosen by SLURM_NODEID"),
}
SLURM_OPTIONS = ("nodes", "time", "partition", "account", "job_name", "shared", "signal", "requeue", "sbatch")
TEMPLATE_OPTIONS = {"run.sh": (), "run_cluster.sh": (), "slurm": SLURM_OPTIONS}
# Launch options a template cannot use, and why.
REFUSED = {
    "run_cluster.sh": {"ssh": "run_cluster.sh is one host's share; dlaunch cluster --ssh starts every host itself"},
    "slurm": {"ssh": "Slurm starts one dlaunch per node (srun)",
              "rank_start": "under Slurm each node's share comes from SLURM_NODEID",
              "server_id": "under Slurm each node's share comes from SLURM_NODEID",
              "node_rank": "under Slurm each node's index is its SLURM_NODEID"},
}
NOT_RENDERED = {"config"}  # config files are inlined as flags: the script needs none of them
MAX_SIGNAL_SECONDS = 65535   # sbatch's own limit for --signal's time


def slurm_signal(text) -> str:
    """``--signal USR1@120`` (or ``B:USR1@120``, ``SIGUSR1@120``): a signal name and whole seconds, checked now
    so that a typo is a usage error here rather than a job sbatch rejects, or one that is never warned."""
    value = str(text).strip()
    name, at, when = value.removeprefix("B:").partition("@")
    name = name.strip().upper().removeprefix("SIG")
    known = name.isascii() and name.isalnum() and ("SIG" + name) in signal.Signals.__members__
    whole_seconds = when.isascii() and when.isdigit() and len(when) <= 5 and int(when) <= MAX_SIGNAL_SECONDS
    if not (at and known and whole_seconds):
        raise argparse.ArgumentTypeError(f"expected SIG@SECONDS, a signal name and whole seconds before the time "
                                         f"limit (at most {MAX_SIGNAL_SECONDS}) such as USR1@120, not "
                                         f"{value[:40]!r}")
    return f"{name}@{int(when)}"


OUTPUT_GROUP, SLURM_GROUP = "the script file", "slurm template (#SBATCH lines)"
# dlaunch script's own options, declared as the launch options are (and layered the same way).
SCRIPT_OPTIONS = [
    Option(("-o", "--output"), "the script to write (required; - for stdout)", metavar="FILE", group=OUTPUT_GROUP),
    Option(("--force",), "overwrite FILE if it exists", kind=FLAG, default=False, group=OUTPUT_GROUP),
    Option(("--template-dir",), f"your templates: NAME{SUFFIX} there is template NAME, and overrides a shipped one "
                                f"of that name; it may {{%% extends \"{SHIPPED_PREFIX}/NAME{SUFFIX}\" %%}} to change "
                                f"blocks of the shipped one", metavar="DIR", group=OUTPUT_GROUP),
    Option(("--launch",), "for your own templates: the dlaunch command they run (default: cluster with "
                          "--rank-table, else run)", choices=LAUNCH_COMMANDS, group=OUTPUT_GROUP),
    Option(("--nodes",), "nodes (default: the rank table's server count)", type=whole(1, 100000), metavar="N",
           group=SLURM_GROUP),
    Option(("--time",), "time limit, e.g. 2:00:00", metavar="LIMIT", group=SLURM_GROUP),
    Option(("--partition",), "partition", group=SLURM_GROUP),
    Option(("--account",), "account to charge", group=SLURM_GROUP),
    Option(("--job-name",), "job name (default: the training script's name)", metavar="NAME", group=SLURM_GROUP),
    Option(("--shared",), "let other jobs share the nodes (default: #SBATCH --exclusive)", kind=FLAG,
           default=False, group=SLURM_GROUP),
    Option(("--signal",), "ask Slurm to send SIG to the batch script SECONDS before the time limit: #SBATCH "
                          "--signal=B:SIG@SECONDS (e.g. USR1@120; srun passes it to dlaunch, which forwards USR1 "
                          "and USR2 to every rank, other signals with --forward-signals)", type=slurm_signal,
           metavar="SIG@SECONDS", group=SLURM_GROUP),
    Option(("--requeue",), "let Slurm requeue the job (preemption, a failed node, scontrol requeue): #SBATCH "
                           "--requeue; the requeued job resumes from the newest checkpoint step every rank "
                           "completed", kind=FLAG, default=False, group=SLURM_GROUP),
    Option(("--sbatch",), "one more #SBATCH option, e.g. --sbatch=--gres=npu:8 (repeatable)", kind=LIST,
           default=[], metavar="OPTION", group=SLURM_GROUP),
]
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# ----------------------------------------------------------------------------- filters

def quote(value) -> str:
    """One shell word, whatever the value holds (the ``q`` filter)."""
    if value is None or isinstance(value, bool):
        raise UsageError(f"a template quoted {value!r}: an option that is not set?")
    return shlex.quote(str(value))


def quote_join(values) -> str:
    """Shell words separated by spaces (the ``qjoin`` filter)."""
    if isinstance(values, (str, bytes)):
        raise UsageError(f"qjoin takes a list of words, not the string {values!r}")
    return " ".join(quote(value) for value in values)


def comment(value) -> str:
    """Text safe inside a ``#`` comment: control characters (newlines above all) shown escaped."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], str(value))


def directive(value) -> str:
    """A value for an ``#SBATCH`` line: quoted as sbatch unquotes it; what sbatch cannot read is refused."""
    text = str(value)
    if CONTROL.search(text) or "\\" in text:
        raise UsageError(f"{text!r} cannot go on an #SBATCH line: sbatch reads no newlines, control "
                         f"characters or backslashes there")
    return shlex.quote(text)


# ----------------------------------------------------------------------------- parser

def script_options() -> list[Option]:
    """Every option of ``dlaunch script``: run's and cluster's (each once, run's first), then its own."""
    seen: dict[str, Option] = {}
    takers = launch_option_names()
    for command in LAUNCH_COMMANDS:
        for option in options_for(command):
            if option.dest not in seen:   # in run's and cluster's sections; one command's own says so
                only = "" if len(takers[option.dest]) > 1 else f"dlaunch {command} only: "
                seen[option.dest] = replace(option, help=only + option.help)
    return [*seen.values(), *SCRIPT_OPTIONS]


# ----------------------------------------------------------------------------- settings to words

Settings = dict[str, Any]   # the request's options by dest (every one rendered alike), "template" and "script_args"
Sources = dict[str, str]    # dest -> where its value came from ("default" when no layer gave it)


def _settings(req: ScriptRequest) -> tuple[Settings, Sources]:
    """The request as the renderer walks it: every option by its dest, in one dict it may correct (paths made
    absolute, misfits dropped); where each came from."""
    launch = req.request
    values: Settings = {dest: vars(launch)[dest] for dest in OPTION_FIELDS}
    values.update({dest: vars(req)[dest] for dest in SCRIPT_FIELDS})
    values.update(template=req.template, script=launch.script, script_args=list(launch.script_args))
    return values, dict(launch.sources)

def _rendered(options) -> list[Option]:
    return [option for option in options if option.dest not in NOT_RENDERED]


def _given(values: Settings, sources: Sources, option: Option) -> str | None:
    """Where the option's value came from, or None when it is a default."""
    source = sources.get(option.dest)
    if source is None:  # not layered (--dry-run): given when it differs from its default
        return "command line" if values[option.dest] not in (None, False, option.default) else None
    return None if source == "default" else source


def _table_info(values: Settings) -> tuple[int | None, int | None]:
    """(servers, ranks) of --rank-table when it can be read now, after checking it against --profile."""
    if not values["rank_table"] or not os.path.exists(values["rank_table"]):
        if values["rank_table"]:
            say(f"script: {values['rank_table']} does not exist yet; it is read when the script runs")
        return None, None
    from launcher.plan.share import TableSource, host_share

    path = values["rank_table"]
    table = host_share(TableSource(path=path, profile=values["profile"], what=f"rank table {path}"), {},
                       every_host=True).table   # every server: no environment takes part
    return len(table.servers), table.device_count


def _drop_misfits(values: Settings, sources: Sources, base: str, command: str, shipped: bool) -> list[str]:
    """Options the template cannot use: an error when given on the command line, else dropped with a note.

    A config file or DLAUNCH_<OPTION> variable may well be meant for another command (``ranks:`` for run),
    so a lower layer's misfit is only noted.
    """
    launch_dests = launch_option_names()
    unused = set(SLURM_OPTIONS) - set(TEMPLATE_OPTIONS[base]) if shipped else set()  # yours may use any
    refused = REFUSED.get(base, {}) if shipped else {}
    notes = []
    for option in _rendered(script_options()):
        source = _given(values, sources, option)
        if source is None:
            continue
        if option.dest in launch_dests:
            why = (f"dlaunch {command} has no {option.flag}" if command not in launch_dests[option.dest]
                   else refused.get(option.dest))
        else:
            why = f"{option.flag} is for the slurm template" if option.dest in unused else None
        if why and source == "command line":
            raise UsageError(f"{option.flag} does not fit the {base} template: {why}")
        if why:
            notes.append(f"ignored {option.flag} (from {source}): {why}")
            values[option.dest] = option.default
            sources[option.dest] = "default"
    return notes


def _recorded(values: Settings, sources: Sources, command: str):
    """(the dlaunch command's words in groups, the settings with their sources, the argv that renders again)."""
    groups = [[values["script"]]]
    for option in _rendered(options_for(command)):
        words = option.words(values[option.dest]) if _given(values, sources, option) else []
        if words:
            groups.append(words)
    settings: list[dict[str, Any]] = [{"words": [values["script"]], "source": sources.get("script", "command line")}]
    remake = ["dlaunch", "script", values["template"], values["script"]]
    for option in _rendered(script_options()):
        source = _given(values, sources, option)
        words = option.words(values[option.dest]) if source else []
        if words:
            settings.append({"words": words, "source": source})
            remake += words if option.dest != "force" else []
    if values["output"] != "-":
        remake.append("--force")   # rendering it again replaces the file this one is
    if values["script_args"] or sources.get("args", "default") != "default":
        settings.append({"words": ["--", *values["script_args"]], "source": sources.get("args")})
        remake += ["--", *values["script_args"]]
    return groups, settings, remake


def _slurm_settings(values: Settings, servers: int | None, required: bool) -> dict:
    """#SBATCH values, checked: --nodes against the table's servers, every value for what sbatch can read."""
    nodes = values["nodes"]
    if nodes is not None and nodes < 1:
        raise UsageError(f"--nodes must be at least 1, not {nodes}")
    if nodes is not None and servers is not None and nodes != servers:
        has = f"{values['rank_table']} has {servers} server(s)" if values["rank_table"] else f"--nnodes is {servers}"
        raise UsageError(f"--nodes {nodes} but {has}: Slurm starts one dlaunch per node, one node per server")
    nodes = nodes or servers
    if required and nodes is None:
        raise UsageError(f"cannot read {values['rank_table']} now to count its servers: give --nodes")
    for flag, value in (("--time", values["time"]), ("--partition", values["partition"]),
                        ("--account", values["account"]), ("--job-name", values["job_name"]),
                        *(("--sbatch", s) for s in values["sbatch"] or [])):
        if value is not None:
            try:
                directive(value)
            except UsageError as exc:
                raise UsageError(f"{flag}: {exc}") from None
    job_name = values["job_name"]
    if job_name is None:
        script = values["script"]
        stem = script if values["module"] else os.path.splitext(os.path.basename(script.rstrip("/")))[0]
        job_name = re.sub(r"[^A-Za-z0-9._-]", "_", stem) or "dlaunch"
    return {"nodes": nodes, "time": values["time"], "partition": values["partition"], "account": values["account"],
            "job_name": job_name, "exclusive": not values["shared"], "signal": values["signal"],
            "requeue": values["requeue"], "sbatch": list(values["sbatch"] or [])}


PATH_OPTIONS = ("rank_table", "env_file", "hccn_conf", "output_dir", "resume")   # option values naming paths


def _absolute_paths(values: Settings, sources: Sources) -> None:
    """Paths as they mean here, written absolute: the script runs the same from any directory.

    The training script too, unless it is a module (-m) or a command found on PATH (--no-python without a
    slash).  A default --output-dir stays relative: runs land in ./dlaunch_runs where the script is run.
    """
    if not values["module"] and not (values["no_python"] and os.sep not in values["script"]):
        values["script"] = os.path.abspath(values["script"])
    for dest in PATH_OPTIONS:
        value = values.get(dest)
        if isinstance(value, str) and value and sources.get(dest, "default") != "default":
            values[dest] = os.path.abspath(value)


def _refuse_secrets(values: Settings) -> None:
    """A generated script is a file people share and commit: it never holds a secret's value."""
    from launcher.plan.environment import is_secret

    for item in values.get("env") or []:
        name = item.partition("=")[0].strip()
        if is_secret(name):
            raise UsageError(f"--env {name}=... looks like a secret, and a generated script would hold it in "
                             f"clear: put it in a file passed as --env-file (the script names the file, not the "
                             f"secret), or export {name} where the script runs (ranks inherit it)")


def _resolve(values: Settings, sources: Sources) -> dict:
    """Check the settled options against the template; the template's context."""
    from launcher import __version__

    name = values["template"]
    base = name[len(SHIPPED_PREFIX) + 1:] if name.startswith(SHIPPED_PREFIX + "/") else name
    shipped = base in SHIPPED
    command = SHIPPED[base][0] if shipped else values["launch"] or ("cluster" if values["rank_table"] else "run")
    if shipped and values["launch"] and values["launch"] != command:
        raise UsageError(f"the {base} template runs dlaunch {command}, not {values['launch']}")
    notes = _drop_misfits(values, sources, base, command, shipped)
    if not values["output"]:
        raise UsageError("dlaunch script needs -o FILE (- for stdout)")
    if command == "cluster" and not values["rank_table"] and not values.get("ssh") and not values.get("nnodes"):
        raise UsageError(f"the {name} template runs dlaunch cluster, which needs --rank-table FILE (or, without a "
                         f"rank table, --nnodes N)")
    if values["script"].startswith("-"):
        raise UsageError(f"SCRIPT {values['script']!r} looks like an option")
    _refuse_secrets(values)
    _absolute_paths(values, sources)
    groups, settings, remake = _recorded(values, sources, command)
    servers, world_size = _table_info(values)
    if values.get("nnodes") and not values["rank_table"]:
        servers = values["nnodes"][1]   # a job without a rank table: one node per --nnodes (its MAX)
    slurm = _slurm_settings(values, servers, required=base == "slurm")
    for note in notes:
        say(f"script: {note}")
    return {
        "version": __version__, "template": name, "command": command,
        "dlaunch": [sys.executable, "-m", "launcher"],
        "launch_groups": groups, "launch_options": [w for g in groups for w in g],
        "script_args": list(values["script_args"]), "settings": settings, "remake": remake,
        "rank_table": values["rank_table"], "servers": servers, "nnodes": values.get("nnodes"),
        "master_given": bool(values.get("master_addr")), "world_size": world_size, "run_id": values["run_id"],
        "output_name": "-" if values["output"] == "-" else os.path.basename(values["output"]), **slurm,
    }


# ----------------------------------------------------------------------------- rendering

def environment(template_dir: str | None = None):
    """The Jinja2 environment: user templates first, then the shipped ones (also as ``shipped/NAME``)."""
    import jinja2

    shipped = jinja2.FileSystemLoader(TEMPLATE_DIR)
    loaders = [jinja2.FileSystemLoader(template_dir)] if template_dir else []
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([*loaders, shipped, jinja2.PrefixLoader({SHIPPED_PREFIX: shipped})]),
        autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True)
    env.filters.update(q=quote, qjoin=quote_join, comment=comment, directive=directive)
    return env


def available(template_dir: str | None = None) -> list[str]:
    names = set(SHIPPED)
    if template_dir and os.path.isdir(template_dir):
        names |= {f[:-len(SUFFIX)] for f in os.listdir(template_dir) if f.endswith(SUFFIX) and not f.startswith("_")}
    return sorted(names)


def render(name: str, context: dict, template_dir: str | None = None) -> str:
    import jinja2

    env = environment(template_dir)
    try:
        # The shipped directory also holds partials and other commands' templates: only SHIPPED are scripts.
        mine = template_dir and os.path.isfile(os.path.join(template_dir, name + SUFFIX))
        if not mine and name not in SHIPPED:
            raise jinja2.TemplateNotFound(name)
        template = env.get_template(name + SUFFIX)
        return template.render(context)
    except jinja2.TemplateNotFound:
        raise UsageError(f"no template {name!r}; there are: {', '.join(available(template_dir))}"
                         + ("" if template_dir else f" (your own: --template-dir DIR with {name}{SUFFIX})")) from None
    except jinja2.TemplateSyntaxError as exc:
        raise UsageError(f"template {exc.filename or exc.name}:{exc.lineno}: {exc.message}") from None
    except jinja2.UndefinedError as exc:
        raise UsageError(f"template {name}: {exc.message}") from None


def write_script(path: str, text: str, force: bool) -> None:
    """Write an executable script by the rules of every ``-o`` (``userfiles.write_output``)."""
    from launcher.base.userfiles import write_output

    write_output(path, lambda fh: fh.write(text), force=force, executable=True)


def script(req: ScriptRequest) -> int:
    """``dlaunch script``: the settled request (``cli.script`` layers it) rendered into a script; the training
    script it will start must exist (a Slurm job would learn otherwise only after the queue's wait)."""
    from launcher.plan.make import Command, check_command

    values, sources = _settings(req)
    if values["template_dir"] and not os.path.isdir(values["template_dir"]):
        raise UsageError(f"--template-dir {values['template_dir']} is not a directory")
    context = _resolve(values, sources)
    check_command(Command(target=values["script"], module=values["module"], no_python=values["no_python"]))
    text = render(values["template"], context, values["template_dir"])
    write_script(values["output"], text, values["force"])
    if values["output"] != "-":
        where = f" on {context['nodes']} node(s)" if values["template"] == "slurm" else ""
        say(f"wrote {printable(values['output'])} (template {values['template']}: dlaunch {context['command']}"
            f"{where})")
    return 0

"""Settings in layers: command-line flags > DLAUNCH_<OPTION> environment variables > YAML files > defaults.

Every option of ``run`` and ``cluster`` can come from any layer; the layers are
derived from the argparse definitions themselves, so a new flag is settable in
YAML and the environment without a second list to keep in step.  argparse is
told that every optional's default is ``UNSET``; after parsing, an option still
``UNSET`` was not on the command line and is filled from the environment, then
the files (later files override earlier ones), then its real default.  Each
value remembers where it came from (``dlaunch config show``).

Options that exclude each other (``--ranks``/``--devices``/``--rank-table``;
``-m``/``--no-python``) are settled by layer: the highest layer that sets one
member of such a group decides, and lower layers' members are ignored.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from launcher.errors import UsageError

ENV_PREFIX = "DLAUNCH_"
# Names the rank environment contract already uses for something else: never read as options.
NOT_FROM_ENV = {"run_id", "config"}
NOT_LAYERED = {"help", "config", "dry_run"}
EXCLUSIVE = ({"ranks", "devices", "rank_table"}, {"module", "no_python"})
TRUE_WORDS, FALSE_WORDS = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_NODES = 10000
MAX_CONFIG_DEPTH = 32


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


def layerable(parser: argparse.ArgumentParser) -> None:
    """Record each optional's real default on the parser and make argparse report UNSET instead."""
    defaults = {}
    for action in parser._actions:
        if action.option_strings and action.dest not in NOT_LAYERED:
            defaults[action.dest] = action.default
            # argparse appends to the default itself, so a repeatable option's "unset" is None
            action.default = None if isinstance(action, argparse._AppendAction) else UNSET
    parser.set_defaults(_layer_defaults=defaults)


def _action_index(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in NOT_LAYERED}


def option_key(name: str) -> str:
    return name.strip().replace("-", "_")


def convert(action: argparse.Action, value, where: str):
    """``value`` (from YAML, or a string from the environment) as the option's type, or a UsageError."""
    flag = action.option_strings[-1]
    from_text = isinstance(value, str) and where.startswith("$")
    if isinstance(action, argparse._StoreTrueAction):
        if isinstance(value, bool):
            return value
        if from_text and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
            return value.strip().lower() in TRUE_WORDS
        raise UsageError(f"{where}: {flag} must be true or false, not {short(value)}")
    if isinstance(action, argparse._AppendAction):
        items = value.splitlines() if from_text else value
        if isinstance(items, str) or not isinstance(items, list):
            items = [items]
        return [_scalar(action, item, where, flag) for item in items if not (from_text and not item.strip())]
    if action.nargs == "?" and value is True:
        return action.const
    return _scalar(action, value, where, flag)


def _scalar(action: argparse.Action, value, where: str, flag: str):
    kind: Any = action.type or str
    if isinstance(value, bool) or isinstance(value, (list, dict)) or value is None:
        kinds = {int: "int", float: "float", str: "str"}
        raise UsageError(f"{where}: {flag} takes {kinds.get(kind, 'a single value')}, not {short(value)}")
    if kind is int and isinstance(value, float):
        raise UsageError(f"{where}: {flag} takes a whole number, not {short(value)}")
    try:
        converted = str(value) if kind is str else kind(value)
    except argparse.ArgumentTypeError as exc:   # an option's own type checker: its message says it all
        raise UsageError(f"{where}: {flag}: {exc}") from None
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {flag} takes {kind.__name__}, not {short(value)}") from None
    if action.choices is not None and converted not in action.choices:
        raise UsageError(f"{where}: {flag} must be one of {', '.join(map(str, action.choices))}, not "
                         f"{short(value)}")
    return converted


def short(value) -> str:
    """A value quoted in a message: its repr cut short (a message never expands a whole hostile document)."""
    import reprlib

    shown = reprlib.Repr()
    shown.maxlevel, shown.maxlist, shown.maxdict, shown.maxstring, shown.maxother = 2, 4, 4, 40, 40
    shown.maxlong = 40
    return shown.repr(value)


def _check_size(root, path: str) -> None:
    """Refuse a document whose nodes, counted as aliases expand them, exceed what any config needs.

    This bounds a "billion laughs" document (anchors referring to anchors) before anything expands it.
    """
    seen, stack = 0, [(root, 0)]
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_CONFIG_NODES or depth > MAX_CONFIG_DEPTH:
            raise UsageError(f"{path}: too large or too deeply nested for a config (at most {MAX_CONFIG_NODES} "
                             f"values and {MAX_CONFIG_DEPTH} levels, anchors counted as they expand)")
        children = node.value if isinstance(node.value, list) else []
        for child in children:
            if isinstance(child, tuple):
                stack.extend((part, depth + 1) for part in child)
            else:
                stack.append((child, depth + 1))


def read_file(path: str, actions: dict[str, argparse.Action]) -> dict[str, tuple[object, str]]:
    """A YAML config as {dest: (value, "file:line")}; unknown keys and wrong types name key, file and line."""
    import yaml

    from launcher.userfiles import read_text

    text = read_text(path, "config", MAX_CONFIG_BYTES)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise UsageError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to be a config") from None
    if root is None:
        return {}
    _check_size(root, path)
    if not isinstance(root, yaml.MappingNode):
        raise UsageError(f"{path}:{root.start_mark.line + 1}: a config is a mapping of option: value")
    values = {}
    for key_node, value_node in root.value:
        where = f"{path}:{key_node.start_mark.line + 1}"
        key = option_key(str(key_node.value))
        if key not in actions and key not in ("script", "args"):
            known = ", ".join(sorted(k.replace("_", "-") for k in actions))
            raise UsageError(f"{where}: unknown option {short(key_node.value)} (known: script, args, {known})")
        try:
            value = yaml.safe_load(yaml.serialize(value_node))
        except yaml.YAMLError as exc:   # e.g. a !!python/object tag, which a safe loader refuses
            raise UsageError(f"{where}: {key_node.value}: {getattr(exc, 'problem', None) or 'not a plain value'}"
                             f" (configs hold plain YAML values only)") from None
        except ValueError as exc:       # e.g. an integer of thousands of digits
            raise UsageError(f"{where}: {key_node.value}: unusable value ({str(exc)[:80]})") from None
        if key == "script":
            if not isinstance(value, str):
                raise UsageError(f"{where}: script must be a path or module name, not {short(value)}")
        elif key == "args":
            if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
                raise UsageError(f"{where}: args must be a list of script arguments")
            value = [str(v) for v in value]
        else:
            value = convert(actions[key], value, where)
        values[key] = (value, where)
    return values


def read_environ(environ, actions: dict[str, argparse.Action]) -> dict[str, tuple[object, str]]:
    values = {}
    for dest, action in actions.items():
        name = ENV_PREFIX + dest.upper()
        if dest not in NOT_FROM_ENV and name in environ:
            values[dest] = (convert(action, environ[name], f"${name}"), f"${name}")
    return values


def _given(args: argparse.Namespace, dest: str, action: argparse.Action) -> bool:
    value = getattr(args, dest)
    return value is not UNSET and not (value is None and isinstance(action, argparse._AppendAction))


def apply_layers(args: argparse.Namespace, parser: argparse.ArgumentParser, environ=os.environ,
                 script_args_given: bool = False) -> dict[str, str]:
    """Fill every UNSET option of ``args`` from env, files and defaults; returns {dest: source}."""
    actions = _action_index(parser)
    defaults = args._layer_defaults
    flags = {dest: (getattr(args, dest), "command line") for dest in actions if _given(args, dest, actions[dest])}
    if getattr(args, "script", None) is not None:
        flags["script"] = (args.script, "command line")
    if script_args_given:
        flags["args"] = (args.script_args, "command line")
    files: dict[str, tuple[object, str]] = {}
    for path in args.config or []:
        files.update(read_file(path, actions))
    layers = [flags, read_environ(environ, actions), files]
    for group in EXCLUSIVE:
        for index, layer in enumerate(layers):
            if group & set(layer):
                for lower in layers[index + 1:]:
                    for dest in group:
                        lower.pop(dest, None)
                break
    sources = {}
    for dest in [*actions, "script", "args"]:
        for layer in layers:
            if dest in layer:
                value, source = layer[dest]
                break
        else:
            value, source = (defaults.get(dest), "default") if dest in actions else (None, "default")
        if dest == "args":
            args.script_args = list(value or [])
        else:
            setattr(args, dest, value)
        sources[dest] = source
    return sources

"""Settings in layers: command-line flags > DLAUNCH_<OPTION> environment variables > YAML files > defaults.

Every option is declared once, as an ``Option`` (``settings.launch`` declares run's and cluster's,
``launcher.scripts.render`` its own); the parsers, these layers and generated scripts are all built from the
declarations, so a new flag is settable in YAML and the environment without a second list to keep in
step. Parsers give every layered option the default ``argparse.SUPPRESS``: an option absent from what
the command line gave (``launcher.cli`` passes it as a plain dict) was not on it, and is filled from the
environment, then the files (later files override earlier ones), then its declared default. Each value
remembers where it came from (``dlaunch config show``); ``launcher.cli.request`` turns run's and cluster's
values into a typed ``LaunchRequest``. The flags a ``cluster --ssh`` head sends its hosts are the options
declared ``to_hosts``, written back by ``Option.words``.

Options that exclude each other (``--ranks``/``--devices``/``--rank-table``; ``-m``/``--no-python``)
share an ``exclusive`` name and are settled by layer: the highest layer that sets one member of such a
group decides, and lower layers' members are ignored.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from launcher.contract import ENV_PREFIX
from launcher.errors import UsageError

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Any

TRUE_WORDS, FALSE_WORDS = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_NODES = 10000
MAX_CONFIG_DEPTH = 32


VALUE, FLAG, LIST, OPTIONAL = "value", "flag", "list", "optional"   # how an option takes its value


@dataclass(frozen=True)
class Option:
    """One option, declared once: its flags, how it takes a value, its default, its help.

    ``kind``: VALUE (``--x V``), FLAG (``--x``, true when given), LIST (``--x V`` repeatable) or OPTIONAL
    (``--x`` alone means ``const``, ``--x V`` means V). ``exclusive`` names a group of options of which one
    may be given on the command line; ``rivals`` a group settled by layer (the highest layer that sets one
    member decides), which defaults to ``exclusive``; ``group`` is the help section. A ``negatable`` FLAG
    also takes ``--no-x`` (false), so a flag can turn off what a config, a variable or a switch such as
    ``--fault-tolerant`` turned on. ``layered`` options
    also come from DLAUNCH_<NAME> (unless ``from_env`` is false: names the rank contract uses) and YAML.
    ``spell`` writes a settled value back as the flag's text (default ``str``), for generated scripts and
    the hosts of ``cluster --ssh``; ``to_hosts`` options are the ones every host of that job must share.
    """

    flags: tuple[str, ...]
    help: str
    kind: str = VALUE
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    choices: tuple | None = None
    const: Any = None
    exclusive: str | None = None
    rivals: str | None = None   # settled by layer with these options though argparse allows both (default: exclusive)
    group: str | None = None
    layered: bool = True
    from_env: bool = True
    spell: Callable[[Any], str] | None = None
    to_hosts: bool = False
    negatable: bool = False

    @property
    def dest(self) -> str:
        return self.flags[-1].lstrip("-").replace("-", "_")

    @property
    def flag(self) -> str:
        return self.flags[-1]

    def add_to(self, container) -> None:
        """Add this option to an argparse parser or group (public argparse only)."""
        default = argparse.SUPPRESS if self.layered else self.default
        extra: dict[str, Any] = {"dest": self.dest, "help": self.help, "default": default}
        if self.kind == FLAG:
            action = argparse.BooleanOptionalAction if self.negatable else "store_true"
            container.add_argument(*self.flags, action=action, **extra)
            return
        extra.update(type=self.type, choices=self.choices, metavar=self.metavar)
        if self.kind == LIST:
            container.add_argument(*self.flags, action="append", **extra)
        elif self.kind == OPTIONAL:
            container.add_argument(*self.flags, nargs="?", const=self.const, **extra)
        else:
            container.add_argument(*self.flags, **extra)

    def words(self, value) -> list[str]:
        """The command-line words that give this option ``value`` (``[]`` when it needs none)."""
        def pair(value) -> list[str]:
            text = self.spell(value) if self.spell is not None else str(value)
            return [f"{self.flag}={text}"] if text.startswith("-") else [self.flag, text]

        if self.kind == FLAG:
            return [self.flag] if value else [f"--no-{self.flag[2:]}"] if self.negatable and value is False else []
        if self.kind == LIST:
            return [word for item in value or [] for word in pair(item)]
        if value is None:
            return []
        if self.kind == OPTIONAL and value == self.const:
            return [self.flag]
        return pair(value)


def add_options(parser: argparse.ArgumentParser, options, titles: dict[str, Any] | None = None) -> None:
    """Add declared options to ``parser``: exclusive ones in their mutually exclusive groups, grouped ones
    under their section (``titles`` maps a group name to an existing argument group)."""
    groups: dict[str, Any] = dict(titles or {})
    exclusive: dict[str, Any] = {}
    for option in options:
        container = parser
        if option.group is not None:
            container = groups.setdefault(option.group, parser.add_argument_group(option.group))
        if option.exclusive is not None:
            container = exclusive.setdefault(option.exclusive, container.add_mutually_exclusive_group())
        option.add_to(container)


def option_key(name: str) -> str:
    return name.strip().replace("-", "_")


def convert(option: Option, value, where: str):
    """``value`` (from YAML, or a string from the environment) as the option's type, or a UsageError."""
    flag = option.flag
    from_text = isinstance(value, str) and where.startswith("$")
    if option.kind == FLAG:
        if isinstance(value, bool):
            return value
        if from_text and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
            return value.strip().lower() in TRUE_WORDS
        raise UsageError(f"{where}: {flag} must be true or false, not {short(value)}")
    if option.kind == LIST:
        items = value.splitlines() if from_text else value
        if isinstance(items, str) or not isinstance(items, list):
            items = [items]
        return [_scalar(option, item, where, flag) for item in items if not (from_text and not item.strip())]
    if option.kind == OPTIONAL and value is True:
        return option.const
    return _scalar(option, value, where, flag)


def _scalar(option: Option, value, where: str, flag: str):
    kind: Any = option.type or str
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
    if option.choices is not None and converted not in option.choices:
        raise UsageError(f"{where}: {flag} must be one of {', '.join(map(str, option.choices))}, not "
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


def read_file(path: str, actions: dict[str, Option]) -> dict[str, tuple[object, str]]:
    """A YAML config as {dest: (value, "file:line")}; unknown keys and wrong types name key, file and line."""
    import yaml

    from launcher.base.userfiles import read_text

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
        if any("\0" in item for item in (value if isinstance(value, list) else [value]) if isinstance(item, str)):
            raise UsageError(f"{where}: {key_node.value}: holds a NUL byte (\\0), which no argument or "
                             f"environment variable can carry")
        values[key] = (value, where)
    return values


def read_environ(environ, options: dict[str, Option]) -> dict[str, tuple[object, str]]:
    values = {}
    for dest, option in options.items():
        name = ENV_PREFIX + dest.upper()
        if option.from_env and name in environ:
            values[dest] = (convert(option, environ[name], f"${name}"), f"${name}")
    return values


def apply_layers(given: Mapping[str, Any], declared, environ: Mapping[str, str],
                 script_args_given: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, sources) of every layered option of ``declared``, ``script`` and ``args`` (the script's
    arguments): ``given`` is what the command line gave (dest -> value; ``script``, ``script_args``,
    ``config``), the rest comes from the environment, the ``--config`` files and the declared defaults."""
    options = {option.dest: option for option in declared if option.layered}
    flags = {dest: (given[dest], "command line") for dest in options if dest in given}
    if given.get("script") is not None:
        flags["script"] = (given["script"], "command line")
    if script_args_given:
        flags["args"] = (given.get("script_args"), "command line")
    files: dict[str, tuple[object, str]] = {}
    broken: list[UsageError] = []
    for path in given.get("config") or []:
        try:
            files.update(read_file(path, options))
        except UsageError as exc:   # read the other files too: every broken one is reported at once
            broken.append(exc)
    if broken:
        raise UsageError(str(broken[0]), also=tuple(str(exc) for exc in broken[1:]))
    layers = [flags, read_environ(environ, options), files]
    exclusive: dict[str, set[str]] = {}
    for option in options.values():
        group = option.rivals or option.exclusive
        if group:
            exclusive.setdefault(group, set()).add(option.dest)
    for members in exclusive.values():
        for index, layer in enumerate(layers):
            if members & set(layer):
                for lower in layers[index + 1:]:
                    for dest in members:
                        lower.pop(dest, None)
                break
    values: dict[str, Any] = {}
    sources = {}
    for dest in [*options, "script", "args"]:
        for layer in layers:
            if dest in layer:
                value, source = layer[dest]
                break
        else:
            value, source = (options[dest].default, "default") if dest in options else (None, "default")
            if isinstance(value, list):
                value = list(value)   # a declared default is never shared, let alone appended to
        values[dest] = list(value or []) if dest == "args" else value
        sources[dest] = source
    return values, sources

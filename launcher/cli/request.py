"""Where the Namespace of ``run`` and ``cluster`` ends: settled by layer, checked, turned into a ``LaunchRequest``.

Like torchrun's ``config_from_args``: what argparse gave goes in, a frozen, typed request comes out, and
nothing below ``launcher.cli`` sees the Namespace.  The fronts (``cli.fronts.msrun``, ``cli.fronts.torchrun``) and the
host launcher a head starts (``cluster --from-head``) come through ``settled_request`` too, with the values
they decided in place of a command line.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import fields

from launcher.errors import UsageError
from launcher.settings.launch import declared_defaults, options_for
from launcher.settings.layers import apply_layers, convert
from launcher.settings.request import OPTION_FIELDS, LaunchRequest

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    Request = TypeVar("Request")


def typed(cls: type[Request], args: argparse.Namespace) -> Request:
    """A command's frozen request (a dataclass of the module that does the work) from its Namespace: the
    fields of ``cls``, by name; everything else argparse holds stays here."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})  # type: ignore[arg-type]


def settled_request(command: str, given: Mapping[str, Any], script_args_given: bool, environ=None,
                    usage: str | None = None, **extra: Any) -> LaunchRequest:
    """``command``'s request from what its command line gave (dest -> value, ``script``, ``script_args``):
    the layers fill the rest (``settings.layers.apply_layers``); a script is required by then.  ``extra`` sets the
    fields no flag gives (a table's text, the head's variables)."""
    values, sources = apply_layers(given, options_for(command), os.environ if environ is None else environ,
                                   script_args_given)
    if not values["script"]:
        resume = values.get("resume")
        if resume and (resume.endswith(".py") or os.path.isfile(resume)):
            raise UsageError(f"no SCRIPT given: --resume took {resume} as its run directory (its value is "
                             f"optional); put --resume after the script: dlaunch {command} {resume} ... --resume",
                             usage=usage)
        raise UsageError(f"dlaunch {command}: no SCRIPT given (on the command line or as script: in a config)",
                         usage=usage)
    layered = {**{k: v for k, v in given.items() if k not in values}, **values}   # unlayered ones (--dry-run)
    return request_of(command, layered, sources=sources, **extra)


def request_of(command: str, values: Mapping[str, Any], **extra: Any) -> LaunchRequest:
    """The request of ``command`` from settled values (dest -> value; ``script``, ``args``): an option the
    command does not take keeps its declared default; lists become tuples (the request is frozen)."""
    settled = {**declared_defaults(), **{k: v for k, v in values.items() if k in OPTION_FIELDS}}
    for dest in ("config", "env"):
        settled[dest] = tuple(settled[dest] or ())
    if settled["forward_signals"] is not None:
        settled["forward_signals"] = tuple(settled["forward_signals"])
    return LaunchRequest(command=command, script=values["script"], script_args=tuple(values.get("args") or ()),
                         **settled, **extra)


def request_from_args(args: argparse.Namespace, script_args_given: bool, environ=None,
                      usage: str | None = None) -> LaunchRequest:
    """The request of a parsed ``run``/``cluster`` command line."""
    return settled_request(args.command, vars(args), script_args_given, environ, usage)


def front_request(front: str, command: str, script: str, script_args: list[str], flags: Mapping[str, Any],
                  checked: Mapping[str, Any] | None = None, **extra: Any) -> LaunchRequest:
    """The request a front (msrun, torchrun) means: ``flags`` are dest -> value as that command's flags would
    give them (text, or a typed value), checked by the option's own type as a flag's value would be;
    ``checked`` values the front's own rules allow where dlaunch's flag would not (msrun's negative
    --cluster_time_out: wait forever).  Both then count as the command line, under the ``DLAUNCH_*`` layers."""
    declared = {option.dest: option for option in options_for(command)}
    given = {dest: convert(declared[dest], value, front) for dest, value in flags.items()}
    given.update(checked or {})
    return settled_request(command, {**given, "script": script, "script_args": script_args}, True, **extra)


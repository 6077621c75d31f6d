"""``--fault-tolerant``: what a job of many devices should have, settled for this host, and one line saying it.

NVIDIA's ft_launcher is fault tolerant by being used, torchrun by one flag; here the features of the last
releases (restarts with the no-progress rule, the survivors' window, warm restarts, learned hang timeouts,
the health gate) are each off by default, because a plain job keeps failing fast. The switch turns on each
one this host can use, unless its own flag, ``DLAUNCH_*`` variable or config key gave a value (an explicit
value wins, ``--no-hang-learn``, ``--warm-restarts none`` or ``--max-restarts 0`` included):

- ``--max-restarts 10``: a fault every few hours is normal on hundreds of devices, and a day's job sees more
  than torchrun's usual 3; ``--restarts-without-progress`` (3) still stops a loop that saves no new step;
- ``--survivor-window 10``: every window waits only for the ranks that watch for notices (the first
  ``launcher.checkpoint.notice()`` of an attempt, as ``save_on_notice`` asks, writes ``notice.watched``;
  with ``--notice-signal`` every survivor), ending as soon as each saved or exited, so a script that never
  asks is stopped at once, as without a window (``execute/local/notice.py``); a script whose saves take
  longer gives its own;
- ``--memory-ckpt``: each rank's saves into memory dlaunch owns, persisted by dlaunch after every attempt
  (a rank that never saves there costs an empty directory);
- ``--warm-restarts torch`` where the ranks' Python (dlaunch's own, ``Options.python``) can import torch and
  the job restarts as a whole (standbys serve ``--restart-policy job`` only); found without importing it;
- ``--hang-learn``, bounded by ``--hang-timeout`` (default 1800 s);
- ``--health-gate`` where npu-smi, nvidia-smi or hccn_tool is present (without one the gate checks storage
  alone, and a CPU job would pay for it at every start).

What is host-dependent (the import, the tools) is decided by each host for itself: a ``cluster --ssh`` head
sends ``--fault-tolerant`` and the values that were given, and each host settles the rest (``settle.host_argv``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from launcher.settings.request import LaunchRequest

MAX_RESTARTS = 10
SURVIVOR_WINDOW = 10.0
WARM_MODULES = "torch"
NO_MODULES = ("", "none", "off")   # --warm-restarts none: cold restarts, whatever the switch says

# the options the switch settles, in the order its line names them
SETTLED = ("max_restarts", "restarts_without_progress", "survivor_window", "memory_ckpt", "warm_restarts",
           "hang_learn", "hang_timeout", "health_gate")


@dataclass(frozen=True)
class FaultTolerance:
    """What ``--fault-tolerant`` decided on this host: dest -> value for each option it turned on, and the line."""

    settled: Mapping[str, Any] = field(default_factory=dict)
    line: str = ""


def warm_modules(value: str | None) -> str | None:
    """--warm-restarts as the plan takes it: None for cold restarts (none given, or ``none``)."""
    return None if value is None or value.strip().lower() in NO_MODULES else value


def torch_importable() -> bool:
    """Whether this Python (the ranks' own) finds torch, without importing it (milliseconds, not seconds)."""
    from importlib.util import find_spec

    try:
        return find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def fault_tolerance(args: LaunchRequest, *, restart_policy: str, torch: bool, tools: Sequence[str],
                    hang_bound: float) -> FaultTolerance:
    """The switch's settings for this host: ``restart_policy`` as settled, ``torch`` whether the ranks' Python
    finds it, ``tools`` the device tools here (``host.health.device_tools``), ``hang_bound`` the learned
    timeouts' bound when --hang-timeout is not given."""
    if not args.fault_tolerant:
        return FaultTolerance()
    from launcher.settings.launch import options_for

    flags = {option.dest: option for option in options_for(args.command)}

    def given(dest: str) -> bool:
        return args.source(dest) != "default"

    settled: dict[str, Any] = {}
    on: list[str] = []
    off: list[str] = []
    if not given("max_restarts"):
        settled["max_restarts"] = MAX_RESTARTS
        limit = args.restarts_without_progress
        on.append(f"--max-restarts {MAX_RESTARTS}" + (f" (exit 93 after {limit} failed in a row without a new "
                                                         f"checkpoint)" if limit else ""))
    if not given("survivor_window"):
        settled["survivor_window"] = SURVIVOR_WINDOW
        listeners = not args.notice_signal   # a signal's handler may save without asking: every survivor waits
        on.append(f"--survivor-window {SURVIVOR_WINDOW:g} (" + ("for the ranks that ask for a notice; " if listeners
                                                                 else "") + "ends once each saved or exited)")
    if not given("memory_ckpt"):
        settled["memory_ckpt"] = True
        on.append("--memory-ckpt (each rank's DLAUNCH_MEMORY_DIR and memory saves, persisted by dlaunch)")
    if not given("warm_restarts"):
        why = ("the script is no Python program (--no-python)" if args.no_python else
               f"standbys serve --restart-policy job only, this job's is {restart_policy}"
               if restart_policy != "job" else
               "the ranks' Python cannot import torch" if not torch else "")
        if why:
            off.append(f"--warm-restarts ({why})")
        else:
            settled["warm_restarts"] = WARM_MODULES
            on.append(f"--warm-restarts {WARM_MODULES}")
    if not given("hang_learn"):
        settled["hang_learn"] = True
        bound = args.hang_timeout if args.hang_timeout is not None else hang_bound
        on.append(f"--hang-learn (at most {bound:g} s)")
    if not given("health_gate"):
        if tools or args.health_check:
            settled["health_gate"] = True
            on.append(f"--health-gate ({', '.join(tools) or '--health-check'})")
        else:
            off.append("--health-gate (no npu-smi, nvidia-smi or hccn_tool here)")
    kept = [spelled(flags[dest], vars(args)[dest]) for dest in SETTLED if given(dest) and dest in flags]
    line = ("--fault-tolerant: " + ("turned on " + ", ".join(on) if on else "turned nothing on")
            + ("; left off " + ", ".join(off) if off else "")
            + ("; as given: " + ", ".join(kept) if kept else ""))
    return FaultTolerance(settled, line)


def spelled(option, value) -> str:
    """A given value as its flag says it (``--survivor-window 60``, ``--no-hang-learn``)."""
    if isinstance(value, float):
        return f"{option.flag} {value:g}"
    return " ".join(option.words(value)) or option.flag

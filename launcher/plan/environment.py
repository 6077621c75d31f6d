"""The per-rank environment contract, and masking secrets wherever env is shown.

One function, ``rank_environment``, decides every variable dlaunch sets for a
rank, so that the MindSpore/HCCL names (``DEVICE_ID``, ``RANK_ID``,
``RANK_SIZE``, ``RANK_TABLE_FILE``), the torchrun names (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE`` ... exactly as torchrun sets them) and
dlaunch's own (``DLAUNCH_*``) can never drift apart.  The rest of the parent's
environment is inherited at spawn time, not copied into the plan.
"""

from __future__ import annotations

import functools
import os
import re

from launcher.base.signals import STOP_SIGNAL_NAMES
from launcher.contract import (
    CKPT_DIR_ENV,
    MEMORY_BUDGET_ENV,
    MEMORY_DIR_ENV,
    MEMORY_PERSIST_ENV,
    MEMORY_SLOTS_ENV,
    RANK_DIR_ENV,
    RUN_DIR_ENV,
    RUN_ID_ENV,
)

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION", re.IGNORECASE)
# PASS, PWD, PW as a whole part of a name (DB_PASS, SMTP_PWD), but not the shell's PWD/OLDPWD (directories)
SECRET_PART = re.compile(r"(?:^|_)(?:PASS|PWD|PW)(?:_|$)(?<!^PWD)", re.IGNORECASE)
ASSIGNMENT = re.compile(r"(^|[\s,;'\"])([A-Za-z_][A-Za-z0-9_]*)=([^\s,;'\"]*)")
MASK = "****"
ROLE_NAME = "default"


def rank_environment(*, rank: int, local_rank: int, world_size: int, local_world_size: int, group_rank: int,
                     group_world_size: int, device_id: int, cuda_visible: str | None, rank_table_file: str,
                     master_addr: str, master_port: int, run_id: str, run_dir: str, rank_dir: str, ckpt_dir: str,
                     error_file: str, restart_count: int, max_restarts: int, inherited: dict,
                     job_name: str | None = None) -> dict[str, str]:
    """The variables dlaunch sets for one rank (inherited ones excluded, except where it fills a default).

    ``device_id`` is what the rank's runtime calls its device (``host.devices.DeviceView.device_id``) and
    ``cuda_visible`` its ``CUDA_VISIBLE_DEVICES`` (None: not set), both worked out by the plan from the
    devices this host allows.

    Against torchrun 2.13's worker environment, two variables differ on purpose:
    ``TORCHELASTIC_USE_AGENT_STORE`` is "False" because dlaunch hosts no
    rendezvous store (torch's ``env://`` then lets rank 0 host it; "True" would
    make every rank wait for an agent's store that does not exist), and
    ``MASTER_ADDR`` is 127.0.0.1 on one host, not "localhost", which can resolve
    to ::1 first where the store listens on IPv4 only.
    """
    env = {
        # MindSpore / HCCL
        "DEVICE_ID": str(device_id),
        "RANK_ID": str(rank),
        "RANK_SIZE": str(world_size),
        "RANK_TABLE_FILE": rank_table_file,
        # torchrun (torch.distributed.elastic)
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "GROUP_RANK": str(group_rank),
        "GROUP_WORLD_SIZE": str(group_world_size),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": ROLE_NAME,
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
        "TORCHELASTIC_RUN_ID": job_name or run_id,   # torchrun's --rdzv-id as given, every node and launch
        "TORCHELASTIC_ERROR_FILE": error_file,
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": STOP_SIGNAL_NAMES,
        # dlaunch
        RUN_ID_ENV: run_id,
        RUN_DIR_ENV: run_dir,
        RANK_DIR_ENV: rank_dir,
        CKPT_DIR_ENV: ckpt_dir,
    }
    if cuda_visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible
    if "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in inherited:
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"  # as torchrun: a failed NCCL collective raises, not hangs
    if "OMP_NUM_THREADS" not in inherited and local_world_size > 1:
        env["OMP_NUM_THREADS"] = "1"  # as torchrun: N ranks x all cores each would thrash the CPU
    if "PYTHONUNBUFFERED" not in inherited:
        env["PYTHONUNBUFFERED"] = "1"  # so output streams live instead of arriving in 8 KiB lumps
    return env


MEMORY_OWNER_ENV = "DLAUNCH_MEMORY_OWNER"   # checkpoint.memory.OWNER_ENV: which process of a rank writes its slots


def memory_area(root: str, run_id: str) -> str:
    """This host's memory area (checkpoint/tier.py): named by the run and this launcher's pid (the plan is made
    in the launcher's process), so a dead launcher's area is told from a live one's."""
    from launcher.checkpoint.tier import area_name

    return os.path.join(root, area_name(run_id, os.getpid()))


def memory_environment(area: str, rank: int, budget: int | None, persist_every: int) -> dict[str, str]:
    """--memory-ckpt: the rank's directory and slots in the area, its budget and how often a save is persisted."""
    from launcher.checkpoint.tier import files_dir, slots_dir

    env = {MEMORY_DIR_ENV: files_dir(area, rank), MEMORY_SLOTS_ENV: slots_dir(area, rank),
           MEMORY_PERSIST_ENV: str(persist_every), MEMORY_OWNER_ENV: ""}   # the rank claims it, not an inherited one
    if budget is not None:
        env[MEMORY_BUDGET_ENV] = str(budget)
    return env


def mindspore_worker_environment(*, rank: int, world_size: int, master_addr: str, master_port: int,
                                 topo_timeout: float) -> dict[str, str]:
    """What ``--ms-scheduler`` adds for a rank: msrun's worker contract, the node id pinned to dlaunch's rank.

    ``MS_NODE_ID`` makes MindSpore's rank equal dlaunch's (without it ranks are numbered by arrival); the
    caller drops ``RANK_TABLE_FILE``, which would make ``init()`` take the rank-table path and rewrite RANK_ID.
    """
    return {**_mindspore_cluster(world_size, master_addr, master_port, topo_timeout),
            "MS_ROLE": "MS_WORKER", "MS_NODE_ID": str(rank)}


def mindspore_scheduler_environment(*, world_size: int, master_addr: str, master_port: int, topo_timeout: float,
                                    run_id: str, run_dir: str, scheduler_dir: str, inherited: dict) -> dict[str, str]:
    """The scheduler's environment, as msrun gives it: the cluster's size and address, RANK_ID 0, RANK_SIZE; no
    node id and no device (it is not a rank).  ``DLAUNCH_RANK_DIR`` is its own directory, by which ``status``
    knows its process."""
    env = {**_mindspore_cluster(world_size, master_addr, master_port, topo_timeout), "MS_ROLE": "MS_SCHED",
           "RANK_ID": "0", "RANK_SIZE": str(world_size), RUN_ID_ENV: run_id, RUN_DIR_ENV: run_dir,
           RANK_DIR_ENV: scheduler_dir}
    if "PYTHONUNBUFFERED" not in inherited:
        env["PYTHONUNBUFFERED"] = "1"
    return env


MINDIO_OPTIONS = ("TTP:1", "UCE:1", "ARF:1", "TSP:1", "HCCE:1")   # MS_ENABLE_TFT options that need MindIO
MINDIO_PORT_OFFSET = 3   # MS_TFT_PORT by default: MASTER_PORT + 3 (+1 the job port, +2 TorchFT's lighthouse)


# rankhook/sitecustomize.py's directory: first on a Python rank's PYTHONPATH (execute/local/raised.py)
RAISE_HOOK_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "execute", "local",
                              "rankhook")


def hooked_python_path(inherited: str | None) -> str:
    """A Python rank's PYTHONPATH: dlaunch's hook first (it takes itself off again), then the rank's own."""
    return RAISE_HOOK_DIR + (os.pathsep + inherited if inherited else "")


def mindio_environment(master_addr: str, master_port: int, inherited: dict) -> dict[str, str]:
    """Where MindIO's controller listens when ``MS_ENABLE_TFT`` asks for MindIO (mindspore/utils/utils.py reads
    ``MS_TFT_IP`` and, without a default, ``MS_TFT_PORT``): rank 0's host, unless the user (or MindCluster)
    said; nothing without such an option."""
    wanted = inherited.get("MS_ENABLE_TFT", "")
    if not any(option in wanted for option in MINDIO_OPTIONS):
        return {}
    return {name: value for name, value in (("MS_TFT_IP", master_addr),
                                            ("MS_TFT_PORT", str(master_port + MINDIO_PORT_OFFSET)))
            if name not in inherited}


def mindspore_recovery_environment(run_dir: str, inherited: dict) -> dict[str, str]:
    """MindSpore's recovery (``MS_ENABLE_RECOVERY=1``): ``MS_RECOVERY_PATH`` one directory per run, the same for
    every process and every restart (MindSpore up to 2.4 keeps its recovery metadata there; 2.10 reads none),
    unless the user gave one."""
    return {} if "MS_RECOVERY_PATH" in inherited else {"MS_RECOVERY_PATH": f"{run_dir}/ms_recovery"}


def _mindspore_cluster(world_size: int, master_addr: str, master_port: int, topo_timeout: float) -> dict[str, str]:
    return {"MS_WORKER_NUM": str(world_size), "MS_SCHED_HOST": master_addr, "MS_SCHED_PORT": str(master_port),
            "MS_TOPO_TIMEOUT": f"{topo_timeout:g}"}


@functools.lru_cache(maxsize=4096)
def is_secret(name: str) -> bool:
    """Whether a variable (or flag) name looks secret; cached: a 1,024-rank launch asks of the same ~100 names
    for every rank."""
    return bool(SECRET_NAME.search(name) or SECRET_PART.search(name))


def mask_value(name: str, value: str) -> str:
    """``value`` as it may be shown: masked whole when ``name`` looks secret, and inside it every
    ``KEY=VALUE`` whose KEY looks secret (``DLAUNCH_ENV="X_TOKEN=..."``, an ``--env`` list in a config)."""
    if is_secret(name) and value:
        return MASK
    if "=" not in value:
        return value
    return ASSIGNMENT.sub(lambda m: m[1] + m[2] + "=" + (MASK if is_secret(m[2]) and m[3] else m[3]), value)


def masked(env: dict[str, str]) -> dict[str, str]:
    """A copy safe to write to env.log or print: secret-looking values replaced by ****.  Most environments
    (every rank's in plan.json) have nothing to mask: asked first, which costs a third less than masking."""
    if any(map(is_secret, env)) or any("=" in value for value in env.values()):
        return {k: mask_value(k, v) for k, v in env.items()}
    return dict(env)


def masked_argv(argv) -> list[str]:
    """A command line as it may be shown: ``--api-token=X``, ``API_KEY=X`` and the word after a secret-looking
    flag (``--password X``) masked; everything else as it is."""
    shown, hide_next = [], False
    for word in map(str, argv):
        flag, eq, value = word.partition("=")
        name = flag.lstrip("-").replace("-", "_")
        if hide_next:
            shown.append(MASK)
        elif word.startswith("-") and eq and is_secret(name):
            shown.append(f"{flag}={MASK}")
        else:
            shown.append(mask_value("", word))
        hide_next = word.startswith("-") and not eq and is_secret(name)
    return shown


class EnvLog:
    """env.log's format (KEY=VALUE lines, sorted, secrets masked) for every rank of one launch.

    Every rank of a launch sets the same names, so the sorted order of a rank's lines is worked out once per
    set of names: the inherited lines between two of the rank's own are joined into one constant piece, and
    a rank's text is those pieces interleaved with its own lines, instead of a sort of every line per rank."""

    def __init__(self, inherited: dict[str, str]):
        self._lines = {k: f"{k}={v}\n" for k, v in masked(inherited).items()}
        self._layouts: dict[tuple[str, ...], tuple[list[str], list[str], set[str]]] = {}

    def text(self, env: dict[str, str]) -> str:
        names = tuple(env)
        layout = self._layouts.get(names)
        if layout is None:
            layout = self._layouts[names] = self._layout(names)
        pieces, own, secret = layout
        parts = pieces.copy()
        parts[1::2] = [f"{k}={mask_value(k, v) if k in secret or '=' in v else v}\n"
                       for k, v in zip(own, map(env.__getitem__, own))]
        return "".join(parts)

    def _layout(self, names: tuple[str, ...]) -> tuple[list[str], list[str], set[str]]:
        """The rank's own names in sorted order, around them the constant runs of inherited lines
        (``[run0, slot, run1, slot, ...]``, each slot to be filled with one of the rank's lines), and which
        of the names look secret (the others' values need masking only where they hold ``KEY=VALUE``)."""
        own = sorted(set(names))
        pieces: list[str] = []
        run: list[str] = []
        mine = set(own)
        for name in sorted(self._lines.keys() | mine):
            if name in mine:
                pieces += ["".join(run), ""]
                run = []
            else:
                run.append(self._lines[name])
        pieces.append("".join(run))
        return pieces, own, {name for name in own if is_secret(name)}

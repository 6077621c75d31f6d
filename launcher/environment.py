"""The per-rank environment contract, and masking secrets wherever env is shown.

One function, ``rank_environment``, decides every variable dlaunch sets for a
rank, so that the MindSpore/HCCL names (``DEVICE_ID``, ``RANK_ID``,
``RANK_SIZE``, ``RANK_TABLE_FILE``), the torchrun names (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE`` ... exactly as torchrun sets them) and
dlaunch's own (``DLAUNCH_*``) can never drift apart.  The rest of the parent's
environment is inherited at spawn time, not copied into the plan.
"""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION", re.IGNORECASE)
MASK = "****"
ROLE_NAME = "default"


def rank_environment(*, rank: int, local_rank: int, world_size: int, local_world_size: int, group_rank: int,
                     group_world_size: int, device_id: int, local_devices: list[int], rank_table_file: str,
                     master_addr: str, master_port: int, run_id: str, run_dir: str, rank_dir: str, ckpt_dir: str,
                     error_file: str, restart_count: int, max_restarts: int, inherited: dict) -> dict[str, str]:
    """The variables dlaunch sets for one rank (inherited ones excluded, except where it fills a default).

    ``CUDA_VISIBLE_DEVICES`` lists this host's devices in local-rank order, as
    DeepSpeed does, so a torch script that picks ``cuda:LOCAL_RANK`` lands on the
    physical device the rank table names; MindSpore keeps using ``DEVICE_ID``.
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
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_ERROR_FILE": error_file,
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, local_devices)),
        # dlaunch
        "DLAUNCH_RUN_ID": run_id,
        "DLAUNCH_RUN_DIR": run_dir,
        "DLAUNCH_RANK_DIR": rank_dir,
        "DLAUNCH_CKPT_DIR": ckpt_dir,
    }
    if "OMP_NUM_THREADS" not in inherited and local_world_size > 1:
        env["OMP_NUM_THREADS"] = "1"  # as torchrun: N ranks x all cores each would thrash the CPU
    if "PYTHONUNBUFFERED" not in inherited:
        env["PYTHONUNBUFFERED"] = "1"  # so output streams live instead of arriving in 8 KiB lumps
    return env


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def masked(env: dict[str, str]) -> dict[str, str]:
    """A copy safe to write to env.log or print: values of secret-looking names replaced by ****."""
    return {k: (MASK if is_secret(k) and v else v) for k, v in env.items()}


def format_env(env: dict[str, str]) -> str:
    """KEY=VALUE lines, sorted, secrets masked: the env.log format."""
    return "".join(f"{k}={v}\n" for k, v in sorted(masked(env).items()))

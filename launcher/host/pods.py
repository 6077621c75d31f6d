"""What a scheduler's pod says about the job, read from the variables and files its operator gives it.

Kubernetes operators start one container per node ("pod") and tell it its place in the job through its
environment; dlaunch in such a pod needs no flag of its own.  Each operator's variables, as its source
sets them (tests/data/operators.json cites the repository, path and commit of each):

* Kubeflow training-operator's PyTorchJob (``pkg/controller.v1/pytorch/envvar.go``, ``master.go``) and
  Kubeflow Trainer's torch plugin: ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``,
  ``PET_MASTER_ADDR``/``PET_MASTER_PORT`` (torchrun's own defaults), beside ``MASTER_ADDR``,
  ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` (the pod's index).
* Volcano's pytorch plugin (``pkg/controllers/job/plugins/distributed-framework/pytorch``): only
  ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` (the number of pods) and ``RANK`` (the pod's index).
* Ascend's ascend-operator (MindCluster ``AscendJob``, ``component/ascend-operator/pkg/controllers/v1/env.go``):
  the rank table ``hccl.json`` it writes for the job (status ``initializing`` until every pod is placed),
  and for PyTorch ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` (the pod's index), ``WORLD_SIZE`` and
  ``LOCAL_WORLD_SIZE`` (devices), ``LOCAL_RANK="0,1,...,7"`` (a list, never a rank's own); for MindSpore
  ``MS_SCHED_HOST``, ``MS_SCHED_PORT``, ``MS_ROLE``, ``MS_NODE_RANK``, ``MS_LOCAL_WORKER``,
  ``MS_WORKER_NUM``.  Its samples add ``XDL_IP`` (the node's address, ``status.hostIP``) and ``POD_IP``.

Inside a rank of dlaunch or torchrun (``DLAUNCH_RANK_DIR`` or ``TORCHELASTIC_RUN_ID`` set) RANK and
WORLD_SIZE are that rank's, never a pod's.  ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``LOCAL_WORLD_SIZE``
are also what a user exports for torch by hand, so they say "pod" only beside what no shell sets for torch:
ascend-operator's ``MINDX_TASK_ID`` (setCommonEnv, the job's uid), or for the four-variable pytorch plugins a
Kubernetes container (``KUBERNETES_SERVICE_HOST``, which the kubelet puts in every container:
kubernetes ``pkg/kubelet/kubelet_pods.go`` makeEnvironmentVariables) or Volcano's ``VC_TASK_INDEX``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.base.border import is_number
from launcher.contract import RANK_DIR_ENV
from launcher.errors import UsageError

# Where ascend-operator's samples mount the job's rank table (ConfigMap rings-config-<job>, key hccl.json).
ASCEND_RANK_TABLE = "/user/serverid/devindex/config/hccl.json"
ASCEND_RANK_TABLE_ENV = "DLAUNCH_ASCEND_RANK_TABLE_DEFAULT"   # tests put a temporary path in its place
ADDRESS_VARIABLES = ("POD_IP", "XDL_IP")                        # the samples' downward-API addresses
KUBERNETES_VARIABLES = ("KUBERNETES_SERVICE_HOST", "VC_TASK_INDEX")   # a container of Kubernetes, of Volcano


@dataclass(frozen=True)
class Pod:
    """This pod's place in the job, as its operator said it; None where the operator says nothing."""

    operator: str
    said: str                      # the variables it came from, for the one line dlaunch prints
    node_rank: int | None = None
    nnodes: int | None = None
    nproc: str | None = None       # ranks per pod: a number or torchrun's "auto"
    master_addr: str | None = None
    master_port: int | None = None
    rank_table: str | None = None
    ms_role: str | None = None


def _number(environ: Mapping[str, str], name: str, low: int = 0) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    if not is_number(text) or len(text) > 9 or int(text) < low:
        raise UsageError(f"{name}={text[:40]!r} (set by the job's scheduler): expected a whole number of at "
                         f"least {low}")
    return int(text)


def _port(environ: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = _number(environ, name, 1)
        if value is not None:
            if value > 65535:
                raise UsageError(f"{name}={value}: not a TCP port")
            return value
    return None


def rank_table_path(environ: Mapping[str, str]) -> str | None:
    """The job's rank table as the environment names it: RANK_TABLE_FILE (MindSpore's name, which the
    seeds and the operators' samples export), else ascend-operator's mount path when it exists."""
    named = environ.get("RANK_TABLE_FILE", "").strip()
    if named:
        return named
    mounted = environ.get(ASCEND_RANK_TABLE_ENV) or ASCEND_RANK_TABLE
    return mounted if os.path.exists(mounted) else None


def _said(environ: Mapping[str, str], names) -> str:
    return ", ".join(f"{name}={environ[name][:60]}" for name in names if environ.get(name, "").strip())


def detect(environ: Mapping[str, str]) -> Pod | None:
    """This process's pod, if an operator started it; None elsewhere (and inside a dlaunch rank)."""
    if environ.get(RANK_DIR_ENV) or environ.get("TORCHELASTIC_RUN_ID"):   # a launcher's rank: not a pod's values
        return None
    if environ.get("MS_SCHED_HOST") and environ.get("MS_NODE_RANK", "").strip():
        return _ascend_mindspore(environ)
    by_hand = all(environ.get(name, "").strip() for name in ("MASTER_ADDR", "WORLD_SIZE", "RANK"))
    if by_hand and environ.get("LOCAL_WORLD_SIZE") and environ.get("MINDX_TASK_ID", "").strip():
        return _ascend_pytorch(environ)
    if environ.get("PET_NNODES", "").strip():
        return _kubeflow(environ)
    if by_hand and any(environ.get(name, "").strip() for name in KUBERNETES_VARIABLES):
        return _volcano(environ)
    return None


def _ascend_pytorch(environ) -> Pod:
    local = _number(environ, "LOCAL_WORLD_SIZE", 1)
    world = _number(environ, "WORLD_SIZE", 1)
    nnodes = world // local if world and local and world % local == 0 else None
    return Pod("Ascend's operator (AscendJob, PyTorch)",
               _said(environ, ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")),
               node_rank=_number(environ, "RANK"), nnodes=nnodes, nproc=str(local),
               master_addr=environ["MASTER_ADDR"].strip(), master_port=_port(environ, "MASTER_PORT"),
               rank_table=rank_table_path(environ))


def _ascend_mindspore(environ) -> Pod:
    local = _number(environ, "MS_LOCAL_WORKER", 1)
    world = _number(environ, "MS_WORKER_NUM", 1)
    nnodes = world // local if world and local and world % local == 0 else None
    return Pod("Ascend's operator (AscendJob, MindSpore)",
               _said(environ, ("MS_ROLE", "MS_NODE_RANK", "MS_WORKER_NUM", "MS_LOCAL_WORKER", "MS_SCHED_HOST",
                               "MS_SCHED_PORT")),
               node_rank=_number(environ, "MS_NODE_RANK"), nnodes=nnodes, nproc=str(local) if local else None,
               master_addr=environ["MS_SCHED_HOST"].strip(), master_port=_port(environ, "MS_SCHED_PORT"),
               rank_table=rank_table_path(environ), ms_role=environ.get("MS_ROLE", "").strip() or None)


def _kubeflow(environ) -> Pod:
    nnodes_text = environ["PET_NNODES"].strip()
    low, _, high = nnodes_text.partition(":")
    if high and low.strip() != high.strip():
        raise UsageError(f"PET_NNODES={nnodes_text[:40]} asks for an elastic job (between {low} and {high} pods); "
                         f"dlaunch runs a fixed number of pods: give the job a fixed size")
    nnodes = _number({"PET_NNODES": low}, "PET_NNODES", 1)
    node_rank = _number(environ, "PET_NODE_RANK")
    if node_rank is None:
        node_rank = _number(environ, "RANK")
    return Pod("Kubeflow (PyTorchJob or TrainJob)",
               _said(environ, ("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR",
                               "PET_MASTER_PORT")),
               node_rank=node_rank, nnodes=nnodes, nproc=environ.get("PET_NPROC_PER_NODE", "").strip() or None,
               master_addr=(environ.get("PET_MASTER_ADDR") or environ.get("MASTER_ADDR") or "").strip() or None,
               master_port=_port(environ, "PET_MASTER_PORT", "MASTER_PORT"))


def _volcano(environ) -> Pod:
    return Pod("Volcano" if environ.get("VC_TASK_INDEX") is not None else "a PyTorchJob pod",
               _said(environ, ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")),
               node_rank=_number(environ, "RANK"), nnodes=_number(environ, "WORLD_SIZE", 1),
               master_addr=environ["MASTER_ADDR"].strip(), master_port=_port(environ, "MASTER_PORT"))


def own_addresses(environ: Mapping[str, str]) -> set[str]:
    """This pod's addresses as the operator's samples give them (POD_IP, XDL_IP)."""
    return {environ[name].strip() for name in ADDRESS_VARIABLES if environ.get(name, "").strip()}

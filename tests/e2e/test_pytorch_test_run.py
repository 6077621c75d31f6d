"""PyTorch's own torchrun tests (test/distributed/launcher/test_run.py), unchanged, run against ``dlaunch torchrun``.

The upstream file is not kept in this repository (see docs/torchrun.md, "PyTorch's own tests"): point
``DLAUNCH_PYTORCH_TEST_RUN`` at a checkout's ``test/distributed/launcher/test_run.py`` (its ``bin/`` beside it),
or place that directory at ``.pytorch_upstream/test/distributed/launcher/`` in this clone. Without it the module
is skipped, saying so.

The adaptation layer is all here and is small: the upstream tests call ``launch.main(args)`` in-process
(``import torch.distributed.run as launch``); we replace the module's ``launch`` with a shim whose ``main`` runs
``dlaunch torchrun ARGS`` as a subprocess (this clone's dlaunch, ``tests.launching.dlaunch_argv``) and turns its
outcome into what torchrun's ``main`` gives: nothing on exit 0; ``ValueError`` for a refused command line (exit 2:
torchrun raises ``ValueError`` for ``--no-python --module``, an unknown ``--nproc-per-node``, an unknown
``--logs-specs``); ``ChildFailedError`` when workers failed. The children's output goes to ``sys.stdout`` /
``sys.stderr`` so ``redirect_stdout`` captures it as it captures torchrun's. Tests that exercise torchrun's Python
internals (mocks of its agent, rendezvous handler, event recorder or the test process's device count; its parsing
helpers) are skipped with that reason, each listed in docs/torchrun.md.
"""

import importlib.util
import os
import subprocess
import sys
import types
import unittest
from pathlib import Path

import pytest

from tests.launching import ROOT, dlaunch_argv, dlaunch_env

UPSTREAM = Path(os.environ.get("DLAUNCH_PYTORCH_TEST_RUN")
                or ROOT / ".pytorch_upstream" / "test" / "distributed" / "launcher" / "test_run.py")
if not UPSTREAM.is_file():
    pytest.skip(f"PyTorch's test_run.py not found at {UPSTREAM} (set DLAUNCH_PYTORCH_TEST_RUN)",
                allow_module_level=True)
_DEPS = ROOT / ".pytorch_upstream" / "site"   # `pip install --target` of what torch's test utilities import
if _DEPS.is_dir():
    sys.path.insert(0, str(_DEPS))
pytest.importorskip("expecttest", reason="torch.testing._internal.common_utils needs expecttest (pip install "
                    "--target .pytorch_upstream/site expecttest)")

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure  # noqa: E402

_cwd = {"dir": None}   # the current test's tmp dir: dlaunch's run directories go there, never into the repo


def dlaunch_torchrun_main(args):
    """torchrun's ``main(args)``, carried out by ``dlaunch torchrun`` in a subprocess."""
    done = subprocess.run(dlaunch_argv("torchrun", *args), cwd=_cwd["dir"], env=dlaunch_env(), capture_output=True,
                          text=True, timeout=120)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode == 0:
        return
    if done.returncode == 2 and "dlaunch: run directory" not in done.stderr:   # refused before any rank started
        raise ValueError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "exit 2")
    failure = ProcessFailure(local_rank=0, pid=-1, exitcode=done.returncode, error_file="")
    raise ChildFailedError(name=" ".join(args), failures={0: failure})


def _load_upstream():
    spec = importlib.util.spec_from_file_location("pytorch_test_run", UPSTREAM)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pytorch_test_run"] = module
    spec.loader.exec_module(module)
    module.launch = types.SimpleNamespace(main=dlaunch_torchrun_main)
    return module


upstream = _load_upstream()

INTERNALS = "not applicable: tests torchrun's Python internals"
NOT_APPLICABLE = {
    "test_min_max_nodes_parse": f"{INTERNALS} (launch.parse_min_max_nnodes)",
    "test_launch_shutdown": f"{INTERNALS} (mocks LocalElasticAgent and the rendezvous handler)",
    "test_launch_elastic_agent_raise_exception": f"{INTERNALS} (mocks LocalElasticAgent.run in the test's process)",
    "test_launch_elastic_worker_raise_exception": f"{INTERNALS} (asserts torch.distributed.elastic.events.record "
                                                  "was called in the test's process)",
    "test_nproc_gpu_launch_configurations": f"{INTERNALS} (mocks torch.cuda's device count in the test's process)",
    "test_nproc_xpu_launch_configurations": f"{INTERNALS} (mocks torch.xpu's device count in the test's process)",
}
REFUSED = {   # torchrun flags dlaunch refuses (docs/torchrun.md, "Refused"): the whole list
    "test_virtual_local_rank": "refused: --virtual-local-rank (docs/torchrun.md); also needs 2 GPUs",
}


class DlaunchElasticLaunchTest(upstream.ElasticLaunchTest):
    """Upstream's ElasticLaunchTest, every launch by ``dlaunch torchrun``."""

    @pytest.fixture(autouse=True)
    def _run_directories_in(self, tmp_path):
        """Run directories in the test's tmp dir; the environment restored after (upstream's tests export PET_*
        and TEST_SENTINEL_PARENT and never remove them, which would reach later tests' dlaunch torchrun)."""
        saved = dict(os.environ)
        _cwd["dir"] = str(tmp_path)
        yield
        _cwd["dir"] = None
        os.environ.clear()
        os.environ.update(saved)


for _name, _reason in {**NOT_APPLICABLE, **REFUSED}.items():
    setattr(DlaunchElasticLaunchTest, _name, unittest.skip(_reason)(getattr(upstream.ElasticLaunchTest, _name)))


def test_worker_failure_is_child_failed_error(tmp_path):
    """What test_launch_elastic_worker_raise_exception checks of the command line (its events.record mock
    aside): a failing worker makes ``main`` raise ChildFailedError."""
    _cwd["dir"] = str(tmp_path)
    script = str(ROOT / "tests" / "clients" / "pytorch_launcher" / "test_script.py")
    with pytest.raises(ChildFailedError):
        dlaunch_torchrun_main(["--nnodes=1", "--nproc-per-node=2", "--max-restarts=0", script, "--fail"])

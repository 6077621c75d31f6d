"""What a worker sees under torchrun and under dlaunch, side by side in one test (torch 2.13, 2 ranks).

Every variable torchrun sets must be set by dlaunch with the same value, except those whose values are a
launcher's own (ports, run ids, paths of its files) and the documented deliberate differences
(``environment.rank_environment``'s docstring).
"""

import json
import os
import subprocess
import sys

from tests.launching import ROOT, dlaunch_argv

DUMP = str(ROOT / "tests" / "programs" / "dump_env.py")
OWN_VALUES = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}
DELIBERATE = {"MASTER_ADDR": ("localhost", "127.0.0.1"), "TORCHELASTIC_USE_AGENT_STORE": ("True", "False")}


def dumped(directory):
    return {rank: json.loads((directory / f"env_{rank}.json").read_text()) for rank in range(2)}


def test_worker_environment_matches_torchrun(tmp_path):
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "PYTHONPATH")}
    under_torchrun, under_dlaunch = tmp_path / "torchrun", tmp_path / "dlaunch"
    under_torchrun.mkdir()
    under_dlaunch.mkdir()
    torchrun = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", DUMP],
                              cwd=under_torchrun, env=base, capture_output=True, text=True, timeout=120)
    assert torchrun.returncode == 0, torchrun.stderr
    ours = subprocess.run(dlaunch_argv("run", DUMP, "--ranks", "2", "--output-dir", tmp_path / "runs"),
                          cwd=under_dlaunch, env={**base, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120)
    assert ours.returncode == 0, ours.stderr
    theirs, mine = dumped(under_torchrun), dumped(under_dlaunch)
    for rank in range(2):
        added = {k: v for k, v in theirs[rank].items() if base.get(k) != v}
        assert {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RESTART_COUNT"} <= set(added)
        for name, value in added.items():
            assert name in mine[rank], f"torchrun sets {name}={value!r}; dlaunch does not"
            if name in OWN_VALUES:
                continue
            expected = DELIBERATE.get(name, (value, value))
            assert (value, mine[rank][name]) == expected, f"{name}: torchrun {value!r}, dlaunch {mine[rank][name]!r}"


def test_a_rank_that_destroys_its_process_group_exits_with_its_own_code_every_time(tmp_path):
    """Issue 38, item 13: rank 1 all-reduces, calls ``destroy_process_group`` and exits 7: dlaunch's exit code and
    the summary's root cause say 7 in every run (without the call, torch's own teardown aborts 2 to 4 runs of 8
    with 134, under torchrun too: tests/programs/exit_after_allreduce.py says why)."""
    from tests.launching import latest_run, run_dlaunch

    program = ROOT / "tests" / "programs" / "exit_after_allreduce.py"
    for attempt in range(4):
        out = tmp_path / f"runs{attempt}"
        result = run_dlaunch("run", program, "--ranks", "2", "--output-dir", out, "--", "--destroy", cwd=tmp_path)
        assert result.returncode == 7, (attempt, result.stderr)
        cause = json.loads((latest_run(out) / "summary.json").read_text())["root_cause"]
        assert (cause["rank"], cause["exit_code"], cause["signal"]) == (1, 7, None), (attempt, cause)

"""The buddy copy (issue 48 item 2): a lost host's ranks resume, on the spare that takes its place, from the
step its buddy host kept, with no filesystem shared between the hosts.

Three hosts on 127.0.0.2-4 started by hand, two ranks each, each with its own output directory (nothing shared):
real gloo training (tests/programs/spare_train.py) saving every step into memory (``--memory-ckpt``), dlaunch
persisting steps 3, 6, 9, ... Host 127.0.0.3's dlaunch is SIGKILLed: its memory and its disk are gone with it; its
buddy, host 127.0.0.2, kept its persisted steps, and the spare 127.0.0.4 fetches them before the job agrees on
the step to resume from. Without the buddy the spare would see no step of the lost host's ranks and the job
would start again from step 1 (the sums would still add up, but the resume would be None).
"""

import json
import os
import re
import signal
import time

import pytest

from tests.e2e.test_spares import HOSTS, STEPS, TRAIN, write_pool
from tests.launching import free_port, kill_run, processes_of_run, run_dlaunch, start_dlaunch, wait_until

PAUSE = 0.2


@pytest.fixture
def hosts(tmp_path):
    procs = {}
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    kill_run("buddycopy")


def run_dir(tmp_path, index):
    return tmp_path / f"host{index}" / "runs" / "buddycopy"


def steps(tmp_path, index, rank):
    path = run_dir(tmp_path, index) / f"rank_{rank:03d}" / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_spare_resumes_a_lost_hosts_ranks_from_the_step_its_buddy_kept(tmp_path, hosts):
    table = write_pool(tmp_path / "rt.json")
    port = free_port(HOSTS[0], span=3)   # MASTER_PORT, the job's port, the buddy port after it
    root = tmp_path / "memory"
    root.mkdir()
    for index in range(3):
        cwd = tmp_path / f"host{index}"
        cwd.mkdir()
        hosts[index] = start_dlaunch(
            "cluster", TRAIN, "--rank-table", table, "--rank-start", 2 * index, "--run-id", "buddycopy",
            "--output-dir", cwd / "runs", "--master-port", port, "--profile", "structure", "--spares", "1",
            "--grace-period", "1", "--host-timeout", "1", "--join-timeout", "30", "--memory-ckpt",
            "--memory-root", root, "--memory-persist-every", "3", "--", STEPS, PAUSE,
            cwd=cwd, env={"SPARE_TRAIN_MEMORY": "1"})
    assert wait_until(lambda: len(steps(tmp_path, 1, 2)) >= 8, timeout=90), "host 1's ranks never trained"
    os.kill(hosts[1].pid, signal.SIGKILL)
    hosts[1].communicate()
    lost_at = time.time()
    results = {index: hosts[index].communicate(timeout=120) for index in (0, 2)}
    for index in (0, 2):
        assert hosts[index].returncode == 0, results[index][1]
    spare_err = results[2][1]
    assert re.search(r"fetched \d+ step file\(s\) of lost host 127\.0\.0\.3's ranks from its buddy 127\.0\.0\.2",
                     spare_err), spare_err
    for rank, index in ((0, 0), (1, 0), (2, 2), (3, 2)):   # ranks 2 and 3 now on the spare
        trained = steps(tmp_path, index, rank)
        assert trained[-1]["step"] == STEPS and trained[-1]["value"] == STEPS * 4, trained[-1]   # nothing twice
        resumed = [entry for entry in trained if entry["resumed"]]
        assert resumed, (f"rank {rank} never resumed", results[0][1][-3000:], spare_err[-3000:])
        step = int(resumed[0]["resumed"].split("_")[1])
        assert step >= 3 and step % 3 == 0 and resumed[0]["step"] == step + 1   # a persisted step, not a fresh start
    lost_steps = [entry["step"] for entry in steps(tmp_path, 1, 2) if entry["time"] <= lost_at]
    print(f"the lost host's ranks reached step {max(lost_steps)}; the job resumed after step {step}")
    # the lost host's area (its dlaunch was SIGKILLed) is freed by prune; nothing of the others' is left
    pruned = run_dlaunch("prune", "--memory-root", root, cwd=tmp_path)
    assert pruned.returncode == 0, pruned.stderr
    assert [name for name in os.listdir(root) if name.startswith("dlaunch-")] == []
    assert wait_until(lambda: processes_of_run("buddycopy") == [], timeout=10)

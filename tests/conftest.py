"""Shared paths and helpers for the suite."""

import os
import signal
from pathlib import Path

import pytest

from tests.launching import TEST_OWNER_ENV, run_dlaunch

ROOT = Path(__file__).resolve().parent.parent
RANK_TABLES = ROOT / "rank_tables"

# Third-party clients that tests/e2e/test_clients.py launches: programs, not tests.
collect_ignore_glob = ["clients/*"]


def dlaunch(*args, cwd=None, env=None, timeout=60, input=None):
    """Run the real CLI in a fresh interpreter, as a user would (tests.launching.run_dlaunch, a shorter wait)."""
    return run_dlaunch(*args, cwd=cwd, env=env, timeout=timeout, input=input)


@pytest.fixture(scope="session", autouse=True)
def interruptible_children():
    """Processes the tests start take Ctrl-C as under a terminal. A suite started in the background of a
    non-interactive shell (``cmd &``, nohup) inherits SIGINT ignored, and an ignored signal stays ignored across
    exec: every dlaunch would then ignore the SIGINT its tests send. A Python handler here resets to the default
    in each child at exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(autouse=True)
def test_owner(monkeypatch):
    """Each test marks what it starts (launching.processes_of_run): its cleanup kills its own ranks only."""
    monkeypatch.setenv(TEST_OWNER_ENV, os.urandom(8).hex())


@pytest.fixture
def run_cli():
    return dlaunch


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Caches the examples keep (synthetic data) go to the session's temporary directory, never ~/.cache."""
    yield from _session_variable("XDG_CACHE_HOME", tmp_path_factory.mktemp("xdg-cache"))


def _session_variable(name: str, value: Path):
    """``name`` set to ``value`` in this process's environment (every dlaunch a test starts inherits it) for the
    session, then restored."""
    saved = os.environ.get(name)
    os.environ[name] = str(value)
    yield value
    if saved is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = saved


SHARED_MEMORY = "/dev/shm"


@pytest.fixture(scope="session", autouse=True)
def memory_root(tmp_path_factory):
    """The tests' memory tier lives in the session's temporary directory, never /dev/shm: every dlaunch a test
    starts inherits ``DLAUNCH_MEMORY_ROOT`` (a test that needs its own passes --memory-root)."""
    yield from _session_variable("DLAUNCH_MEMORY_ROOT", tmp_path_factory.mktemp("memory-root"))


def _memory_areas(root: Path, base: Path) -> set[Path]:
    """Memory areas (``dlaunch-*``) in the tests' root, and those in /dev/shm whose run directory is one of this
    session's (other sessions on the machine may hold their own there)."""
    found = {path for path in root.glob("dlaunch-*")}
    for path in Path(SHARED_MEMORY).glob("dlaunch-*") if os.path.isdir(SHARED_MEMORY) else ():
        try:
            if (path / "run_dir").read_text().startswith(str(base)):
                found.add(path)
        except OSError:
            continue
    return found


@pytest.fixture(autouse=True)
def no_memory_area_left(memory_root, tmp_path_factory):
    """Every test leaves as many memory areas as it found: dlaunch frees its area at every exit, and the next
    dlaunch of the run or ``dlaunch prune`` frees one a SIGKILLed dlaunch left (issue 48)."""
    import shutil

    base = tmp_path_factory.getbasetemp()
    before = _memory_areas(memory_root, base)
    yield
    left = _memory_areas(memory_root, base) - before
    for path in left:   # freed, so one test's leak is not the next one's failure
        shutil.rmtree(path, ignore_errors=True)
    assert not left, f"memory areas left behind: {sorted(map(str, left))}"


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run directory laid out as dlaunch makes it, this process being rank 0 of 1."""
    ckpt = tmp_path / "run" / "rank_000" / "ckpt"
    ckpt.mkdir(parents=True)
    for name in ("DLAUNCH_RESUME_FROM", "DLAUNCH_RESUME_STEP", "RANK", "RANK_ID", "WORLD_SIZE", "RANK_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DLAUNCH_CKPT_DIR", str(ckpt))
    monkeypatch.setenv("DLAUNCH_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


# The suite's longest files (over 10 s each on 2 cores, from a full run's junit durations, longest first), started
# first: with --dist loadfile a long file drawn last keeps one worker busy while the others have nothing left to do.
LONGEST_FIRST = ("test_hang_silent_ranks.py", "test_torchft_groups.py", "test_spares.py", "test_stragglers.py",
                 "test_clients.py", "test_hf_clm.py", "test_job_port_hostile.py", "test_hang_learned.py",
                 "test_mindspore_checkpoints.py", "test_resume.py", "test_ms_scheduler.py", "test_cluster_ssh.py",
                 "test_memory_keeper.py", "test_warm_restarts.py", "test_checkpoint_async.py", "test_raised.py",
                 "test_scripts.py", "test_restart_alone.py", "test_run.py", "test_border_cases.py",
                 "test_torchrun_parity.py", "test_job_hosts.py", "test_lifetime_daemons.py", "test_ckpttool.py",
                 "test_metrics.py", "test_gasp_collective.py", "test_check_network.py",
                 "test_train_cifar_example.py", "test_slurm.py", "test_hangs.py", "test_hostile_input.py",
                 "test_report.py", "test_lifetime.py", "test_torchrun_front.py", "test_buddy_copy.py",
                 "test_watch.py", "test_memory_tier.py", "test_pods.py", "test_protocol.py", "test_survivors.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))   # stable: order kept within

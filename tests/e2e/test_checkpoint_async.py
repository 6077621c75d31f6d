"""Background saves (``checkpoint.save(..., async_save=True)``) with real files, real processes, a real dlaunch:
the file holds the state as of return, failures surface, and nothing in flight is lost at the end
(exit, SIGKILL, SIGTERM from dlaunch, SIGTERM while the main thread is stuck in native code)."""

import contextlib
import copy
import os
import re
import signal
import subprocess

import pytest
import torch

from launcher import checkpoint
from launcher.checkpoint import stage as ckptstage
from launcher.checkpoint import writer as ckptwriter
from launcher.observe import ckpt as ckpttool
from tests.e2e.test_checkpoint import python, sigterm_when_ready
from tests.launching import ROOT, latest_run, run_dlaunch, summary, wait_until
from tests.unit.checkpoint.test_api import ckpt_of, labels

SAVER = str(ROOT / "tests" / "programs" / "async_saver.py")


@pytest.fixture(autouse=True)
def settled():
    """No test leaves a save in flight, a failure unreported or the SIGTERM guard installed."""
    yield
    checkpoint.wait_for_saves()


def assert_equal_states(a, b):
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_equal_states(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_equal_states(x, y)
    else:
        assert a == b


def test_the_file_holds_the_state_as_it_was_when_save_returned(run, monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    base = torch.arange(10.0)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "seen": [1, 2],
             "window": base[2:5], "base": base}
    expected = copy.deepcopy(state)
    monkeypatch.setenv("DLAUNCH_CKPT_TEST_DELAY", "0.2")   # a slow disk: the write is surely still going on
    handle = checkpoint.save(state, 1, 10, async_save=True)
    assert not handle.done() and labels(run) == []          # not listed before it is whole
    # training goes on at once: every tensor changes in place, the Python values too
    with torch.no_grad():
        for tensor in [*model.state_dict().values(), *optimizer.state_dict()["state"][0].values(), base]:
            tensor.add_(1)
    state["seen"].append(3)
    optimizer.param_groups[0]["lr"] = 0.5
    assert handle.wait() == str(ckpt_of(run) / "ckpt-1_10.pt")
    assert handle.done() and handle.exception() is None and labels(run) == ["ckpt-1_10"]
    loaded = torch.load(handle.path, weights_only=True)
    assert_equal_states(loaded, expected)
    assert loaded["model"]._metadata == expected["model"]._metadata
    assert loaded["window"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    assert sorted(os.listdir(ckpt_of(run))) == ["ckpt-1_10.pt"]


def test_buffers_are_reused_from_save_to_save_within_their_bound():
    state = {"big": torch.ones(1000), "small": torch.ones(10), "view": None}
    state["view"] = state["big"][10:20]       # shares big's storage: one buffer for both
    pool = ckptstage.BufferPool(limit=1 << 20)
    first = ckptstage.capture(state, pool)
    assert sorted(buffer.numel() for buffer, _ in first.buffers) == [40, 4000]
    addresses = {buffer.data_ptr() for buffer, _ in first.buffers}
    pool.give_back(first.buffers)
    second = ckptstage.capture(state, pool)
    assert {buffer.data_ptr() for buffer, _ in second.buffers} == addresses
    assert second.state["view"].untyped_storage().data_ptr() == second.state["big"].untyped_storage().data_ptr()
    # a pool bound to 4000 bytes keeps the big buffer only; the small one is made for that save alone
    bounded = ckptstage.BufferPool(limit=4000)
    snapshot = ckptstage.capture(state, bounded)
    assert [buffer.numel() for buffer, _ in snapshot.buffers] == [4000] and bounded.kept == 4000
    assert torch.equal(snapshot.state["small"], state["small"])


def test_a_synchronous_save_of_cpu_tensors_writes_the_state_itself():
    """Only device tensors are staged for a synchronous save: a CPU state reaches the writer untouched (the
    same objects, no copy), and ``capture(devices_only=True)`` passes CPU tensors and other values through
    (tests/e2e/test_cuda_job.py checks the device side on a GPU)."""
    state = {"w": torch.ones(100), "nested": [torch.zeros(3), ("label", 7)], "meta": {"epoch": 1}}
    assert not ckptstage.on_device(state)
    seen = []
    assert ckptwriter.store_now(state, lambda snapshot: seen.append(snapshot) or "written") == "written"
    assert seen[0].state is state and seen[0].locations == {} and seen[0].buffers == []
    captured = ckptstage.capture(state, ckptstage.BufferPool(limit=1 << 20), devices_only=True)
    assert captured.state["w"] is state["w"] and captured.state["nested"][0] is state["nested"][0]
    assert captured.state["meta"] == state["meta"] and captured.buffers == []
    assert ckptstage.on_device({"a": [1, {"b": (torch.ones(1, device="meta"),)}]})


@contextlib.contextmanager
def full_disk(tmp_path, monkeypatch):
    """A directory on a 1 MiB tmpfs where this test may mount one (root), else the writer's ENOSPC hook."""
    directory = tmp_path / "small-disk"
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(directory)],
                             capture_output=True).returncode == 0
    try:
        yield directory, (lambda: None) if mounted else (lambda: monkeypatch.setenv("DLAUNCH_CKPT_TEST_ENOSPC", "1"))
    finally:
        monkeypatch.delenv("DLAUNCH_CKPT_TEST_ENOSPC", raising=False)
        if mounted:
            subprocess.run(["umount", str(directory)], check=True)


def test_a_failed_background_write_surfaces_on_the_next_call(tmp_path, monkeypatch, capsys):
    with full_disk(tmp_path, monkeypatch) as (directory, fill):
        where = {"directory": str(directory)}
        checkpoint.save({"w": torch.ones(10)}, 1, 1, **where)
        fill()
        too_big = {"w": torch.ones(1 << 20)}                      # 4 MiB
        handle = checkpoint.save(too_big, 1, 2, async_save=True, **where)
        with pytest.raises((OSError, RuntimeError)) as failure:   # the next save raises it, whichever kind
            checkpoint.save({"w": torch.ones(10)}, 1, 3, async_save=True, **where)
        assert any("ckpt-1_2.pt failed" in note for note in failure.value.__notes__)
        assert handle.done() and handle.exception() is failure.value
        assert sorted(os.listdir(directory)) == ["ckpt-1_1.pt"]   # the earlier one intact, nothing partial
        # raised once: a failure its handle's wait() raised is not raised again by the next save
        handle = checkpoint.save(too_big, 1, 4, async_save=True, **where)
        with pytest.raises((OSError, RuntimeError)):
            handle.wait()
        monkeypatch.delenv("DLAUNCH_CKPT_TEST_ENOSPC", raising=False)
        checkpoint.save({"w": torch.ones(10)}, 1, 5, **where)
        assert sorted(os.listdir(directory)) == ["ckpt-1_1.pt", "ckpt-1_5.pt"]
        # one nobody waited for is printed when the interpreter exits
        fill()
        checkpoint.save(too_big, 1, 6, async_save=True, **where)
        ckptwriter.writer().at_exit()
        assert "the background save of " + str(directory / "ckpt-1_6.pt") + " failed" in capsys.readouterr().err


def test_exit_waits_for_a_save_in_flight(run):
    proc = python("""
        import os
        import torch
        from launcher import checkpoint
        os.environ["DLAUNCH_CKPT_TEST_DELAY"] = "0.5"
        checkpoint.save({"a": torch.ones(100), "b": torch.ones(5)}, 1, 10, async_save=True)
        print("returned", flush=True)
    """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out == "returned\n", err
    assert labels(run) == ["ckpt-1_10"]
    assert torch.equal(checkpoint.load(str(ckpt_of(run) / "ckpt-1_10.pt"))["a"], torch.ones(100))


def test_sigkill_during_a_background_write_keeps_the_previous_checkpoint(run):
    proc = python("""
        import os
        import torch
        from launcher import checkpoint
        checkpoint.save({"w": torch.ones(1000)}, 1, 10)
        os.environ["DLAUNCH_CKPT_TEST_DELAY"] = "60"
        handle = checkpoint.save({"w": torch.zeros(1000), "b": torch.zeros(5)}, 2, 20, async_save=True)
        print("returned", flush=True)
        handle.wait()
    """)
    try:
        assert proc.stdout.readline() == "returned\n", proc.stderr.read()
        assert wait_until(lambda: any(n.startswith(".ckpt-2_20.pt~") for n in os.listdir(ckpt_of(run))))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    names = os.listdir(ckpt_of(run))
    temps = [name for name in names if name.startswith(".ckpt-2_20.pt~")]
    assert len(temps) == 1 and set(names) == {"ckpt-1_10.pt", *temps}   # the partial file stays hidden
    assert labels(run) == ["ckpt-1_10"]
    assert [(row["label"], row["complete"]) for row in ckpttool.list_run(str(run))] == [("ckpt-1_10", True)]
    assert torch.equal(checkpoint.load(str(ckpt_of(run) / "ckpt-1_10.pt"))["w"], torch.ones(1000))


@pytest.mark.parametrize("when", ["during the write", "after the write"])
def test_sigterm_while_the_main_thread_is_stuck_in_native_code(run, when):
    # TCPStore.wait blocks in C++: Python runs no signal handler until it returns (120 s).  SIGTERM
    # during a background write must still end the process, by SIGTERM, once the file is whole;
    # after the write, at once, as it would without background saves.
    proc = python(f"""
        import datetime, os
        import torch, torch.distributed as dist
        from launcher import checkpoint
        store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=120))
        os.environ["DLAUNCH_CKPT_TEST_DELAY"] = "1"
        handle = checkpoint.save({{"a": torch.ones(100), "b": torch.ones(5)}}, 1, 10, async_save=True)
        while {when == "after the write"} and not handle.done():
            pass
        print("blocking", flush=True)
        store.wait(["never"])
    """)
    try:
        assert proc.stdout.readline() == "blocking\n", proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)   # far less than the store's 120 s: the SIGTERM ended it
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGTERM
    assert labels(run) == ["ckpt-1_10"]
    assert torch.equal(checkpoint.load(str(ckpt_of(run) / "ckpt-1_10.pt"))["b"], torch.ones(5))


@pytest.mark.parametrize("order", ["save inside the block", "save before the block"])
def test_sigterm_during_a_background_write_still_saves_the_breakpoint(run, order):
    save = 'checkpoint.save({"a": torch.ones(100), "b": torch.ones(5)}, 4, 98, prefix="job", async_save=True)'
    code, stderr = sigterm_when_ready(f"""
        import os, time
        import torch
        from launcher import checkpoint
        os.environ["DLAUNCH_CKPT_TEST_DELAY"] = "0.5"
        {save if order == "save before the block" else ""}
        with checkpoint.saving_on_exception(lambda: {{"state": 42}}, 4, 99, prefix="job"):
            {save if order == "save inside the block" else ""}
            print("ready", flush=True)
            while True:
                time.sleep(0.1)
    """)
    assert code == 128 + signal.SIGTERM, stderr
    assert labels(run) == ["job-4_98"]
    assert torch.equal(checkpoint.load(str(ckpt_of(run) / "job-4_98.pt"))["b"], torch.ones(5))
    assert checkpoint.load(str(ckpt_of(run) / "breakpoint" / "job_breakpoint-4_99.pt")) == {"state": 42}


def test_sigterm_from_dlaunch_lets_a_background_write_finish(tmp_path):
    # rank 1 is writing step 1_2 in the background (3 s) when rank 0 fails: dlaunch SIGTERMs rank 1,
    # which finishes the file inside the grace period (10 s) and then dies of that SIGTERM.
    out = tmp_path / "runs"
    result = run_dlaunch("run", SAVER, "--ranks", "2", "--output-dir", out, "--", "--slow-rank", "1",
                         "--fail-rank", "0", "--delay", "1.5", cwd=tmp_path, timeout=120)
    assert result.returncode == 3, result.stderr
    run_dir = latest_run(out)
    done = summary(run_dir)
    assert done["root_cause"]["rank"] == 0
    ranks = {rank["rank"]: rank for rank in done["ranks"]}
    assert ranks[1]["signal"] == "SIGTERM"     # not SIGKILL: it ended within the grace period
    assert done["newest_complete_checkpoint"] == "ckpt-1_2"
    assert "newest complete checkpoint: ckpt-1_2" in result.stderr
    saved = torch.load(run_dir / "rank_001" / "ckpt" / "ckpt-1_2.pt")
    assert_equal_states(saved, {"t0": torch.full((1000,), 100.0), "t1": torch.full((1000,), 101.0)})
    listed = run_dlaunch("ckpt", "list", run_dir, cwd=tmp_path)
    assert re.search(r"ckpt-1_2 +0-1 .*complete, newest \(--resume picks it\)", listed.stdout), listed.stdout


def test_the_hang_watch_counts_a_background_write_as_progress(tmp_path):
    # The script ends at once; its exit waits 10 s for the write, printing nothing: not a hang.  (The
    # timeout leaves room for importing torch on a busy machine.)
    out = tmp_path / "runs"
    result = run_dlaunch("run", SAVER, "--ranks", "1", "--output-dir", out, "--hang-timeout", "7", "--",
                         "--delay", "0.5", "--storages", "20", "--then", "exit", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (latest_run(out) / "rank_000" / "ckpt" / "ckpt-1_2.pt").exists()

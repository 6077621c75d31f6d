"""launcher.checkpoint with real torch files and real processes: atomic saves under SIGKILL, no overwrites,
rotation, breakpoints (on exceptions and on SIGTERM), resume from the launcher's env, sliced saving."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import torch

from launcher import checkpoint
from launcher.checkpoint import store as ckptstore
from launcher.observe import ckpt as ckpttool
from tests.launching import ROOT, wait_until
from tests.unit.checkpoint.test_api import ckpt_of, labels


def python(script, *args, **popen):
    """A fresh interpreter running ``script`` (this checkout on its path), as a training process would."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True, **popen)


def test_sigkill_during_a_save_keeps_the_previous_checkpoint(run):
    # The second save's state pickles slowly: the process is killed while torch.save is writing it.
    proc = python("""
        import sys, time
        import torch
        from launcher import checkpoint

        class SlowToPickle:
            def __reduce__(self):
                print("pickling", flush=True)
                time.sleep(60)
                return (int, (0,))

        checkpoint.save({"w": torch.ones(1000), "epoch": 1}, 1, 10)
        checkpoint.save({"w": torch.zeros(1000), "slow": SlowToPickle()}, 2, 20)
    """)
    try:
        assert proc.stdout.readline() == "pickling\n", proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    names = os.listdir(ckpt_of(run))
    temps = [name for name in names if name.startswith(".ckpt-2_20.pt~")]
    assert len(temps) == 1 and set(names) == {"ckpt-1_10.pt", *temps}   # the partial file is hidden
    assert labels(run) == ["ckpt-1_10"]
    rows = ckpttool.list_run(str(run))
    assert [(row["label"], row["complete"]) for row in rows] == [("ckpt-1_10", True)]
    assert torch.equal(checkpoint.load(str(ckpt_of(run) / "ckpt-1_10.pt"))["w"], torch.ones(1000))
    # the next save into the directory removes the dead process's temporary
    checkpoint.save({"w": torch.zeros(1000)}, 2, 20)
    assert sorted(os.listdir(ckpt_of(run))) == ["ckpt-1_10.pt", "ckpt-2_20.pt"]


def test_stale_temporaries_only_of_dead_or_long_gone_writers_are_removed(run):
    directory = ckpt_of(run)
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = ckptstore._HOST
    names = {"dead": f".ckpt-1_1.pt~{host}~{dead.pid}~abc.tmp",
             "alive": f".ckpt-1_1.pt~{host}~{os.getppid()}~abc.tmp",       # a slow save in another process
             "foreign_old": ".ckpt-1_1.pt~otherhost~123~abc.tmp",
             "foreign_new": ".ckpt-1_1.pt~otherhost~124~abc.tmp",
             "unrelated": ".notes.tmp"}
    for name in names.values():
        (directory / name).write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(directory / names["foreign_old"], (two_hours_ago, two_hours_ago))
    checkpoint.save({}, 1, 1)
    left = set(os.listdir(directory))
    assert left == {"ckpt-1_1.pt", names["alive"], names["foreign_new"], names["unrelated"]}


def test_a_resave_killed_while_its_notice_blocks_keeps_the_step_listed(run):
    # The re-save's notice goes to a stderr pipe that is full and never read, so the print blocks
    # for good: the process is killed there.  The step must stay listed (the new file committed
    # before the notice), the earlier file kept in superseded/.
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"x" * 4096)
    os.set_blocking(write_end, True)
    listed, aside = ckpt_of(run) / "ckpt-2_20.pt", ckpt_of(run) / "superseded" / "ckpt-2_20.pt"
    proc = python("""
        from launcher import checkpoint
        checkpoint.save({"attempt": 0}, 2, 20)
        print("saved", flush=True)
        checkpoint.save({"attempt": 1}, 2, 20)
        print("notice printed", flush=True)
    """, stderr=write_end)
    try:
        assert proc.stdout.readline() == "saved\n"
        first = listed.stat().st_ino
        assert wait_until(aside.exists, timeout=30)
        # the new file's rename comes before the notice that blocks; without it this would time out
        wait_until(lambda: listed.exists() and listed.stat().st_ino != first, timeout=10)
        assert proc.poll() is None   # still blocked in the notice
    finally:
        proc.kill()
        proc.wait()
        os.close(read_end)
        os.close(write_end)
    assert labels(run) == ["ckpt-2_20"]
    assert checkpoint.load(str(listed)) == {"attempt": 1}
    assert checkpoint.load(str(aside)) == {"attempt": 0}
    # the next re-save finds the earlier file already kept and keeps the one it replaces
    checkpoint.save({"attempt": 2}, 2, 20)
    assert sorted(os.listdir(aside.parent)) == ["ckpt-2_20.1.pt", "ckpt-2_20.pt"]


def sigterm_when_ready(script, timeout=60):
    """Run ``script`` until it prints "ready", SIGTERM it, wait for its end: (exit code, stderr)."""
    proc = python(script)
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    return proc.returncode, stderr


def test_sigterm_inside_the_block_saves_a_breakpoint(run):
    code, stderr = sigterm_when_ready("""
        import time
        from launcher import checkpoint
        with checkpoint.saving_on_exception(lambda: {"state": 42}, 4, 99, prefix="job"):
            print("ready", flush=True)
            for _ in range(600):   # short sleeps: a signal that lands just before a long sleep would wait it out
                time.sleep(0.1)
    """)
    assert code == 128 + signal.SIGTERM, stderr
    path = ckpt_of(run) / "breakpoint" / "job_breakpoint-4_99.pt"
    assert checkpoint.load(str(path)) == {"state": 42}
    assert "breakpoint saved to" in stderr


def test_importing_the_module_does_not_import_torch():
    code = "import sys, launcher.checkpoint, launcher.observe.ckpt; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode == 0

"""The watchdog notes the launcher's process tree each NOTE_SECONDS only when a process or thread was created
since its last note (launcher/execute/reaper.py): a quiet 1,024-rank job cost it 43 ms of CPU a second.
The loop runs here in a thread, its tree reading counted, with the kernel's last pid given by the test."""

import os
import threading

from launcher.execute import reaper


def notes_taken(monkeypatch, last_pids) -> int:
    """How many times the watchdog's loop read the tree while ``last_pids`` gave the kernel's last pid."""
    taken = []
    monkeypatch.setattr(reaper, "NOTE_SECONDS", 0.005)
    monkeypatch.setattr(reaper, "_tree", lambda pid: taken.append(pid) or {})
    monkeypatch.setattr(reaper, "_last_pid", lambda: next(last_pids))
    read_fd, write_fd = os.pipe()
    loop = threading.Thread(target=reaper._reap_when_orphaned, args=(read_fd, "test-marker", os.getpid()))
    loop.start()
    threading.Event().wait(0.3)   # ~60 rounds of the loop
    os.write(write_fd, b"bye\n")
    loop.join(5)
    os.close(read_fd)
    os.close(write_fd)
    assert not loop.is_alive()
    return len(taken)


def test_nothing_created_means_one_note(monkeypatch):
    assert notes_taken(monkeypatch, iter(lambda: b"4242", None)) == 1


def test_every_creation_means_a_new_note(monkeypatch):
    counter = iter(range(10**6))
    assert notes_taken(monkeypatch, (str(n).encode() for n in counter)) > 20


def test_an_unreadable_last_pid_means_a_note_every_round(monkeypatch):
    assert notes_taken(monkeypatch, iter(lambda: None, 0)) > 20


def test_the_last_pid_moves_when_a_thread_starts():
    before = reaper._last_pid()
    started = threading.Thread(target=lambda: None)
    started.start()
    started.join()
    assert before is not None and reaper._last_pid() != before

"""The watchdog notes the launcher's process tree each NOTE_SECONDS only while processes or threads are being
created (launcher/execute/local/reaper.py): a quiet 1,024-rank job cost it 43 ms of CPU a second.
The loop runs here in a thread, its tree reading counted, with the kernel's last pid given by the test."""

import os
import threading

from launcher.execute.local import proctree, reaper

ROUNDS = 40


def notes_taken(monkeypatch, last_pid) -> int:
    """How many times the watchdog's loop read the tree in ROUNDS rounds, ``last_pid(round)`` giving the kernel's
    last pid at each."""
    taken, rounds, done = [], [], threading.Event()

    def fake_last_pid():
        rounds.append(None)
        if len(rounds) >= ROUNDS:
            done.set()
        return last_pid(len(rounds)) if len(rounds) <= ROUNDS else None

    monkeypatch.setattr(reaper, "NOTE_SECONDS", 0.002)
    monkeypatch.setattr(reaper, "tree", lambda pid: taken.append(len(rounds)) or {})
    monkeypatch.setattr(reaper, "last_pid", fake_last_pid)
    read_fd, write_fd = os.pipe()
    loop = threading.Thread(target=reaper._reap_when_orphaned, args=(read_fd, "test-marker", os.getpid()))
    loop.start()
    assert done.wait(30)
    before_bye = len([r for r in taken if r <= ROUNDS])
    os.write(write_fd, b"bye\n")
    loop.join(5)
    os.close(read_fd)
    os.close(write_fd)
    assert not loop.is_alive()
    return before_bye


def test_nothing_created_means_two_notes(monkeypatch):
    # the first, and the next round's: a process given its pid just before the first may not have been
    # linked to its parent yet; after that, nothing new, nothing read
    assert notes_taken(monkeypatch, lambda round_: b"4242") == 2


def test_after_a_creation_two_notes_then_quiet(monkeypatch):
    assert notes_taken(monkeypatch, lambda round_: b"1" if round_ <= 10 else b"2") == 4


def test_every_creation_means_a_new_note(monkeypatch):
    assert notes_taken(monkeypatch, lambda round_: str(round_).encode()) == ROUNDS


def test_an_unreadable_last_pid_means_a_note_every_round(monkeypatch):
    assert notes_taken(monkeypatch, lambda round_: None) == ROUNDS


def test_the_last_pid_moves_when_a_thread_starts():
    before = proctree.last_pid()
    started = threading.Thread(target=lambda: None)
    started.start()
    started.join()
    assert before is not None and proctree.last_pid() != before

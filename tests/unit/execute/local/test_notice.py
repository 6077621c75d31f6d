"""The survivors' window (execute/local/notice.py): when it is over, with --fault-tolerant's waiting for the
ranks that listen alone."""

from types import SimpleNamespace

from launcher.contract import NOTICE_LISTENING_FILE, NOTICE_SAVED_FILE
from launcher.execute.local.notice import SurvivorWindow, clear_notices


def survivor(tmp_path, name, listening=False, saved=False, alive=True):
    rank_dir = tmp_path / name
    rank_dir.mkdir()
    if listening:
        (rank_dir / NOTICE_LISTENING_FILE).write_text("listening\n")
    if saved:
        (rank_dir / NOTICE_SAVED_FILE).write_text("saved\n")
    return SimpleNamespace(alive=alive, spec=SimpleNamespace(rank_dir=str(rank_dir)))


def test_a_window_for_listeners_waits_for_the_ranks_that_asked_alone(tmp_path):
    deaf, listener = survivor(tmp_path, "rank_000"), survivor(tmp_path, "rank_001", listening=True)
    assert not SurvivorWindow([deaf, listener], {}, 10.0, 0).over()   # --survivor-window 10: every survivor
    window = SurvivorWindow([deaf, listener], {}, 10.0, 0, listeners_only=True)
    assert not window.over()   # the listener has not saved yet
    (tmp_path / "rank_001" / NOTICE_SAVED_FILE).write_text("saved\n")
    assert window.over()       # the deaf rank is not waited for
    assert SurvivorWindow([deaf], {}, 10.0, 0, listeners_only=True).over()   # nobody listens: over at once


def test_a_new_attempt_starts_with_no_listener(tmp_path):
    rank = survivor(tmp_path, "rank_000", listening=True, saved=True)
    assert clear_notices([rank.spec.rank_dir]) == []
    assert list((tmp_path / "rank_000").iterdir()) == []

"""The survivors' window (execute/local/notice.py): it waits only for the survivors that watch for notices (their
first checkpoint.notice() wrote notice.watched), or for every survivor when --notice-signal tells them."""

from types import SimpleNamespace

from launcher.contract import NOTICE_SAVED_FILE, NOTICE_WATCHED_FILE
from launcher.execute.local.notice import SurvivorWindow, clear_notices


def survivor(tmp_path, name, watching=False, saved=False, alive=True):
    rank_dir = tmp_path / name
    rank_dir.mkdir()
    if watching:
        (rank_dir / NOTICE_WATCHED_FILE).touch()
    if saved:
        (rank_dir / NOTICE_SAVED_FILE).write_text("saved\n")
    return SimpleNamespace(alive=alive, spec=SimpleNamespace(rank_dir=str(rank_dir)))


def test_a_window_waits_for_the_ranks_that_watch_alone(tmp_path):
    deaf, watcher = survivor(tmp_path, "rank_000"), survivor(tmp_path, "rank_001", watching=True)
    window = SurvivorWindow([deaf, watcher], {}, 10.0, 0)
    assert not window.over() and [window.waits_for(p) for p in (deaf, watcher)] == [False, True]
    (tmp_path / "rank_001" / NOTICE_SAVED_FILE).write_text("saved\n")
    assert window.over()       # the deaf rank is not waited for
    assert SurvivorWindow([deaf], {}, 10.0, 0).over()   # nobody watches: over at once


def test_with_a_notice_signal_every_survivor_may_save(tmp_path):
    deaf = survivor(tmp_path, "rank_000")
    assert not SurvivorWindow([deaf], {}, 10.0, 0, signalled=True).over()


def test_a_new_attempt_starts_with_no_watcher(tmp_path):
    rank = survivor(tmp_path, "rank_000", watching=True, saved=True)
    assert clear_notices([rank.spec.rank_dir]) == []
    assert list((tmp_path / "rank_000").iterdir()) == []

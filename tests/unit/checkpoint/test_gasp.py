"""A rank's side of the survivors' window: the notice of this attempt only, and "saved" beside it."""

import json

from launcher import checkpoint
from launcher.contract import NOTICE_FILE, NOTICE_SAVED_FILE


def test_the_notice_is_this_attempts_and_saved_is_said_beside_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DLAUNCH_NOTICE_FILE", str(tmp_path / NOTICE_FILE))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert checkpoint.notice() is None and checkpoint.save_on_notice({}, 1, 1) is False   # nothing yet
    (tmp_path / NOTICE_FILE).write_text(json.dumps({"attempt": 0, "failed_rank": 3}))
    assert checkpoint.notice() is None   # the last attempt's: not this one's
    (tmp_path / NOTICE_FILE).write_text(json.dumps({"attempt": 1, "failed_rank": 3}))
    assert checkpoint.notice()["failed_rank"] == 3
    checkpoint.notice_saved()
    assert (tmp_path / NOTICE_SAVED_FILE).read_text() == "saved\n"


def test_without_a_window_there_is_never_a_notice(tmp_path, monkeypatch):
    monkeypatch.delenv("DLAUNCH_NOTICE_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert checkpoint.notice() is None
    checkpoint.notice_saved()   # nothing to say it to: no error, and no file anywhere it could have gone
    assert list(tmp_path.iterdir()) == []


def test_the_collective_snippet_in_the_docs_is_the_one_the_e2e_test_runs():
    """docs/checkpoints.md's "With collectives" loop is, line for line, what tests/programs/gasp_collective.py
    runs (tests/e2e/test_gasp_collective.py proves it saves the step reached)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    program = (root / "tests" / "programs" / "gasp_collective.py").read_text()
    snippet = program.split("# --- the snippet of docs/checkpoints.md", 1)[1].split("\n", 1)[1]
    snippet = snippet.split("# ------", 1)[0]
    assert snippet.strip() and snippet in (root / "docs" / "checkpoints.md").read_text()


def test_asking_for_a_notice_says_once_that_this_rank_watches(tmp_path, monkeypatch):
    # the survivors' window waits only for ranks that watch for notices (execute/local/notice.py)
    from launcher.contract import NOTICE_WATCHED_FILE as NOTICE_LISTENING_FILE

    monkeypatch.setenv("DLAUNCH_NOTICE_FILE", str(tmp_path / NOTICE_FILE))
    assert not (tmp_path / NOTICE_LISTENING_FILE).exists()
    assert checkpoint.notice() is None
    assert (tmp_path / NOTICE_LISTENING_FILE).exists()
    (tmp_path / NOTICE_LISTENING_FILE).unlink()
    checkpoint.notice()   # once per process: every step asks, and costs no more than a stat
    assert not (tmp_path / NOTICE_LISTENING_FILE).exists()


def test_only_an_error_raised_inside_torch_distributed_code_waits_for_a_notice(tmp_path, monkeypatch):
    """The documented loop catches every error; a rank's own error must be re-raised at once (dlaunch hears it
    when it leaves the script), only a broken collective's may wait for the notice of the peer that broke it."""
    import torch
    import torch.distributed as dist

    from launcher import checkpoint
    from launcher.checkpoint import api
    from launcher.checkpoint.gasp import from_collective

    waits = []
    monkeypatch.setattr(api, "wait_for_notice", lambda seconds: waits.append(seconds))   # would wait: recorded
    try:
        raise RuntimeError("the script's own bug")
    except RuntimeError as own:
        assert not from_collective(own)
        monkeypatch.setenv("DLAUNCH_NOTICE_FILE", str(tmp_path / "notice.json"))
        assert checkpoint.save_on_notice({"w": torch.zeros(1)}, 0, 1, wait=600) is False
        assert waits == []   # not the 600 s asked: no wait at all for its own error
    try:
        dist.all_reduce(torch.ones(1))   # no process group: raised inside torch.distributed
    except (RuntimeError, ValueError) as broken:
        assert from_collective(broken)
        assert checkpoint.save_on_notice({"w": torch.zeros(1)}, 0, 1, wait=5) is False   # no notice came
        assert waits == [5]   # a broken collective's error waits for the notice, as long as asked
    assert not from_collective(None)

"""table.share.load_completed: the job's rank table as an operator writes it (issue 38, item 21)."""

import time

import pytest

from launcher.table import share
from launcher.table.model import RankTableError
from tests.launching import write_rank_table


def _refused_within(path, wait: float) -> tuple[str, float]:
    began = time.monotonic()
    with pytest.raises(RankTableError) as refused:
        share.load_completed(str(path), wait)
    return str(refused.value), time.monotonic() - began


def test_a_directory_is_refused_at_once(tmp_path):
    said, took = _refused_within(tmp_path, 30)
    assert "it is a directory, not a regular file" in said and took < 5, (said, took)


def test_content_that_is_no_table_is_refused_once_it_stands_still(tmp_path, monkeypatch):
    monkeypatch.setattr(share, "SETTLED", 0.3, raising=False)
    truncated = tmp_path / "hccl.json"
    truncated.write_text('{"version": "1.0", "server_list": [')
    said, took = _refused_within(truncated, 30)
    assert "malformed JSON at line 1" in said and took < 5, (said, took)


def test_a_missing_or_empty_file_is_waited_for_then_refused(tmp_path):
    said, took = _refused_within(tmp_path / "hccl.json", 0.6)
    assert "No such file or directory" in said and took >= 0.5, (said, took)
    (tmp_path / "empty.json").write_text("")
    said, took = _refused_within(tmp_path / "empty.json", 0.6)
    assert said == "the file is empty" and took >= 0.5, (said, took)


def test_a_table_written_while_waiting_is_read(tmp_path):
    import threading

    path = tmp_path / "hccl.json"
    path.write_text('{"version": "1.0", "server_list": [')   # the operator's write, half done
    later = threading.Timer(0.4, lambda: write_rank_table(path))
    later.start()
    try:
        assert len(share.load_completed(str(path), 30).servers) == 2
    finally:
        later.cancel()

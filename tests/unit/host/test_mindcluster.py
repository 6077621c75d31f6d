"""MindCluster's reset file as ClusterD writes it (ascend-common's ResetCmInfo), read tolerantly."""

import json

from launcher.host.mindcluster import ResetWatch, read_reset


def test_the_reset_file_reads_as_orders(tmp_path):
    path = tmp_path / "reset.json"
    path.write_text(json.dumps({"RankList": [{"RankId": 5, "LogicId": 1, "Status": "fault", "Policy": "x",
                                              "ErrorCode": [1]}, {"RankId": "6", "Status": "recovered"},
                                             {"RankId": True, "Status": "fault"}, "junk"],
                                "UpdateTime": 1732700000, "RetryTime": 2, "FaultFlushing": False,
                                "GracefulExit": 0, "RestartFaultProcess": True}))
    orders = read_reset(str(path))
    assert orders.faults == {5: "fault"} and orders.restart_fault_process and not orders.graceful_exit
    assert orders.local_faults([4, 5, 6, 7]) == [5] and orders.local_faults([0, 1]) == []
    assert (orders.retry_time, orders.update_time) == (2, 1732700000)


def test_what_is_not_mindclusters_is_no_order(tmp_path):
    path = tmp_path / "reset.json"
    for text in ("", "{half", "[1, 2]", '"text"'):
        path.write_text(text)
        assert read_reset(str(path)) is None
    assert read_reset(str(tmp_path / "absent.json")) is None


def test_the_watch_gives_each_version_once(tmp_path):
    path = tmp_path / "reset.json"
    watch = ResetWatch(str(path), interval=1.0)
    assert watch.due(0) and watch.check(0) is None   # no file yet
    path.write_text(json.dumps({"GracefulExit": 1, "FaultFlushing": True}))
    assert not watch.due(0.5) and watch.due(1.0)
    first = watch.check(1.0)
    assert first.graceful_exit and first.flushing
    assert watch.check(2.0) is None   # unchanged: acted on once
    path.write_text(json.dumps({"GracefulExit": 0, "RankList": []}))
    second = watch.check(3.0)
    assert second.graceful_exit is False and not second.flushing

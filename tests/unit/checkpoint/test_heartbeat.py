import json
import os

from launcher.checkpoint import heartbeat


def test_beat_writes_the_step_at_most_once_a_second_and_a_phase_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("DLAUNCH_RANK_DIR", str(tmp_path))
    monkeypatch.setattr(heartbeat, "_last", 0.0)
    monkeypatch.setattr(heartbeat, "_step", None)
    clock = [100.0]
    monkeypatch.setattr(heartbeat.time, "monotonic", lambda: clock[0])
    path = tmp_path / "heartbeat"
    heartbeat.beat()
    assert path.exists() and path.read_text() == ""   # a plain beat: only its time
    clock[0] = 102.0
    heartbeat.beat(step=7)
    assert json.loads(path.read_text())["step"] == 7
    heartbeat.beat(step=8)   # within the second: not written
    assert json.loads(path.read_text())["step"] == 7
    with heartbeat.phase("checkpoint"):
        assert json.loads(path.read_text()) | {"time": 0} == {"step": 8, "phase": "checkpoint", "time": 0}
    assert json.loads(path.read_text())["phase"] is None
    assert [name for name in os.listdir(tmp_path)] == ["heartbeat"]   # no temporary file left


def test_outside_dlaunch_beat_and_phase_do_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("DLAUNCH_RANK_DIR", raising=False)
    monkeypatch.setattr(heartbeat, "_last", 0.0)
    monkeypatch.chdir(tmp_path)
    heartbeat.beat(step=3)
    with heartbeat.phase("eval"):
        pass
    assert os.listdir(tmp_path) == []

"""env.log's text: the layout worked out once per set of names must give exactly what rendering each rank
whole would (sorted KEY=VALUE lines of the inherited environment overlaid by the rank's, secrets masked)."""

from launcher.plan.environment import EnvLog, masked


def _whole(inherited: dict[str, str], env: dict[str, str]) -> str:
    merged = {**masked(inherited), **masked(env)}
    return "".join(f"{k}={merged[k]}\n" for k in sorted(merged))


INHERITED = {"PATH": "/usr/bin", "HOME": "/root", "API_TOKEN": "abc", "OPTS": "A=1 DB_PASS=x", "A": "first",
             "ZZ": "last", "RANK": "inherited-rank", "EMPTY_SECRET_KEY": ""}


def test_each_rank_gets_what_a_whole_rendering_gives():
    log = EnvLog(INHERITED)
    ranks = [{"RANK": str(r), "WORLD_SIZE": "3", "B_KEY": "s3cret", "DLAUNCH_ENV": "X_TOKEN=t Y=2", "ZZZ": "end",
              "AA": f"r{r}"} for r in range(3)]
    for env in ranks:
        assert log.text(env) == _whole(INHERITED, env)
    assert "RANK=inherited-rank" not in log.text(ranks[0]) and "s3cret" not in log.text(ranks[0])


def test_ranks_with_other_names_and_empty_cases():
    log = EnvLog(INHERITED)
    for env in ({}, {"A": "mine"}, {"00": "x", "~": "y"}, {"PATH": "/opt/bin", "HOME": "/h"}, {"A": "again"}):
        assert log.text(env) == _whole(INHERITED, env)
    assert EnvLog({}).text({"X": "1"}) == "X=1\n"


def test_the_layout_is_worked_out_once_per_set_of_names(monkeypatch):
    """The sort over every inherited name is done once for a launch's ranks, not once per rank (counted)."""
    calls = []
    layout = EnvLog._layout
    monkeypatch.setattr(EnvLog, "_layout", lambda self, names: calls.append(names) or layout(self, names))
    log = EnvLog(INHERITED)
    for rank in range(100):
        log.text({"RANK": str(rank), "WORLD_SIZE": "100"})
    log.text({"RANK": "0", "EXTRA": "1"})
    assert len(calls) == 2


def test_mindio_is_pointed_at_rank_0s_host_only_when_ms_enable_tft_asks_for_it():
    from launcher.plan.environment import mindio_environment

    assert mindio_environment("10.0.0.1", 29500, {"MS_ENABLE_TFT": "{TTP:1,UCE:1}"}) == {
        "MS_TFT_IP": "10.0.0.1", "MS_TFT_PORT": "29503"}
    assert mindio_environment("10.0.0.1", 29500, {"MS_ENABLE_TFT": "{RSC:1}"}) == {}   # a pod reschedule: no MindIO
    assert mindio_environment("10.0.0.1", 29500, {}) == {}
    given = {"MS_ENABLE_TFT": "{ARF:1}", "MS_TFT_IP": "10.9.9.9", "MS_TFT_PORT": "30051"}
    assert mindio_environment("10.0.0.1", 29500, given) == {}   # what the user (or MindCluster) set stands


def test_mindspore_recovery_keeps_one_recovery_path_per_run_unless_given():
    from launcher.plan.environment import mindspore_recovery_environment

    assert mindspore_recovery_environment("/runs/r1", {}) == {"MS_RECOVERY_PATH": "/runs/r1/ms_recovery"}
    assert mindspore_recovery_environment("/runs/r1", {"MS_RECOVERY_PATH": "/shared/rec"}) == {}


def test_the_memory_tier_gives_each_rank_its_place_in_this_launchers_area():
    import os

    from launcher.plan.environment import memory_area, memory_environment

    area = memory_area("/dev/shm", "run-1")
    assert area == f"/dev/shm/dlaunch-run-1-{os.getpid()}"
    env = memory_environment(area, 3, 1 << 30, 10)
    assert env == {"DLAUNCH_MEMORY_DIR": f"{area}/rank_003/files", "DLAUNCH_MEMORY_SLOTS": f"{area}/rank_003/slots",
                   "DLAUNCH_MEMORY_BUDGET": str(1 << 30), "DLAUNCH_MEMORY_PERSIST_EVERY": "10",
                   "DLAUNCH_MEMORY_OWNER": ""}   # an owner inherited from dlaunch's own environment is cleared
    from launcher.checkpoint.memory import OWNER_ENV
    from launcher.plan.environment import MEMORY_OWNER_ENV

    assert MEMORY_OWNER_ENV == OWNER_ENV
    assert "DLAUNCH_MEMORY_BUDGET" not in memory_environment(area, 0, None, 1)

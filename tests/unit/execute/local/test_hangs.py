import json
import os
import time

from launcher.execute.local.hangclock import HangClock
from launcher.execute.local.hangs import HangWatch, read_heartbeat
from launcher.plan.make import RankSpec


def spec(tmp_path, rank):
    rank_dir = tmp_path / f"rank_{rank}"
    (rank_dir / "ckpt").mkdir(parents=True)
    (rank_dir / "output.log").write_text("")
    return RankSpec(rank=rank, local_rank=rank, device_id=rank, server_id="h", argv=[], cwd=str(rank_dir), env={},
                    rank_dir=str(rank_dir), log_file=str(rank_dir / "output.log"), env_log="",
                    ckpt_dir=str(rank_dir / "ckpt"), error_file=None, console=False)


def beat(spec_, at, step, phase=None):
    path = os.path.join(spec_.rank_dir, "heartbeat")
    with open(path, "w") as fh:
        json.dump({"step": step, "phase": phase, "time": at}, fh)
    os.utime(path, (at, at))
    os.utime(spec_.log_file, (at, at))


def test_read_heartbeat_takes_what_beat_writes_and_nothing_else(tmp_path):
    path = tmp_path / "heartbeat"
    path.write_text('{"step": 7, "phase": "checkpoint", "time": 1}')
    assert read_heartbeat(str(path)) == (7, "checkpoint")
    for text in ("", "[]", '{"step": true, "phase": 3}', "{"):
        path.write_text(text)
        assert read_heartbeat(str(path)) == (None, None)


def test_the_learned_budget_calls_a_silence_of_5_steps_and_a_phase_gets_its_own(tmp_path):
    ranks = [spec(tmp_path, 0), spec(tmp_path, 1)]
    start = time.time() + 1000.0   # after the directories were made
    clock = HangClock(60.0)
    watch = HangWatch(60.0, start, clock)
    at = start
    for step in range(1, 31):   # a step every 0.2 s, looked at twice a step
        at = start + 0.2 * step
        for one in ranks:
            beat(one, at, step)
        assert watch.find_hung(ranks, now=at + 0.05) is None
        assert watch.find_hung(ranks, now=at + 0.15) is None
    assert clock.learned and abs(clock.silence - 0.2) < 1e-6 and clock.counted_steps == 25
    assert abs(watch.budget() - 1.0) < 1e-6 and watch.budget_name() == "learned hang timeout 1 s"
    for one in ranks:   # a 3 s save, both ranks in it: no hang
        beat(one, at + 0.2, 31, "checkpoint")
    assert watch.find_hung(ranks, now=at + 3.0) is None and watch.budget() == 60.0
    for one in ranks:
        beat(one, at + 3.2, 32)
    assert watch.find_hung(ranks, now=at + 3.3) is None
    assert abs(clock.phases["checkpoint"] - 3.0) < 0.01 and clock.silence < 0.3   # the save: not a silence
    beat(ranks[0], at + 3.4, 33)
    found = watch.find_hung(ranks, now=at + 4.3)
    assert found is not None and found[0] is ranks[1] and abs(found[1] - 1.1) < 1e-6
    assert watch.silent_for[ranks[1].rank_dir] == found[1]


def test_without_steps_nothing_is_learned_and_the_bound_holds(tmp_path):
    ranks = [spec(tmp_path, 0)]
    start = time.time() + 1000.0   # after the directories were made
    clock = HangClock(5.0)
    watch = HangWatch(5.0, start, clock)
    for tick in range(1, 40):
        os.utime(ranks[0].log_file, (start + 0.2 * tick,) * 2)
        assert watch.find_hung(ranks, now=start + 0.2 * tick + 0.1) is None
    assert not clock.learned and watch.budget() == 5.0
    assert watch.find_hung(ranks, now=start + 7.8 + 4.9) is None
    assert watch.find_hung(ranks, now=start + 7.8 + 5.01) is not None


def test_a_rank_with_no_steps_of_its_own_has_the_bound_and_is_not_hung_while_the_job_steps(tmp_path):
    """Only rank 0 reports steps (nanoGPT, HF and Lightning print on rank 0, Megatron on the last rank): the
    budget learned from its silences is not applied to rank 1, silent all along (issue 47)."""
    ranks = [spec(tmp_path, 0), spec(tmp_path, 1)]
    start = time.time() + 1000.0
    clock = HangClock(5.0)
    watch = HangWatch(5.0, start, clock)
    at = start
    for step in range(1, 60):   # 12 s of steps: past the bound of 5 s for rank 1's silence
        at = start + 0.2 * step
        beat(ranks[0], at, step)
        assert watch.find_hung(ranks, now=at + 0.05) is None, step
    assert clock.learned and abs(watch.budget_of(ranks[0]) - 1.0) < 1e-3 and watch.budget_of(ranks[1]) == 5.0
    found = watch.find_hung(ranks, now=at + 1.1)     # the job stopped: both past their budgets now
    assert found is not None and found[0] is ranks[1] and watch.silent_for[ranks[0].rank_dir] >= 1.0
    assert watch.budget_name(ranks[1]) == "--hang-timeout (it reported no step of its own)"
    watch.finishing = True                            # a rank exited 0: the rest have the bound
    assert watch.budget_of(ranks[0]) == 5.0 and "finishing" in watch.budget_name(ranks[0])

from launcher.base.stragglers import RankSteps
from launcher.execute.local import straggler
from launcher.execute.local.straggler import StragglerNotice


def ranks(slow_ms, count=12):
    made = []
    for rank, ms in enumerate((100.0, 100.0, slow_ms)):
        steps = RankSteps(rank, "h")
        for _ in range(count):
            steps.add(ms)
        made.append(steps)
    return made


def test_a_rank_under_the_threshold_is_named_once_then_again_only_after_the_repeat(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(straggler.time, "monotonic", lambda: clock[0])
    notice = StragglerNotice(every=1.0)
    line = notice.check(ranks(140.0))
    assert line.startswith("straggler: rank 2 takes 140.0 ms per step (1.40 x the fastest rank's; relative 0.71")
    clock[0] = 5.0
    assert notice.check(ranks(140.0)) is None
    clock[0] = 10.0
    assert notice.check(ranks(140.0)) is not None


def test_no_line_for_ranks_within_the_threshold_or_with_too_few_steps():
    notice = StragglerNotice(every=1.0)
    assert notice.check(ranks(120.0)) is None
    assert notice.check(ranks(300.0, count=5)) is None   # ten steps first: compiling is no straggling

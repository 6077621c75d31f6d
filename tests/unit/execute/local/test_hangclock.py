import json

from launcher.execute.local.hangclock import (
    FACTOR,
    FLOOR,
    LEARN_STEPS,
    HangClock,
    clock_path,
    load_clock,
    save_clock,
)


def test_the_bound_holds_until_enough_steps_were_counted():
    clock = HangClock(60.0)
    clock.saw_silence(0.4)
    clock.saw_steps(LEARN_STEPS - 1)
    assert clock.step_budget() == 60.0 and not clock.learned
    clock.saw_steps(1)
    assert clock.learned and clock.step_budget() == FACTOR * 0.4


def test_a_budget_is_never_under_the_floor_nor_over_the_bound():
    quick = HangClock(60.0, silence=0.01, counted_steps=LEARN_STEPS)
    assert quick.step_budget() == FLOOR
    slow = HangClock(60.0, silence=30.0, counted_steps=LEARN_STEPS)
    assert slow.step_budget() == 60.0


def test_a_phase_has_the_bound_until_one_ended_then_its_own_budget():
    clock = HangClock(60.0, silence=0.2, counted_steps=LEARN_STEPS)
    assert clock.phase_budget("checkpoint") == 60.0
    clock.saw_phase("checkpoint", 3.0)
    clock.saw_phase("checkpoint", 2.0)   # the longest is kept
    assert clock.phase_budget("checkpoint") == 15.0 and clock.step_budget() == 1.0
    assert "checkpoint: 15 s" in clock.describe() and "learned: 1 s" in clock.describe()


def test_what_was_learned_survives_a_new_launch_under_its_bound(tmp_path):
    path = clock_path(str(tmp_path), ".127.0.0.2")
    assert path.endswith("hang_timeouts.127.0.0.2.json")
    clock = HangClock(60.0)
    clock.saw_silence(0.3)
    clock.saw_steps(12)
    clock.saw_phase("checkpoint", 4.0)
    assert clock.changed
    save_clock(path, clock)
    assert not clock.changed
    again = load_clock(path, 10.0)   # the requeued job's --hang-timeout: the bound it had is not carried
    assert (again.silence, again.counted_steps, again.phases, again.bound) == (0.3, 12, {"checkpoint": 4.0}, 10.0)
    assert again.phase_budget("checkpoint") == 10.0 and json.loads(open(path).read())["step_budget_s"] == 1.5


def test_an_unreadable_file_starts_learning_again(tmp_path):
    path = tmp_path / "hang_timeouts.json"
    for text in ("{", "[]", '{"silence_s": "x"}', '{"phases_s": 3}'):
        path.write_text(text)
        clock = load_clock(str(path), 60.0)
        assert (clock.silence, clock.counted_steps, clock.phases) == (0.0, 0, {})
    assert load_clock(str(tmp_path / "none.json"), 5.0).bound == 5.0


def test_a_line_when_the_learned_budget_changes_not_on_every_small_move():
    """The budget went from 1.18 s to 1.27 s without a line (issue 47): each move of 5% or more is said."""
    clock = HangClock(60.0)
    clock.saw_silence(0.236)
    assert clock.news() is None                       # nothing learned yet
    clock.saw_steps(LEARN_STEPS)
    first = clock.news()
    assert first.startswith("hang timeout learned: 1.18 s") and "was" not in first
    assert clock.news() is None
    clock.saw_silence(0.24)                           # 1.2 s: under 5% more
    assert clock.news() is None
    clock.saw_silence(0.254)
    assert clock.news().endswith("(was: step 1.18 s)") and "learned: 1.27 s" in clock.describe()
    clock.saw_phase("checkpoint", 3.0)
    assert "checkpoint: 15 s" in clock.news()

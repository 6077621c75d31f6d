import json
import os

from launcher.execute.local import stepreader
from launcher.execute.local.stepreader import StepReader
from tests.unit.execute.local.test_hangs import spec

LINE = " iteration {:8d}/     100 | elapsed time per iteration (ms): {:.1f} |\n"


def test_new_lines_are_read_once_and_a_half_line_waits_for_its_end(tmp_path):
    one = spec(tmp_path, 3)
    reader = StepReader(host="h")
    with open(one.log_file, "a") as fh:
        fh.write("loading\n" + LINE.format(1, 50.0) + LINE.format(2, 52.0)[:20])
    assert reader.read(one) == (1, 1)
    with open(one.log_file, "a") as fh:
        fh.write(LINE.format(2, 52.0)[20:] + "tqdm\r" + LINE.format(3, 51.0))
    assert reader.read(one) == (2, 3)   # the rest of step 2; step 3 after a carriage return, as drawn
    assert reader.read(one) == (0, None)
    assert list(reader.steps[3].times) == [50.0, 52.0, 51.0] and reader.steps[3].host == "h"


def test_a_log_that_grew_by_more_than_the_limit_is_read_from_its_newest_whole_line(tmp_path, monkeypatch):
    monkeypatch.setattr(stepreader, "READ_LIMIT", 200)
    one = spec(tmp_path, 0)
    reader = StepReader()
    with open(one.log_file, "a") as fh:
        fh.write("".join(LINE.format(step, 10.0 * step) for step in range(1, 40)))
    count, newest = reader.read(one)
    assert newest == 39 and 1 <= count <= 3 and list(reader.steps[0].times)[-1] == 390.0
    os.truncate(one.log_file, 0)   # truncated: read again from the start
    with open(one.log_file, "a") as fh:
        fh.write(LINE.format(1, 5.0))
    assert reader.read(one) == (1, 1)


def test_a_heartbeat_that_moved_on_gives_the_time_per_step_between_beats(tmp_path):
    one = spec(tmp_path, 0)
    reader = StepReader()
    path = os.path.join(one.rank_dir, "heartbeat")
    for step, at in ((10, 1000.0), (15, 1001.0), (15, 1002.0), (20, 1004.0)):
        with open(path, "w") as fh:
            json.dump({"step": step, "phase": None, "time": at}, fh)
        os.utime(path, (at, at))
        assert reader.read(one) == (0, None)   # no step line: the hang watch counts heartbeat steps itself
    assert list(reader.steps[0].times) == [200.0, 600.0]


def test_a_progress_bar_is_read_while_it_is_drawn_not_once_it_ends(tmp_path):
    """HF Trainer's tqdm bar (rank 0) redraws one line after carriage returns and ends it with a newline only when
    training ends: its steps were seen then (or when another line happened to end it), so ``--hang-learn``
    learned nothing from an HF job. The newest finished redraw is read as it comes, and never again."""
    one = spec(tmp_path, 0)
    reader = StepReader()
    bar = "\r{:3d}%|#         | {}/30 [00:0{}<00:27,  1.04it/s]"
    with open(one.log_file, "a") as fh:
        fh.write("  0%|          | 0/30 [00:00<?, ?it/s]" + bar.format(3, 1, 1) + bar.format(7, 2, 2))
    assert reader.read(one) == (1, 1)   # redraw 2/30 may be half written: it waits for the next \r
    with open(one.log_file, "a") as fh:
        fh.write(bar.format(10, 3, 3) + bar.format(13, 4, 4))
    assert reader.read(one) == (1, 3)   # the newest finished redraw
    with open(one.log_file, "a") as fh:
        fh.write("\n")
    assert reader.read(one) == (1, 4)
    assert reader.read(one) == (0, None)

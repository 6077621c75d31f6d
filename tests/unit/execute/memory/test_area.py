"""area: made private with its owner and run directory, found by run id, freed; a dead owner's is an orphan."""

import os
import stat

from launcher.checkpoint import tier
from launcher.execute.memory import area


def test_create_lays_out_the_area_as_tier_says(tmp_path):
    path = str(tmp_path / tier.area_name("run-1", os.getpid()))
    area.create(path, [0, 3], "/runs/run-1")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert os.path.isdir(tier.files_dir(path, 3)) and os.path.isdir(tier.slots_dir(path, 0))
    assert area.owner_alive(path) and area.run_dir_of(path) == "/runs/run-1" and area.ranks_of(path) == [0, 3]
    assert area.areas(str(tmp_path), "run-1") == [path] and area.areas(str(tmp_path), "run-2") == []
    assert area.orphans(str(tmp_path)) == []
    area.free(path)
    assert not os.path.exists(path)


def test_an_area_whose_owner_is_gone_is_an_orphan(tmp_path):
    dead = str(tmp_path / tier.area_name("run-1", 4194000))
    area.create(dead, [0], "/runs/run-1")
    with open(os.path.join(dead, tier.OWNER_FILE), "w") as fh:   # a pid no process has (above pid_max's use)
        fh.write("4194000 123\n")
    reused = str(tmp_path / tier.area_name("run-1", os.getpid() + 1))
    area.create(reused, [0], "/runs/run-1")
    with open(os.path.join(reused, tier.OWNER_FILE), "w") as fh:   # this pid, another start time: not its owner
        fh.write(f"{os.getpid()} 1\n")
    unowned = tmp_path / tier.area_name("run-1", 5)
    unowned.mkdir()   # a launcher killed before it wrote its owner
    (tmp_path / "dlaunch-notanarea").mkdir()
    (tmp_path / "other").mkdir()
    assert area.orphans(str(tmp_path), "run-1") == sorted([dead, reused, str(unowned)])
    assert area.run_dir_of(str(unowned)) is None

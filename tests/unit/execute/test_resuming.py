"""resuming: --resume's first resume point, and a run whose ranks kept only their own files in memory."""

from types import SimpleNamespace

import pytest

from launcher.errors import UsageError
from launcher.execute.resuming import first_resume_point, mirrored
from launcher.plan.make import Policy


def opts(run_dir, memory=True):
    return SimpleNamespace(resume_from=str(run_dir), resume_note="", policy=Policy(memory_ckpt=memory))


def test_a_run_with_only_mirrored_files_resumes_from_them_with_the_memory_tier(tmp_path):
    run = tmp_path / "run"
    for rank in (0, 1):
        (run / f"rank_00{rank}" / "ckpt").mkdir(parents=True)
    assert not mirrored(str(run))
    with pytest.raises(UsageError, match="nothing to resume"):
        first_resume_point(opts(run), 2)
    (run / "rank_001" / "ckpt" / "memory").mkdir()
    (run / "rank_001" / "ckpt" / "memory" / "ckpt.pt").write_bytes(b"x")
    assert mirrored(str(run)) and first_resume_point(opts(run), 2) is None
    with pytest.raises(UsageError, match="nothing to resume"):   # without the tier nothing would fill them
        first_resume_point(opts(run, memory=False), 2)
    (run / "rank_000" / "ckpt" / "ckpt-0_3.pt").write_bytes(b"x")
    (run / "rank_001" / "ckpt" / "ckpt-0_3.pt").write_bytes(b"x")
    assert first_resume_point(opts(run), 2).label == "ckpt-0_3"   # a step every rank saved comes first

"""host.memory: MemAvailable read through the border, the root's free space, the auto budget per rank."""

from launcher.host.memory import auto_budget, free_space, mem_available


def test_mem_available_is_read_in_bytes_and_nothing_else_is_taken(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n")
    assert mem_available(str(info)) == 8000000 * 1024
    info.write_text("MemTotal: 5 kB\nMemAvailable: ² kB\n")
    assert mem_available(str(info)) is None and mem_available(str(tmp_path / "none")) is None


def test_the_auto_budget_shares_the_smaller_of_both_among_the_ranks(tmp_path):
    free = free_space(str(tmp_path))
    assert free is not None and free > 0 and free_space(str(tmp_path / "missing")) is None
    assert 0 < auto_budget(str(tmp_path), 4) <= free // 4

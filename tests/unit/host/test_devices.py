"""Visible devices: an inherited CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES is the set a job may use.

The pure rules (``launcher.host.devices``) are tested directly; the launches check what real ranks receive.
"""


import pytest

from launcher.errors import UsageError
from launcher.host import devices

# ---------------------------------------------------------------- the pure rules


def test_cuda_variable_restricts_and_orders_devices():
    view = devices.discover({"CUDA_VISIBLE_DEVICES": "4,5"})
    assert view.restricts and view.first(2) == [4, 5]
    with pytest.raises(UsageError, match="allows only 2"):
        view.first(3)
    with pytest.raises(UsageError, match="names device 0, which CUDA_VISIBLE_DEVICES=4,5 does not allow"):
        view.check([0, 1], "--devices 0,1")
    assert view.cuda_visible([4, 5], {"CUDA_VISIBLE_DEVICES": "4,5"}) == "4,5"
    assert view.cuda_visible([5], {"CUDA_VISIBLE_DEVICES": "4,5"}) == "5"
    assert view.device_id(5) == 5   # CUDA: MindSpore's DEVICE_ID stays the plan's id


def test_cuda_uuids_are_positions_and_passed_through():
    view = devices.discover({"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb,GPU-cc"})
    assert view.first(2) == [0, 1]
    assert view.cuda_visible([1, 2], {}) == "GPU-bb,GPU-cc"


def test_ascend_subset_gives_logical_device_ids():
    view = devices.discover({"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "0"})
    assert view.source == devices.ASCEND_VAR
    assert [view.device_id(d) for d in (4, 5, 6, 7)] == [0, 1, 2, 3]
    assert view.cuda_visible([4, 5], {}) is None   # not CUDA's business on an Ascend host


def test_unrestricted_devices_in_order_leave_cuda_variable_unset():
    """With no variable restricting devices, 0..N-1 in order is what CUDA does anyway: left unset, as torchrun
    leaves it (1,024 CPU ranks would each carry a 4 KiB list); any other order or subset is still set."""
    for view in (devices.DeviceView(), devices.DeviceView(source="nvidia-smi -L", tokens=("0", "1", "2", "3"))):
        assert view.cuda_visible([0, 1, 2, 3], {}) is None
        assert view.cuda_visible([4, 5], {}) == "4,5"
        assert view.cuda_visible([1, 0], {}) == "1,0"
    restricted = devices.discover({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    assert restricted.cuda_visible([0, 1, 2, 3], {}) == "0,1,2,3"   # a variable's own subset is always said


def test_a_container_seeing_some_npus_is_numbered_from_zero():
    view = devices.DeviceView(source=devices.DAVINCI_GLOB, tokens=("4", "5"))
    assert view.first(2) == [4, 5]
    assert [view.device_id(d) for d in (4, 5)] == [0, 1]
    full = devices.DeviceView(source=devices.DAVINCI_GLOB, tokens=tuple(map(str, range(8))))
    assert [full.device_id(d) for d in range(8)] == list(range(8))


def test_empty_cuda_variable_keeps_gpus_hidden_for_cpu_ranks():
    view = devices.discover({"CUDA_VISIBLE_DEVICES": ""})
    assert view.first(2) == [0, 1]
    assert view.cuda_visible([0, 1], {"CUDA_VISIBLE_DEVICES": ""}) == ""
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES is empty"):   # hidden on purpose: said, not guessed
        devices.auto_count(view)


@pytest.mark.parametrize("text", ["4,,5", "4,4", ",".join(map(str, range(5000)))])
def test_malformed_visible_lists_are_refused(text):
    with pytest.raises(UsageError):
        devices.discover({"CUDA_VISIBLE_DEVICES": text})


def test_auto_with_nothing_found_is_one_rank_naming_what_was_looked_for(capsys):
    assert devices.auto_count(devices.DeviceView()) == [0]
    said = capsys.readouterr().err
    for looked_for in ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "/dev/davinci", "nvidia-smi", "one rank"):
        assert looked_for in said


# ---------------------------------------------------------------- real launches














def test_a_chosen_master_port_lies_outside_the_kernels_ephemeral_range(tmp_path, monkeypatch):
    """The kernel hands ports of its ephemeral range to outgoing connections: a master port picked there (bind
    to 0) can be taken before rank 0 binds it, as a busy host once showed (EADDRINUSE in rank 0)."""
    from launcher.host import devices

    with open(devices.EPHEMERAL_RANGE) as fh:
        first, last = map(int, fh.read().split())
    ports = {devices.free_port("127.0.0.1") for _ in range(50)}
    assert not any(first <= port <= last for port in ports), sorted(ports)
    assert len(ports) > 40   # chosen at random: several launches at once rarely try the same one
    ranges = tmp_path / "ip_local_port_range"
    monkeypatch.setattr(devices, "EPHEMERAL_RANGE", str(ranges))
    for given, window in (("30000 65535", (10000, 19999)), ("40000 60999", (30000, 32767)),
                          ("10000 40000", (40001, 65535)), ("1024 65000", (1024, 65000))):
        ranges.write_text(given + "\n")
        port = devices.free_port("127.0.0.1")
        assert window[0] <= port <= window[1], (given, port)   # the last: no room outside, the kernel's choice


def test_a_taken_port_is_never_chosen(monkeypatch):
    import socket

    from launcher.host import devices

    with socket.socket() as taken, socket.socket() as spare:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        spare.bind(("127.0.0.1", 0))   # a port known free a moment ago (busy + 1 was once some other test's)
        free = spare.getsockname()[1]
        spare.close()
        monkeypatch.setattr(devices, "_candidates", lambda low, high, count: [busy, free])   # taken first
        assert devices.free_port("127.0.0.1") == free



def test_a_port_another_launch_handed_out_is_never_chosen_until_that_launch_ends(monkeypatch):
    """Found by the suite with three workers: two ``dlaunch run`` side by side drew the same free port, one job's
    rank 0 not yet listening, and the other job's ranks joined its store. A port is claimed host-wide while the
    process that chose it lives (another launch's claim is played by a socket bound to its name)."""
    import socket

    from launcher.host import devices

    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        free = spare.getsockname()[1]
    other_launch = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for claimed in range(30000 + free % 2000, 32768):   # one no launch beside this test claimed (the suite's do)
        try:
            other_launch.bind(f"\0dlaunch-port-127.0.0.1-{claimed}")
            break
        except OSError:
            continue
    with other_launch:
        monkeypatch.setattr(devices, "_candidates", lambda low, high, count: [claimed, free])   # claimed first
        assert devices.free_port("127.0.0.1") == free
        assert not devices.claim_port("127.0.0.1", free)   # this process holds it now
        assert not devices.claim_port("127.0.0.1", claimed)
    assert devices.claim_port("127.0.0.1", claimed)   # its holder closed (a process's end does the same)

# ---------------------------------------------------------------- issue 38, item 16: the CPUs this process may use

@pytest.mark.parametrize("word", ["cpu", "auto"])
def test_nproc_per_node_cpu_and_auto_count_the_cpus_this_process_may_use(monkeypatch, word):
    """Under ``taskset -c 0`` (a cpuset container, Slurm's task binding) os.cpu_count() still says every CPU."""
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 3}, raising=False)
    count, said = devices.ranks_per_node(word, {"CUDA_VISIBLE_DEVICES": ""})   # no device: auto counts CPUs
    assert count == 2 and "2" in said and "CPU" in said, said


def test_without_affinity_every_cpu_is_counted(monkeypatch):
    monkeypatch.delattr(devices.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 6)
    assert devices.usable_cpus() == 6

"""Reading device memory in use from the drivers' tools (host/release.py), and waiting on it."""

from launcher.host.release import RELEASED_MIB, parse_gpu_memory, parse_npu_memory, wait_for_release

NPU_SMI_INFO = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.6                   Version: 23.0.6                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.6        40                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3339 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | Warning       | 90.1        41                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          0    / 65536         |
+===========================+===============+====================================================+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
| No running processes found in NPU 0                                                            |
"""


def test_npu_smi_hbm_usage_is_the_last_used_over_total_of_each_chip_row():
    assert parse_npu_memory(NPU_SMI_INFO) == {0: 3339, 1: 0}
    assert parse_npu_memory("npu-smi: command failed\n") == {}


def test_nvidia_smi_csv_rows():
    assert parse_gpu_memory("0, 3339\n1, 0\n") == {0: 3339, 1: 0}


def test_the_wait_ends_when_the_devices_it_watches_are_under_the_mark():
    answers = iter([{0: 4000, 1: 9000, 7: 9000}, {0: 100, 1: 9000, 7: 9000}, {0: 0, 1: RELEASED_MIB - 1, 7: 9000}])
    said = []
    waited = wait_for_release([0, 1], lambda stop=None: next(answers), timeout=30, say=said.append)
    assert waited < 5 and said[0].startswith("waiting up to 30 s for the last attempt's device memory to be "
                                               "released (device 0: 4000 MiB, device 1: 9000 MiB)")
    assert said[-1].startswith("devices released after")   # device 7 is another job's: not waited for


def test_the_wait_gives_up_at_its_timeout_in_one_line():
    said = []
    wait_for_release([3], lambda stop=None: {3: 8000}, timeout=0.3, say=said.append)
    assert said[-1] == ("devices still hold memory after 0.3 s (device 3: 8000 MiB; --device-release-timeout): "
                        "restarting anyway")

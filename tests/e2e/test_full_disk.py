"""A full disk at each point where dlaunch writes: a clear error, ranks stopped, a non-zero exit, no traceback,
and no half-made run directory when the start itself fails.

Each case runs dlaunch in a private mount namespace (``unshare -m``) on a small tmpfs filled up to a few
pages, so the disk is full for dlaunch and for nothing else on the machine; what the disk held is copied
out before the namespace ends.
"""

import shutil
import subprocess

import pytest

from tests.launching import RANK_PROGRAM, ROOT, dlaunch_argv

FILL = r'''
disk=$1 free=$2 out=$3; shift 3
mount -t tmpfs -o size=2M tmpfs "$disk" || exit 99
if [ "$free" -gt 0 ]; then dd if=/dev/zero of="$disk/.reserve" bs=4096 count="$free" 2>/dev/null; fi
dd if=/dev/zero of="$disk/.filler" bs=4096 2>/dev/null
rm -f "$disk/.reserve"
cd "$disk" || exit 99
"$@"
rc=$?
cp -a "$disk/." "$out/"
exit $rc
'''


def on_full_disk(tmp_path, free_pages, *args):
    """Run dlaunch with ``free_pages`` 4 KiB pages free where it writes; (result, what the disk held)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    disk, out = tmp_path / "disk", tmp_path / "after"
    disk.mkdir()
    out.mkdir()
    result = subprocess.run(["unshare", "-m", "bash", "-c", FILL, "fill", str(disk), str(free_pages), str(out),
                             *dlaunch_argv(*args)], capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONPATH": str(ROOT)})
    if result.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs in a private namespace here: {result.stderr.strip()}")
    return result, out


def clear_failure(result, fragment):
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and fragment in result.stderr, result.stderr


@pytest.mark.parametrize("free_pages,missing", [(0, "rank_table.json"), (1, "plan.json")])
def test_a_start_that_cannot_write_leaves_nothing_behind(tmp_path, free_pages, missing):
    result, after = on_full_disk(tmp_path, free_pages, "run", RANK_PROGRAM, "--ranks", "2", "--output-dir", "runs")
    clear_failure(result, f"{missing}: No space left on device; nothing was started")
    assert not (after / "runs").exists()


def test_logs_that_cannot_be_written_stop_the_job(tmp_path):
    result, after = on_full_disk(tmp_path, 8, "run", RANK_PROGRAM, "--ranks", "2", "--console", "all",
                                 "--output-dir", "runs", "--", "--print", "20000", "--sleep", "30")
    clear_failure(result, "log: No space left on device: stopped all 2 rank(s); exit code 1")


def test_a_summary_that_cannot_be_written_is_an_error_even_after_success(tmp_path):
    result, after = on_full_disk(tmp_path, 16, "run", RANK_PROGRAM, "--ranks", "1", "--console", "none",
                                 "--output-dir", "runs", "--",
                                 "--fill-disk", "ballast")
    clear_failure(result, "cannot write the summary")
    assert "all 1 rank(s) exited 0" in result.stderr

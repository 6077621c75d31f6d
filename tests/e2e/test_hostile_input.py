"""Bad and hostile input: every case gets one clear line and a non-zero exit, never a traceback, a hang, an
unbounded read, or a file of somebody else's replaced.  Each case names the hardening item it covers."""

import json
import os
import stat
import subprocess
import sys

import pytest

from tests.conftest import RANK_TABLES, dlaunch
from tests.launching import RANK_PROGRAM, latest_run, run_dlaunch

TABLE_2 = RANK_TABLES / "rank_table_2pcs.json"


def refused(result, fragment, code=2):
    """One clear line naming the mistake, the exit code asked for, no Python traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and fragment in result.stderr, result.stderr


# ---------------------------------------------------------------- 5: numbers that are not durations


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e400", "9" * 5000])
@pytest.mark.parametrize("flag", ["--grace-period", "--hang-timeout"])
def test_non_finite_and_absurd_seconds_are_refused_in_every_layer(tmp_path, flag, value):
    refused(dlaunch("run", "x.py", "--ranks", "2", flag, value, cwd=tmp_path), "out of range")
    env_name = "DLAUNCH_" + flag[2:].upper().replace("-", "_")
    refused(dlaunch("run", "x.py", "--ranks", "2", cwd=tmp_path, env={env_name: value}), f"${env_name}")
    config = tmp_path / "c.yaml"
    config.write_text(f"{flag[2:]}: {'.nan' if value == 'nan' else '.inf' if value == 'inf' else value}\n")
    refused(dlaunch("run", "x.py", "--ranks", "2", "--config", config, cwd=tmp_path), f"{config}:1")


# ---------------------------------------------------------------- 6: one rule for every -o


def test_output_to_a_device_is_written_through_never_replaced(tmp_path):
    """As root, renaming over /dev/null made it a regular file.  The test uses a twin of /dev/null made in its
    own directory (same device numbers), so a regression here can never break the machine's /dev/null."""
    twin = tmp_path / "null"
    try:
        os.mknod(twin, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("cannot make a device node here (not root)")
    before = twin.stat()
    result = dlaunch("gen-ranktable", "--devices", "0-7", "--server-id", "10.0.0.1", "-o", twin, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    after = twin.stat()
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_output_to_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    result = dlaunch("gen-ranktable", "--devices", "0-7", "--server-id", "10.0.0.1", "-o", fifo, cwd=tmp_path)
    received, _ = reader.communicate(timeout=20)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode) and json.loads(received)["server_count"] == "1"


def test_output_through_a_symlink_keeps_the_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    refused(dlaunch("gen-ranktable", "--devices", "0-7", "--server-id", "10.0.0.1", "-o", link, cwd=tmp_path),
            "exists; nothing was written (--force replaces it)")
    assert target.read_text() == "old"
    assert dlaunch("gen-ranktable", "--devices", "0-7", "--server-id", "10.0.0.1", "-o", link, "--force",
                   cwd=tmp_path).returncode == 0
    assert link.is_symlink() and json.loads(target.read_text())["server_count"] == "1"


@pytest.mark.parametrize("command", [
    ["gen-ranktable", "--devices", "0-7", "--server-id", "10.0.0.1"],
    ["merge-ranktable", str(TABLE_2)],
])
def test_existing_files_need_force_and_get_the_umask_mode(tmp_path, command):
    out = tmp_path / "t.json"
    result = subprocess.run([sys.executable, "-c", "import os, sys; os.umask(0o022); from launcher.cli import main; "
                             "sys.exit(main(sys.argv[1:]))", *command, "-o", str(out)],
                            cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(
                                RANK_TABLES.parent)})
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    refused(dlaunch(*command, "-o", out, cwd=tmp_path), "--force replaces it")


def test_report_never_writes_into_a_run_directory(tmp_path):
    out = tmp_path / "runs"
    assert run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, cwd=tmp_path).returncode == 0
    run_dir = latest_run(out)
    summary_before = (run_dir / "summary.json").read_text()
    for target in (run_dir / "summary.json", run_dir / "rank_000" / "output.log", run_dir / "new.html"):
        refused(dlaunch("report", run_dir, "-o", target, "--force", cwd=tmp_path), "inside the run directory")
    assert (run_dir / "summary.json").read_text() == summary_before


# ---------------------------------------------------------------- 8: "latest" belongs to dlaunch


def test_run_id_latest_is_reserved(tmp_path):
    refused(dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--run-id", "latest", "--output-dir", tmp_path / "runs",
                    cwd=tmp_path), "--run-id latest is reserved")
    assert not (tmp_path / "runs").exists()


def test_a_file_named_latest_is_never_replaced(tmp_path):
    out = tmp_path / "runs"
    out.mkdir()
    (out / "latest").write_text("my notes")
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, cwd=tmp_path)
    assert result.returncode == 0
    assert (out / "latest").read_text() == "my notes"
    assert "is not dlaunch's link" in result.stderr


# ---------------------------------------------------------------- 10: hostile rank tables


def _table_with(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _hostile_tables(tmp_path):
    base = json.loads(TABLE_2.read_text())
    as_text = json.dumps(base)
    return {
        "deep": ("[" * 100000 + "]" * 100000, "nested deeper than"),
        "big number": (as_text.replace('"rank_id": "0"', '"rank_id": ' + "9" * 5000), "an integer of 5000 digits"),
        "big string": (as_text.replace('"rank_id": "0"', '"rank_id": "' + "9" * 5000 + '"'), "below 10^9"),
        "surrogate": (as_text.replace(base["server_list"][0]["server_id"], "\\ud800x"), "lone UTF-16 surrogate"),
        "nan": (as_text.replace('"server_count": "1"', '"server_count": NaN'), "NaN"),
        "infinity": (as_text.replace('"server_count": "1"', '"server_count": 1e999'), "1e999"),
    }


@pytest.mark.parametrize("case", ["deep", "big number", "big string", "surrogate", "nan", "infinity"])
def test_hostile_rank_tables_get_clear_errors(tmp_path, case):
    text, fragment = _hostile_tables(tmp_path)[case]
    path = _table_with(tmp_path, "t.json", text)
    result = dlaunch("validate-ranktable", path, cwd=tmp_path, timeout=30)
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr
    assert fragment in result.stdout + result.stderr
    as_json = dlaunch("validate-ranktable", "--json", path, cwd=tmp_path, timeout=30)
    json.loads(as_json.stdout, parse_constant=pytest.fail)   # strict JSON: no bare NaN or Infinity


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_rank_tables_that_are_not_regular_files(tmp_path, special):
    if special == "fifo":
        special = tmp_path / "fifo"
        os.mkfifo(special)
    result = dlaunch("validate-ranktable", special, cwd=tmp_path, timeout=20)
    refused(result, "not a regular file")
    refused(dlaunch("run", "x.py", "--rank-table", special, cwd=tmp_path, timeout=20), "not a regular file")


def test_control_and_bidi_characters_are_escaped_when_printed(tmp_path):
    table = json.loads(TABLE_2.read_text())
    table["server_list"][0]["server_id"] = "10.0.0.1\u202egpj.exe\x1b[31m"
    path = _table_with(tmp_path, "t.json", json.dumps(table))
    shown = dlaunch("validate-ranktable", path, cwd=tmp_path)
    plan = dlaunch("run", RANK_PROGRAM, "--rank-table", path, "--dry-run", cwd=tmp_path)
    for output in (shown.stdout, plan.stdout):
        assert "\\u202e" in output and "\\x1b" in output
        assert "\u202e" not in output and "\x1b" not in output


# ---------------------------------------------------------------- 11: hostile YAML configs

LAUGHS = "a: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcdefg", "bcdefgh")) + \
    "ranks: [" + ",".join(["*h"] * 9) + "]\n"


@pytest.mark.parametrize("text,fragment", [
    (LAUGHS, "too large or too deeply nested"),
    ('ranks: !!python/object/apply:os.system ["echo pwned"]\n', "plain YAML values only"),
    ("ranks: " + "[" * 100000 + "]" * 100000 + "\n", "nested too deeply"),
    ("ranks: " + "9" * 5000 + "\n", "unusable value"),
    ("# filler\n" * 200000, "more than the 1 MiB"),
])
def test_hostile_configs_get_clear_errors_at_once(tmp_path, text, fragment):
    config = _table_with(tmp_path, "c.yaml", text)
    result = dlaunch("run", "x.py", "--config", config, cwd=tmp_path, timeout=20)
    refused(result, fragment)
    assert "pwned" not in result.stdout
    assert len(result.stderr) < 1000


# ---------------------------------------------------------------- 12: numbers and special files on the CLI


@pytest.mark.parametrize("args,fragment", [
    (["--ranks", "9" * 22], "more ranks than one host runs"),
    (["--ranks", "100000000"], "more ranks than one host runs"),
    (["--devices", "0-999999999"], "at most 6 digits"),
    (["--devices", "9" * 5000], "at most 6 digits"),
    (["--ranks", "2", "--hccn-conf", "/dev/zero"], "not a regular file"),
    (["--ranks", "2", "--env-file", "/dev/zero"], "not a regular file"),
    (["--ranks", "2", "--max-restarts", "9" * 5000], "expected a whole number"),
])
def test_absurd_numbers_and_special_files_on_the_command_line(tmp_path, args, fragment):
    refused(dlaunch("run", RANK_PROGRAM, *args, cwd=tmp_path, timeout=20), fragment)
    assert len(dlaunch("run", RANK_PROGRAM, *args, cwd=tmp_path, timeout=20).stderr) < 1000


def test_absurd_rank_start_for_cluster(tmp_path):
    refused(dlaunch("cluster", RANK_PROGRAM, "--rank-table", TABLE_2, "--rank-start", "9" * 5000, cwd=tmp_path),
            "expected a whole number")


# ---------------------------------------------------------------- 13: secrets wherever dlaunch writes


def test_secrets_inside_key_value_lists_are_masked(tmp_path):
    out = tmp_path / "runs"
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--output-dir", out, "--env", "DB_PASS=pw2", cwd=tmp_path,
                         env={"DLAUNCH_ENV": "X_TOKEN=tok1\nPLAIN=visible"})
    assert result.returncode == 0, result.stderr
    run_dir = latest_run(out)
    for text in ((run_dir / "rank_000" / "env.log").read_text(), (run_dir / "plan.json").read_text()):
        assert "tok1" not in text and "pw2" not in text
    assert "DLAUNCH_ENV=X_TOKEN=****" in (run_dir / "rank_000" / "env.log").read_text()
    shown = dlaunch("config", "show", cwd=tmp_path, env={"DLAUNCH_ENV": "X_TOKEN=tok1"})
    assert shown.returncode == 0 and "tok1" not in shown.stdout and "X_TOKEN=****" in shown.stdout


def test_a_generated_script_never_holds_a_secret(tmp_path):
    refused(dlaunch("script", "run.sh", "train.py", "--ranks", "2", "--env", "API_KEY=abc", "-o", "-",
                    cwd=tmp_path), "looks like a secret")

"""This host's share of a job (launcher/plan/share.py): one function from a table source to the validated
table and this host's server, used by run, cluster, the --ssh head, check-network, scripts and restarts."""

import ast
from pathlib import Path

import pytest

from launcher.errors import UsageError
from launcher.plan.share import TableSource, host_share
from launcher.table.model import dumps
from tests.launching import write_rank_table

ROOT = Path(__file__).resolve().parents[3]


def test_a_file_gives_the_server_its_rank_start_names(tmp_path):
    path = write_rank_table(tmp_path / "rt.json")
    share = host_share(TableSource(path=str(path), rank_start=8, what=f"rank table {path}"), {})
    assert (share.index, share.table.servers[1].server_id, share.text) == (1, "127.0.0.3", path.read_text())


def test_a_text_is_read_as_the_file_would_be(tmp_path):
    path = write_rank_table(tmp_path / "rt.json")
    from_file = host_share(TableSource(path=str(path), server_id="127.0.0.2", what="f"), {})
    from_text = host_share(TableSource(text=path.read_text(), server_id="127.0.0.2", what="t"), {})
    assert (from_text.index, dumps(from_text.table)) == (from_file.index, dumps(from_file.table)) == \
        (0, dumps(from_file.table))


def test_every_host_picks_no_server(tmp_path):
    path = write_rank_table(tmp_path / "rt.json")
    assert host_share(TableSource(path=str(path), what="t"), {}, every_host=True).index is None


def test_errors_name_the_source(tmp_path):
    with pytest.raises(UsageError, match=r"^the table from a front: "):
        host_share(TableSource(text="{", what="the table from a front"), {})
    path = write_rank_table(tmp_path / "rt.json", hosts=("a", "b", "c"))
    with pytest.raises(UsageError, match=r"--rank-start 5"):
        host_share(TableSource(path=str(path), rank_start=5, what="t"), {})


def test_the_rules_of_the_profile_apply(tmp_path):
    path = write_rank_table(tmp_path / "rt.json", devices_per_host=3)   # 3 devices a host: not an HCCL shape
    with pytest.raises(UsageError, match=r"rank table rt"):
        host_share(TableSource(path=str(path), server_id="127.0.0.2", what="rank table rt"), {})
    assert host_share(TableSource(path=str(path), server_id="127.0.0.2", profile="structure", what="t"), {}).index == 0


def test_one_host_refuses_a_table_of_several_with_its_message(tmp_path):
    path = write_rank_table(tmp_path / "rt.json")
    with pytest.raises(UsageError, match=r"^2 servers$"):
        host_share(TableSource(path=str(path), what="t"), {}, one_host=lambda table: f"{len(table.servers)} servers")


def test_no_other_module_selects_a_server():
    """One way to say "this host's share": nothing but plan/share.py picks a server out of a table."""
    callers = []
    for path in sorted((ROOT / "launcher").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == \
                    "select_server":
                callers.append(str(path.relative_to(ROOT)))
    assert callers == ["launcher/plan/share.py"]


@pytest.mark.parametrize("content", [None, "", '{"version": "1.0", "server_list": [', "dir"])
def test_a_pods_rank_table_that_is_no_table_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, content):
    """Issue 38, item 21: RANK_TABLE_FILE missing, empty, truncated or a directory was a traceback and exit 1
    after the whole --join-timeout."""
    from launcher.cli import main
    from launcher.table import share

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(share, "SETTLED", 0.2, raising=False)
    (tmp_path / "train.py").write_text("")
    table = tmp_path / "hccl.json"
    if content == "dir":
        table.mkdir()
    elif content is not None:
        table.write_text(content)
    monkeypatch.setenv("RANK_TABLE_FILE", str(table))
    assert main(["cluster", "train.py", "--join-timeout", "0.5", "--dry-run"]) == 2
    err = capsys.readouterr().err
    *waited, said = err.splitlines()   # a notice while it waited for the operator, then one line
    assert len(waited) <= 1 and "Traceback" not in err, err
    assert said.startswith("dlaunch: error: ") and f"{table}" in said and "RANK_TABLE_FILE" in said, err

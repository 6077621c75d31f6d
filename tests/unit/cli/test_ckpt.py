"""``dlaunch ckpt``'s command line (the work is launcher/observe/ckpt.py's, tested end to end with torch)."""

import json

from launcher.cli import main

DONE = {"step": "mp-1_10", "from_ranks": 4, "ranks": 2, "sliced": 3, "files": ["a.pt", "b.pt"], "bytes": 2048,
        "output_dir": "/runs/two"}


def test_reshard_says_what_it_did_in_words_and_json_only_when_asked(tmp_path, monkeypatch, capsys):
    """Issue 38, item 14: ``ckpt reshard`` printed its report as raw JSON."""
    from launcher.observe import ckpt

    monkeypatch.setattr(ckpt, "reshard", lambda run_dir, ranks, output, step: dict(DONE))
    assert main(["ckpt", "reshard", str(tmp_path), "--ranks", "2", "-o", "two"]) == 0
    said = capsys.readouterr()
    assert "{" not in said.err and not said.out, said
    assert said.err == ("dlaunch: resharded mp-1_10 of 4 rank(s) for 2 rank(s): 3 sliced tensor(s), 2 file(s), 2048 "
                        "bytes -> /runs/two (resume with dlaunch run --ranks 2 --resume /runs/two)\n")
    assert main(["ckpt", "reshard", str(tmp_path), "--ranks", "2", "-o", "two", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == DONE

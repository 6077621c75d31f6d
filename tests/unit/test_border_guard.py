"""Outside text crosses one border (launcher/base/border.py): no other module parses JSON, turns a regular
expression's digits into an int, or opens a file of a rank's or an operator's itself.

Each rule lists the places allowed to break it and why; a new place fails here until it goes through the border
or is added with its reason.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "launcher"
BORDER = "base/border.py"

# json.load(s) outside the border
JSON_ALLOWED = {
    "execute/local/standby.py": "dlaunch's own request over its own socket pair, in a script that imports nothing "
                                "of dlaunch",
}

# int() of a regular expression's group: the text it came from is bounded so int() cannot fail
INT_OF_MATCH_ALLOWED = {
    "base/numlists.py": "its digits are checked ASCII and at most MAX_NUMBER_DIGITS long just before",
    "checkpoint/api.py": "DLAUNCH_RESUME_STEP, which dlaunch itself sets",
    "execute/local/proctree.py": "/proc, written by the kernel",
    "rundir/paths.py": "a file name (255 bytes at most) matched by ASCII [0-9] digits",
    "observe/hangview.py": "a file name (255 bytes at most) matched by ASCII [0-9] digits",
    "host/devices.py": "a /dev entry's name (255 bytes at most)",
    "execute/job/coordinator.py": "the rank keys of stacks this dlaunch gathered (hosts.py made them from ints)",
    "execute/job/hosts.py": "the rank keys of stacks this dlaunch gathered (from ints)",
    "checkpoint/names.py": "a file name (255 bytes at most): every digit \\d matches is one int() reads",
}

# open() and os.open() where a rank's or an operator's files are read: only through the border
READER_MODULES = (
    "execute/local/hangs.py", "execute/local/hangclock.py", "execute/local/notice.py",
    "execute/local/stepreader.py", "execute/local/recovery.py", "execute/local/watches.py",
    "host/mindcluster.py", "host/health.py", "host/release.py", "host/hccn.py",
    "observe/metrics.py", "observe/torchft.py", "observe/processes.py", "observe/stepchart.py",
    "base/steps.py", "base/stragglers.py", "checkpoint/gasp.py",
)
OPEN_ALLOWED = {
    "execute/local/hangs.py": "writes the stack dumps it takes (py-spy's output) into the run directory",
    "host/health.py": "the storage probe writes its own file in the run directory",
    "checkpoint/gasp.py": "the rank writes its own notice.saved (the rank's side, not a reader)",
}


def _calls(relative: str):
    tree = ast.parse((ROOT / relative).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, ast.unparse(node.func)


def _modules():
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py"))


def _is_match_group(node) -> bool:
    """``m.group(1)``, ``found[1]``, ``match["step"]``: what a regular expression found (a subscript by a
    number, or by a name on something called a match)."""
    if isinstance(node, ast.Call):
        return ast.unparse(node.func).endswith(".group")
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)):
        return False
    return isinstance(node.slice.value, int) or ast.unparse(node.value) in ("m", "match")


def test_json_is_parsed_only_at_the_border():
    found = [f"{module}:{node.lineno}" for module in _modules() if module != BORDER and module not in JSON_ALLOWED
             for node, name in _calls(module) if name in ("json.load", "json.loads")]
    assert found == [], "parse outside JSON with launcher.base.border.parse_json/read_json"


def test_no_int_of_what_a_pattern_found_outside_the_border():
    found = [f"{module}:{node.lineno} {ast.unparse(node)}" for module in _modules()
             if module != BORDER and module not in INT_OF_MATCH_ALLOWED
             for node, name in _calls(module) if name == "int" and node.args and _is_match_group(node.args[0])]
    assert found == [], "read digits with launcher.base.border.ascii_int (\\d matches more than int() takes)"


def test_readers_open_no_file_themselves():
    found = [f"{module}:{node.lineno} {ast.unparse(node)[:60]}" for module in READER_MODULES
             if module not in OPEN_ALLOWED
             for node, name in _calls(module) if name in ("open", "os.open", "io.open", "os.fdopen")]
    assert found == [], "read a rank's or an operator's file with launcher.base.border.read_* or open_fd"


def test_the_allowances_are_still_needed():
    """An allowance whose module no longer breaks the rule is removed, so the list stays the truth."""
    json_users = {m for m in JSON_ALLOWED if any(n in ("json.load", "json.loads") for _, n in _calls(m))}
    int_users = {m for m in INT_OF_MATCH_ALLOWED
                 if any(n == "int" and c.args and _is_match_group(c.args[0]) for c, n in _calls(m))}
    open_users = {m for m in OPEN_ALLOWED if any(n in ("open", "os.open", "io.open") for _, n in _calls(m))}
    assert (json_users, int_users, open_users) == (set(JSON_ALLOWED), set(INT_OF_MATCH_ALLOWED), set(OPEN_ALLOWED))


def test_every_registered_reader_exists():
    import importlib

    from launcher.base.border import READERS

    for name, where in READERS.items():
        module, _, function = where.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), name

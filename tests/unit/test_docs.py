"""The README and docs/ cannot drift from the program: every dlaunch command they show parses.

Each fenced shell block of README.md and docs/*.md is read; every ``dlaunch ...`` command in it
(after ``&&``, ``|`` or ``;`` too, continuation lines joined) goes through the real parser, split at
``--`` as ``launcher.cli.main`` splits it. An unknown flag, a flag given a bad value or a command that
no longer exists fails the test with the page and line. Links between the pages must resolve too.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from launcher.cli.parsers import SCRIPT_ARG_COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCE = re.compile(r"^```(bash|sh|shell|console)?\s*$")
PROGRAM_NAMES = {"dlaunch", ".venv/bin/dlaunch"}
README_MAX_LINES = 200


def shell_lines(page: Path):
    """(line number, command line) for every line of the page's shell blocks, continuations joined."""
    fenced, shell, pending, start = False, False, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            shell = fenced and bool(SHELL_FENCE.match(line.strip()))
            continue
        if not shell:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""


def dlaunch_commands(line: str):
    """The argument lists of every dlaunch command in one shell line (comments and env prefixes dropped)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return
    command: list[str] = []
    for word in [*words, ";"]:
        if word in {"&&", "||", "|", ";"}:
            yield from _arguments(command)
            command = []
        else:
            command.append(word)


def _arguments(words: list[str]):
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]
    if words[:3] == ["python", "-m", "launcher"] or words[:3] == [".venv/bin/python", "-m", "launcher"]:
        yield words[3:]
    elif words and words[0] in PROGRAM_NAMES:
        yield words[1:]


def examples():
    found = []
    for page in PAGES:
        for number, line in shell_lines(page):
            for argv in dlaunch_commands(line):
                found.append(pytest.param(argv, id=f"{page.relative_to(ROOT)}:{number}"))
    return found


EXAMPLES = examples()


def test_the_pages_show_commands():
    """The extraction itself works: the pages show dozens of dlaunch commands, of many commands."""
    commands = {argv[0] for argv in (p.values[0] for p in EXAMPLES) if argv and not argv[0].startswith("-")}
    assert len(EXAMPLES) > 30
    assert {"run", "cluster", "validate-ranktable", "msrun", "status", "script"} <= commands


@pytest.mark.parametrize("argv", EXAMPLES)
def test_every_shown_command_parses(argv, capsys):
    parser = build_parser()
    if argv and argv[0] in SCRIPT_ARG_COMMANDS and "--" in argv:
        argv = argv[:argv.index("--")]
    try:
        args, extras = parser.parse_known_args(argv)
    except SystemExit as exc:
        assert exc.code == 0, f"dlaunch {shlex.join(argv)}: {capsys.readouterr().err.strip()}"
        return
    if args.command != "config":   # config show takes launch flags, judged by run's or cluster's parser
        assert not extras, f"dlaunch {shlex.join(argv)}: not recognised: {extras}"


def _anchors(page: Path) -> set[str]:
    slugs = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: link to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name}: no heading for #{anchor} in {linked.name}"


def test_readme_fits_two_screens():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES


def test_the_readmes_table_lists_every_page_of_docs():
    """Issue 38, item 14: docs/containers-and-slurm.md was missing from the README's table of pages."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| \[docs/([\w.-]+\.md)\]\(docs/\1\) \|", readme, flags=re.M))
    assert sorted(page.name for page in (ROOT / "docs").glob("*.md") if page.name not in listed) == []

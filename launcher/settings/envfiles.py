"""``--env KEY=VALUE`` and ``--env-file`` parsing: the variables a user adds for every rank."""

from __future__ import annotations

import re

from launcher.errors import UsageError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_ENV_FILE_BYTES = 1 << 20


def parse_assignment(text: str, where: str) -> tuple[str, str]:
    if "\0" in text:   # an environment variable cannot carry one: refused before anything is made
        raise UsageError(f"{where}: {text[:60]!r} holds a NUL byte (\\0), which no environment variable can "
                         f"carry")
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not NAME.match(name):
        raise UsageError(f"{where}: expected KEY=VALUE with a variable name, got {text[:60]!r}")
    if "\0" in value:   # no environment can hold it: refused here, before a run directory exists
        raise UsageError(f"{where}: the value of {name} holds a NUL byte, which no environment variable can hold")
    return name, value


def read_env_file(path: str) -> list[tuple[str, str]]:
    """KEY=VALUE lines; blank lines and # comments skipped; ``export`` allowed; values taken literally
    except that one pair of surrounding quotes is removed."""
    from launcher.base.userfiles import read_text

    lines = read_text(path, "--env-file", MAX_ENV_FILE_BYTES).splitlines()
    pairs = []
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export "):].lstrip()
        name, value = parse_assignment(stripped, f"{path}:{number}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        pairs.append((name, value))
    return pairs

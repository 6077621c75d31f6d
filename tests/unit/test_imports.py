"""The package's imports point one way down the pipeline, and none goes round in a circle.

The folders of ``launcher/`` are the stages: each top-level package is one layer, lowest first, and a module
may import modules of its own package or of packages below it, never above. Every import counts, including
those inside functions (dlaunch imports lazily for start-up time, which once hid a cycle cli -> remote -> cli)
and those under ``if TYPE_CHECKING:`` (a type annotation against a module above is still a dependency, and
once hid the circle plan -> table -> userfiles -> rundir -> plan). Nothing but ``launcher.__main__`` imports
the CLI, no two folders import each other round a circle, and the tree stays readable: few modules directly
in ``launcher/``, none over 500 lines.
"""

import ast
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "launcher"

# Lowest first, one pattern per package. The training side (launcher.checkpoint, with launcher.heartbeat, its
# public short path) sits above the run directory's names: it imports nothing of the launcher's upper layers,
# so a training script that imports it stays light, and the launcher's stages may read what it writes.
TRAINING_SIDE = ["launcher.checkpoint*", "launcher.heartbeat"]
LAYERS = [
    ["launcher", "launcher.contract", "launcher.errors", "launcher.base*"],   # no dlaunch concept
    ["launcher.host*"],       # this machine and its scheduler
    ["launcher.table*"],      # rank tables: model, rules, build
    ["launcher.rundir*"],     # a run directory's names, creating and reading one
    TRAINING_SIDE,
    ["launcher.settings*"],   # what a user says: options, layers, the request
    ["launcher.plan*"],       # this host's share, its settings, the plan
    ["launcher.execute*"],    # carrying the plan out
    ["launcher.netcheck*"],   # check-network (over SSH like execute.ssh)
    ["launcher.observe*"],    # reading runs back
    ["launcher.scripts*"],    # generated launch scripts
    ["launcher.cli*", "launcher.__main__"],
]
MAX_TOP_LEVEL_MODULES = 8
MAX_MODULE_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer_of(module: str) -> int:
    for index, patterns in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns):
            return index
    raise AssertionError(f"{module} is in no layer of tests/unit/test_imports.py: place it")


def imports_of(module: str) -> set[str]:
    """Every launcher module ``module`` imports, anywhere in its body."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # "from launcher.base import console" imports the module launcher.base.console
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        found.update(name for name in names if name in MODULES and name != module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_every_layer_entry_names_a_module():
    stale = [pattern for patterns in LAYERS for pattern in patterns
             if not any(fnmatch.fnmatchcase(module, pattern) for module in MODULES)]
    assert not stale, f"tests/unit/test_imports.py places modules that do not exist: {stale}"


def test_the_contract_imports_nothing_of_the_launcher():
    # both sides of the launch import it: a training script must not pull in the launcher through it
    assert GRAPH["launcher.contract"] == set()


def test_the_training_side_is_one_package():
    # every module ranks import lives in launcher/checkpoint/ (launcher.heartbeat only re-exports), and
    # what the package imports outside itself is the lowest floor
    training = {m for m in MODULES if any(fnmatch.fnmatchcase(m, p) for p in TRAINING_SIDE)}
    assert GRAPH["launcher.heartbeat"] == {"launcher.checkpoint.heartbeat"}
    outside = {t for m in training for t in GRAPH[m] if t not in training}
    assert {layer_of(t) for t in outside if t != "launcher.rundir.paths"} == {0}, sorted(outside)
    # what a training script imports (the public API) needs not even the run directory's names
    public = {"launcher.checkpoint", "launcher.checkpoint.api", "launcher.heartbeat"}
    reached, todo = set(), list(public)
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(GRAPH[module])
    assert {layer_of(m) for m in reached - training} <= {0}, sorted(reached - training)
    assert not [m for m in MODULES if m.startswith("launcher.ckpt") or m == "launcher.resume"]


def test_the_checker_sees_type_checking_imports():
    # results annotates against the plan only for the type checker: still a dependency
    assert "launcher.plan.make" in GRAPH["launcher.execute.results"]


def test_imports_point_down_the_layers():
    upward = [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
              for m, targets in GRAPH.items() for t in sorted(targets) if layer_of(t) > layer_of(m)]
    assert not upward, "imports against the order:\n" + "\n".join(upward)


def test_nothing_imports_the_cli():
    outside = [f"{m} imports {t}" for m, targets in GRAPH.items() for t in targets
               if t.startswith("launcher.cli") and not (m.startswith("launcher.cli") or m == "launcher.__main__")]
    assert not outside, "\n".join(outside)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components: any component of more than one node is a circle."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_cycle():
    assert circles(GRAPH) == []


def folder(module: str) -> str:
    """The folder a module lives in, as a dotted name (a package's ``__init__`` lives in its own folder)."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def folder_graph() -> dict[str, set[str]]:
    """Folder -> the folders its modules import. A package and its own subfolders are one family and are left
    out (execute/attempts drives local/, job/ and ssh/, which report in execute/results' model): the circles
    looked for are between folders side by side, or between a folder and another family."""
    graph: dict[str, set[str]] = {folder(m): set() for m in MODULES}
    for module, targets in GRAPH.items():
        for target in targets:
            here, there = folder(module), folder(target)
            if not (there == here or there.startswith(here + ".") or here.startswith(there + ".")):
                graph[here].add(there)
    return graph


def test_no_circle_between_folders():
    assert circles(folder_graph()) == []


def test_the_folder_check_sees_a_circle():
    # the circle the old layout hid: table/build -> netcheck/tool -> execute/ssh -> plan -> table
    graph = {"launcher.table": {"launcher.netcheck"}, "launcher.netcheck": {"launcher.execute.ssh"},
             "launcher.execute.ssh": {"launcher.plan"}, "launcher.plan": {"launcher.table"}}
    assert circles(graph) == [sorted(graph)]


def test_few_modules_directly_in_the_package():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_the_checker_sees_imports_inside_functions():
    # cli.run imports the executor only inside cmd_run: the walk must still see it
    assert "launcher.execute.attempts" in GRAPH["launcher.cli.run"]


def test_no_docstring_holds_a_lone_surrogate():
    """Python 3.13 cannot import a module whose docstring holds a lone UTF-16 surrogate (it cleans docstrings
    through UTF-8 at compile time): ``"\\ud800"`` in table/model.py's once stopped every dlaunch command there.
    Written as an escape (``\\\\ud800``), the text says the same."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False) or ""
                if any("\ud800" <= char <= "\udfff" for char in doc):
                    found.append(f"{path.relative_to(ROOT)}: {getattr(node, 'name', 'module')}")
    assert found == []

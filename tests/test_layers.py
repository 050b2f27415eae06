"""The package's import graph: no circle, local imports included, and no layer importing the
one above it (algorithms never import the Ray runtime; actor specs never import the registry)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "drlcli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """``{module: drlcli modules it imports anywhere in its file}`` (``TYPE_CHECKING`` blocks
    left out: they never run)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for child in block.body
            for node in ast.walk(child)
        }
        found = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            found |= {target for target in targets if target in modules and target != name}
        graph[name] = found
    return graph


def test_no_module_imports_itself_through_others():
    graph = import_graph()
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                circle = path[path.index(target) :] + [target]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_lower_layers_never_import_higher_ones():
    graph = import_graph()
    rules = [
        ("drlcli.algos", "drlcli.runtime", "an algorithm package never imports the Ray runtime"),
        ("drlcli.actors.spec", "drlcli.algos", "ActorSpec is plain data the registry builds"),
        ("drlcli.actors.contract", "drlcli.algos", "the actor contract is the algorithms' base"),
        ("drlcli.off_policy", "drlcli.algos", "the off-policy layer is generic over its learner"),
        ("drlcli.off_policy", "drlcli.runtime", "the off-policy layer is plain Python"),
    ]
    # The types every layer may name (the Algorithm entry, RunShape, MemoryNeed, the contexts):
    # no algorithm's code.
    shared_types = {"drlcli.algos.algorithm"}
    for lower, higher, why in rules:
        offending = {
            f"{module} -> {target}"
            for module, targets in graph.items()
            if module == lower or module.startswith(lower + ".")
            for target in targets - shared_types
            if target == higher or target.startswith(higher + ".")
        }
        assert not offending, f"{why}: {sorted(offending)}"


def test_only_the_registry_imports_an_algorithms_entry():
    """``algos/<name>/algorithm.py`` declares the algorithm for the registry; the algorithm's
    own learner, actor and the rest sit below it (the FlashSAC learner used to import it)."""
    graph = import_graph()
    entries = {name for name in graph if name.startswith("drlcli.algos.") and name.count(".") == 3}
    entries = {name for name in entries if name.endswith(".algorithm")}
    offending = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module != "drlcli.algos.registry"
        for target in targets & entries
    )
    assert entries and not offending, offending


def test_the_graph_sees_local_imports():
    """The check would miss the old circle if it read only top-level imports."""
    graph = import_graph()
    assert "drlcli.algos.registry" in graph["drlcli.actors.semantics"]
    assert "drlcli.actors.contract" in graph["drlcli.actors.spec"]  # build_policy_actor's


def test_no_function_of_the_runtime_takes_more_than_eight_parameters():
    """The runtime passes records (``RunContext``, ``LearnerContext``, ``TrainOptions``), not
    long argument lists that every layer re-types."""
    crowded = []
    for path in sorted((PACKAGE / "runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args
                names = [
                    a.arg
                    for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                    if a.arg not in ("self", "cls")
                ]
                if len(names) > 8:
                    crowded.append(f"{path.name}:{node.lineno} {node.name} ({len(names)})")
    assert crowded == []

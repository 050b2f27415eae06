"""The package's import graph, as docs/architecture.md draws it: layers from the foundations up
to the commands, no arrow back up (type-checking imports included), no circle, and one name per
module."""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "drlcli"

# Lowest first: a module imports its own layer and those below, never one above. A module is
# in the layer of the longest prefix that names it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundations",
        (
            "drlcli.errors",
            "drlcli.atomic",
            "drlcli.config_fields",
            "drlcli.flat_parameters",
            "drlcli.normalization",
            "drlcli.rollout",
            "drlcli.run_names",
            "drlcli.parameter_averaging",
            "drlcli.observations",
            "drlcli.success",
            "drlcli.env_facts",
            "drlcli.env_state",
            "drlcli.topology",
            "drlcli.seed_statistics",
        ),
    ),
    ("policy actors", ("drlcli.actors",)),
    ("algorithms", ("drlcli.algos", "drlcli.off_policy")),
    ("registry", ("drlcli.algos.registry",)),
    (
        "config and tasks",
        ("drlcli.config", "drlcli.env_wrappers", "drlcli.envs", "drlcli.preset_catalog"),
    ),
    ("records", ("drlcli.checkpoints", "drlcli.metrics", "drlcli.evaluation")),
    ("runtime", ("drlcli.runtime", "drlcli.sinks")),
    (
        "commands",
        (
            "drlcli.__main__",
            "drlcli.cli",
            "drlcli.report",
            "drlcli.play",
            "drlcli.export",
            "drlcli.doctor",
            "drlcli.compare",
            "drlcli.tune",
            "drlcli.dashboard",
        ),
    ),
]
# "importer -> imported" arrows that run up a layer, each with its reason in a comment at the
# import (at most 3).
ALLOWED_ARROWS_UP: set[str] = set()
# The per-algorithm packages' shared file names (algos/<name>/learner.py, ...): the convention,
# not two things under one name.
PER_ALGORITHM_NAMES = {"actor", "algorithm", "critic", "learner", "params"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def import_graph(type_checking: bool = True) -> dict[str, set[str]]:
    """``{module: drlcli modules it imports anywhere in its file}``, the imports of
    ``TYPE_CHECKING`` blocks included unless ``type_checking`` is False (read once: callers
    must not change it)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = set()
        if not type_checking:
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


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of ``module``'s layer (the longest prefix naming it)."""
    matches = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert matches, f"{module} is in no layer of tests/test_layers.py: add it to LAYERS"
    return max(matches)[1]


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


def test_no_layer_imports_one_above_it():
    graph = import_graph()
    arrows_up = {
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module != "drlcli"
        for target in targets
        if target != "drlcli" and layer_of(target) > layer_of(module)
    }
    assert arrows_up <= ALLOWED_ARROWS_UP, sorted(arrows_up - ALLOWED_ARROWS_UP)
    assert len(ALLOWED_ARROWS_UP) <= 3


# The command line's dispatchers import every command; no command imports another.
DISPATCHERS = {"drlcli.__main__", "drlcli.cli"}


def test_no_command_imports_another_command():
    """A command is a module or package of the commands layer (``drlcli.play``,
    ``drlcli.tune``); what two commands share lives below them, in the records layer
    (``checkpoints.policy``'s ``load_play_actor``, ``metrics.runs``, ``metrics.seed_runs``,
    ``checkpoints.audit``)."""
    graph = import_graph()
    commands = len(LAYERS) - 1

    def command_of(module: str) -> str:
        return ".".join(module.split(".")[:2])

    crossing = sorted(
        f"{module} -> {imported}"
        for module, targets in graph.items()
        if module != "drlcli" and module not in DISPATCHERS and layer_of(module) == commands
        for imported in targets
        if imported != "drlcli"
        and layer_of(imported) == commands
        and command_of(imported) != command_of(module)
    )
    assert crossing == []


def test_every_module_is_in_a_layer_and_every_layer_has_modules():
    graph = import_graph()
    used = Counter(LAYERS[layer_of(module)][0] for module in graph if module != "drlcli")
    assert set(used) == {name for name, _ in LAYERS}


def test_no_module_or_folder_name_stands_for_two_things():
    names = Counter(
        path.stem
        for path in PACKAGE.rglob("*.py")
        if path.stem != "__init__" and path.stem not in PER_ALGORITHM_NAMES
    )
    names.update(
        path.name for path in PACKAGE.rglob("*") if path.is_dir() and "__" not in path.name
    )
    assert [name for name, count in names.items() if count > 1] == []


def test_algorithms_are_plain_python_below_the_runtime():
    """The layers say it too; named here because it is the rule a new algorithm meets first."""
    graph = import_graph()
    offending = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith(("drlcli.algos.", "drlcli.off_policy."))
        for target in targets
        for higher in ("drlcli.runtime", "drlcli.config", "drlcli.checkpoints")
        if target == higher or target.startswith(higher + ".")
    )
    assert offending == []


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


def test_the_graph_sees_local_and_type_checking_imports():
    """The checks would miss an old circle if they read only top-level imports, or only those
    that run."""
    graph = import_graph()
    assert "drlcli.algos.registry" in graph["drlcli.checkpoints.semantics"]  # actor_kind's
    assert "drlcli.actors.contract" in graph["drlcli.actors.spec"]  # build_policy_actor's
    assert "drlcli.env_facts" in graph["drlcli.algos.entry_types"]  # under TYPE_CHECKING
    assert "drlcli.env_facts" not in import_graph(type_checking=False)["drlcli.algos.entry_types"]


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


def test_ppos_maths_is_pure():
    """Every formula of the PPO update lives in ``algos/ppo/maths.py``, which reads its
    hyper-parameters and nothing else of drl: no learner, no runtime, no I/O."""
    assert import_graph()["drlcli.algos.ppo.maths"] == {"drlcli.algos.ppo.params"}

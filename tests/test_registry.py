"""The algorithm registry: one place per algorithm, and documentation that cannot drift."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from drlcli.algos.registry import ALGORITHMS, BUILTIN_BUILDERS, actor_kind, get_algorithm
from drlcli.config import Config, EnvConfig, EvaluationConfig
from drlcli.errors import ConfigError
from drlcli.runtime.training import round_loop_class

PACKAGE = Path(__file__).resolve().parent.parent / "drlcli"
METHOD = (PACKAGE.parent / "Method.md").read_text()


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_algorithm_name_is_spelled_outside_algos():
    """Code outside ``algos/`` asks the registry; it never branches on an algorithm's name."""
    names = set(ALGORITHMS)
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {value!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "algos" not in path.relative_to(PACKAGE).parts
        for line, value in _string_constants(path)
        if value in names
    ]
    assert offenders == []


def test_the_scan_would_see_a_name():
    assert (1, "ppo") in _string_constants_of('x = "ppo"\n')


def _string_constants_of(source: str) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"algo: unknown algorithm 'a2c'; choose one of: "):
        get_algorithm("a2c")
    with pytest.raises(ConfigError, match="unknown algorithm None"):
        get_algorithm(None)


@pytest.mark.parametrize("algorithm", ALGORITHMS.values(), ids=list(ALGORITHMS))
def test_each_entry_is_complete_and_consistent(algorithm):
    assert algorithm.builtin_builder in BUILTIN_BUILDERS
    assert actor_kind(algorithm.builtin_builder) == "builtin"
    params = algorithm.params_type()
    spec = algorithm.actor_spec(params, [-1.0, -2.0], [1.0, 2.0])
    assert spec.builder == algorithm.builtin_builder and actor_kind(spec.builder) == "builtin"
    assert algorithm.learner_state_keys and "actor" in algorithm.learner_state_keys
    assert algorithm.metrics and all(algorithm.metrics.values())
    algorithm.check_params(params)  # the defaults pass their own rules
    loop = round_loop_class(algorithm)
    assert callable(loop.run_round) and callable(loop.checkpoint_parts)
    if algorithm.replay_saving is not None:
        assert callable(loop.save_replay) and callable(loop.load_replay)


def test_a_custom_builder_is_custom():
    assert actor_kind("my_robot.policies:build") == "custom"


def _method_table_fields(heading: str) -> set[str]:
    """The backticked field names of the first column of the table under ``heading``."""
    section = METHOD.split(heading, 1)[1]
    table = section.split("\n\n", 2)[1]
    fields = set()
    for row in table.splitlines()[2:]:
        first_cell = row.split("|")[1]
        fields.update(re.findall(r"`([a-z_]+)`", first_cell))
    return fields


@pytest.mark.parametrize(
    ("dataclass_type", "heading"),
    [
        (Config, "### Top level"),
        (EnvConfig, "### `env`"),
        (EvaluationConfig, "### `evaluation`"),
        *[
            (algorithm.params_type, f"### `algo_params` for `algo: {name}`")
            for name, algorithm in ALGORITHMS.items()
        ],
    ],
    ids=["config", "env", "evaluation", *ALGORITHMS],
)
def test_every_config_field_is_in_method_md(dataclass_type, heading):
    documented = _method_table_fields(heading)
    fields = {f.name for f in dataclasses.fields(dataclass_type)}
    assert fields - documented == set(), f"fields missing from Method.md's {heading} table"
    assert documented - fields == set(), f"Method.md's {heading} table names unknown fields"


@pytest.mark.parametrize(
    "dataclass_type",
    [Config, EnvConfig, EvaluationConfig, *(a.params_type for a in ALGORITHMS.values())],
    ids=["config", "env", "evaluation", *ALGORITHMS],
)
def test_every_config_field_carries_its_meaning_where_it_is_defined(dataclass_type):
    import inspect

    source = inspect.getsource(dataclass_type)
    tree = ast.parse(source)
    body = tree.body[0].body
    documented = {
        statement.target.id
        for statement, following in zip(body, body[1:], strict=False)
        if isinstance(statement, ast.AnnAssign)
        and isinstance(following, ast.Expr)
        and isinstance(following.value, ast.Constant)
        and isinstance(following.value.value, str)
    }
    fields = {f.name for f in dataclasses.fields(dataclass_type)}
    assert fields - documented == set()


def _fresh_learner(name: str):
    """(params, a fresh learner's state, obs_dim, action_dim) of a small built-in learner."""
    if name.startswith("ppo"):
        from drlcli.algos.ppo.learner import Learner
        from tests.test_ppo import PARAMS, SPEC

        params = PARAMS if name == "ppo" else dataclasses.replace(PARAMS, value_hidden_sizes=(8,))
        return params, Learner(SPEC, 4, 1, params, seed=0).state_dict(), 4, 1
    if name == "flash_sac":
        from tests.test_flash_sac import SMALL, make_learner
    else:
        from tests.test_sac import SMALL, make_learner
    return SMALL, make_learner().state_dict(), 5, 2


def _nudged(value):
    """Another value of the same kind (a flag flipped, a number or each width plus one), or
    None for a kind left alone (text, None)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        return tuple(v + 1 for v in value)
    return None


FRESH_LEARNERS = ["ppo", "ppo_own_value_widths", "flash_sac", "sac"]


def test_every_algorithm_declares_params_it_has_and_has_its_resume_check_tested():
    for name, algorithm in ALGORITHMS.items():
        params = algorithm.params_type()
        for fixed in algorithm.resume_fixed_params:
            getattr(params, fixed)  # a misspelt name would fail drl tune with AttributeError
        assert name in FRESH_LEARNERS, f"{name}: add a fresh learner to _fresh_learner"


@pytest.mark.parametrize("name", FRESH_LEARNERS)
def test_resume_fixed_params_are_the_params_the_resume_check_compares(name):
    """drl tune's population-based training refuses a searched key by ``resume_fixed_params``
    before trials resume from each other's checkpoints: each param, changed, must make
    ``check_resume`` refuse a learner state built with the original exactly when it changes a
    declared one."""
    algorithm = get_algorithm(name.removesuffix("_own_value_widths"))
    params, state, obs_dim, action_dim = _fresh_learner(name)
    assert algorithm.check_resume(params, state, obs_dim, action_dim) is None
    checked = 0
    for field in dataclasses.fields(params):
        changed = _nudged(getattr(params, field.name))
        if changed is None:
            continue
        varied = dataclasses.replace(params, **{field.name: changed})
        declared = any(
            getattr(varied, fixed) != getattr(params, fixed)
            for fixed in algorithm.resume_fixed_params
        )
        problem = algorithm.check_resume(varied, state, obs_dim, action_dim)
        assert (problem is not None) == declared, (field.name, problem)
        checked += declared
    assert checked >= 1

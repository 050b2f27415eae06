"""The search space file of ``drl tune`` (drlcli/tune/space.py): what a search may vary, checked
against the config before any trial starts, each mistake one line naming the key."""

from __future__ import annotations

import pytest

from drlcli.config import config_from_dict, with_values
from drlcli.errors import ConfigError
from drlcli.tune.space import Dimension, parse_space, read_space_file

BASE = {
    "algo": "ppo",
    "env": {"id": "InvertedPendulum-v5", "num_envs": 2},
    "total_env_steps": 4096,
    "algo_params": {"num_epochs": 4},
}


def test_every_kind_of_distribution_is_read_in_the_files_order():
    dimensions = parse_space(
        {
            "algo_params.learning_rate": {"loguniform": [1.0e-5, 1.0e-3]},
            "algo_params.num_epochs": {"int": [4, 12]},
            "gamma": {"uniform": [0.95, 0.999]},
            "algo_params.hidden_sizes": {"choice": [[64, 64], [256, 256]]},
            "algo_params.normalize_advantages": {"choice": [True, False]},
            "env.num_envs": {"choice": [1, 4]},
            "algo_params.target_kl": {"choice": [None, 0.02]},  # an optional number
        },
        BASE,
    )
    assert dimensions == [
        Dimension("algo_params.learning_rate", "loguniform", (1.0e-5, 1.0e-3)),
        Dimension("algo_params.num_epochs", "int", (4, 12)),
        Dimension("gamma", "uniform", (0.95, 0.999)),
        Dimension("algo_params.hidden_sizes", "choice", ([64, 64], [256, 256])),
        Dimension("algo_params.normalize_advantages", "choice", (True, False)),
        Dimension("env.num_envs", "choice", (1, 4)),
        Dimension("algo_params.target_kl", "choice", (None, 0.02)),
    ]
    assert dimensions[1].low == 4 and dimensions[1].high == 12


def test_an_int_range_takes_whole_numbers_written_as_floats_as_a_config_does():
    (dimension,) = parse_space({"algo_params.num_epochs": {"int": [2.0, 1.2e1]}}, BASE)
    assert dimension == Dimension("algo_params.num_epochs", "int", (2, 12))
    assert all(type(bound) is int for bound in (dimension.low, dimension.high))


def test_values_are_set_at_their_dotted_keys_and_the_base_is_untouched():
    trial = with_values(
        BASE, {"algo_params.learning_rate": 1e-4, "gamma": 0.98, "evaluation.episodes": 3}
    )
    assert trial["algo_params"] == {"num_epochs": 4, "learning_rate": 1e-4}
    assert trial["gamma"] == 0.98 and trial["evaluation"] == {"episodes": 3}
    assert BASE["algo_params"] == {"num_epochs": 4} and "gamma" not in BASE
    config = config_from_dict(trial)
    assert config.algo_params.learning_rate == 1e-4 and config.algo_params.num_epochs == 4


@pytest.mark.parametrize(
    "space, message",
    [
        (
            {"algo_params.learnin_rate": {"uniform": [0.1, 0.2]}},
            "space.algo_params.learnin_rate: unknown key; did you mean "
            "'algo_params.learning_rate'?",
        ),
        ({"nope": {"choice": [1]}}, "space.nope: unknown key"),
        (
            {"gamma.inner": {"choice": [1]}},
            "space.gamma.inner: gamma has no keys inside it; search it whole",
        ),
        (
            {"algo_params.normalize_advantages": {"uniform": [0, 1]}},
            "space.algo_params.normalize_advantages: a range on a boolean; use choice: "
            "[true, false]",
        ),
        (
            {"algo_params.activation": {"uniform": [0, 1]}},
            "space.algo_params.activation: a range needs a number field, and this one holds str",
        ),
        (
            {"algo_params.num_epochs": {"uniform": [1, 5]}},
            "space.algo_params.num_epochs: an integer field; use int: [low, high]",
        ),
        ({"algo_params.num_epochs": {"int": [2.5, 5]}}, "int needs two integers"),
        ({"algo_params.num_epochs": {"choice": []}}, "choice needs a non-empty list of values"),
        (
            {"algo_params.clip_coef": {"uniform": [0.3, 0.1]}},
            "low must be below high; got [0.3, 0.1]",
        ),
        ({"algo_params.clip_coef": {"uniform": [0.2, 0.2]}}, "low must be below high"),
        ({"algo_params.ent_coef": {"loguniform": [0.0, 0.1]}}, "loguniform needs low > 0; got 0.0"),
        ({"algo_params.clip_coef": {"uniform": [0.1]}}, "uniform needs [low, high], two numbers"),
        ({"algo_params.clip_coef": {"uniform": [0.1, ".2"]}}, "two numbers"),
        ({"algo_params.clip_coef": {"uniform": [0.1, True]}}, "two numbers"),
        ({"algo_params.clip_coef": {"normal": [0.1, 0.2]}}, "'normal' is not a distribution"),
        ({"algo_params.clip_coef": 0.2}, "expected one distribution, one of {choice: [a, b]}"),
        (
            {"algo_params.clip_coef": {"uniform": [0.1, 0.2], "choice": [0.1]}},
            "expected one distribution",
        ),
        # The field's own bounds and types, at the ends of a range and at every choice.
        (
            {"gamma": {"uniform": [0.9, 1.5]}},
            "space.gamma: 1.5 is refused: gamma: must be in [0, 1], got 1.5",
        ),
        (
            {"algo_params.activation": {"choice": ["tanh", "swish"]}},
            "space.algo_params.activation: 'swish' is refused: algo_params.activation: "
            "expected one of tanh, relu, elu",
        ),
        ({"algo_params.num_minibatches": {"int": [0, 4]}}, "0 is refused"),
        ({"algo_params.hidden_sizes": {"choice": [[64], 64]}}, "64 is refused"),
        # Keys the search sets itself.
        ({"env.seed": {"int": [0, 9]}}, "space.env.seed: cannot be searched: the search gives"),
        ({"total_env_steps": {"int": [1000, 9000]}}, "the search's trial_env_steps sets"),
        ({"algo": {"choice": ["ppo", "sac"]}}, "run one search per algorithm"),
        ({}, "space: expected a mapping of config keys to distributions, got an empty mapping"),
        ([1], "space: expected a mapping of config keys to distributions, got a list"),
    ],
)
def test_a_bad_space_is_one_line_naming_the_key(space, message):
    with pytest.raises(ConfigError) as error:
        parse_space(space, BASE)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_the_algorithms_own_params_are_the_schema(tmp_path):
    sac = {**BASE, "algo": "sac", "algo_params": {}}
    assert (
        parse_space({"algo_params.target_tau": {"uniform": [0.001, 0.01]}}, sac)[0].kind
        == "uniform"
    )
    with pytest.raises(ConfigError, match="space.algo_params.clip_coef: unknown key"):
        parse_space({"algo_params.clip_coef": {"uniform": [0.1, 0.3]}}, sac)


def test_the_space_file_has_a_space_and_perhaps_search_settings(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("space:\n  gamma: {uniform: [0.9, 0.99]}\nsearch: {trials: 4}\n")
    assert read_space_file(path) == {
        "space": {"gamma": {"uniform": [0.9, 0.99]}},
        "search": {"trials": 4},
    }
    path.write_text("space: {}\nsaerch: {trials: 4}\n")
    with pytest.raises(ConfigError, match="space.yaml: saerch: unknown key; a space file has"):
        read_space_file(path)
    path.write_text("search: {trials: 4}\n")
    with pytest.raises(ConfigError, match="space: required"):
        read_space_file(path)
    path.write_text("space: [\n")
    with pytest.raises(ConfigError, match="YAML syntax error at line 2"):
        read_space_file(path)
    with pytest.raises(ConfigError, match="missing.yaml: search space file not found"):
        read_space_file(tmp_path / "missing.yaml")

"""scripts/bench/memory_study.py: SB3-contrib's RecurrentPPO is run at the preset's settings,
the value-loss weight included (without SB3 installed: its arguments are checked, and its
value term against drl's ``value_loss``)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts" / "bench"))
import memory_study  # noqa: E402

from drlcli.algos.ppo.maths import value_loss  # noqa: E402
from drlcli.preset_catalog import find_preset  # noqa: E402


@pytest.mark.parametrize("task", sorted(memory_study.TASKS))
def test_recurrent_ppo_runs_at_the_recurrent_presets_settings(task):
    config = memory_study.variant_config(task, "lstm", 3, Path("out"))
    params = config.algo_params
    settings = memory_study.recurrent_ppo_settings(config)
    steps_per_round = config.env.num_envs * config.num_actors * config.rollout_length
    assert settings["n_steps"] == config.rollout_length
    assert settings["batch_size"] * params.num_minibatches == steps_per_round
    assert settings["n_epochs"] == params.num_epochs
    assert (settings["gamma"], settings["gae_lambda"]) == (config.gamma, config.gae_lambda)
    assert (settings["clip_range"], settings["ent_coef"]) == (params.clip_coef, params.ent_coef)
    assert settings["max_grad_norm"] == params.max_grad_norm and settings["seed"] == 3
    assert settings["policy_kwargs"] == {
        "lstm_hidden_size": params.recurrent.size,
        "net_arch": {
            "pi": list(params.hidden_sizes),
            "vf": list(params.value_network_hidden_sizes),
        },
        "log_std_init": params.init_log_std,
    }
    assert params.anneal_learning_rate  # both presets anneal: SB3's schedule reads what is left
    assert settings["learning_rate"](1.0) == params.learning_rate
    assert settings["learning_rate"](0.25) == pytest.approx(params.learning_rate / 4)


def test_recurrent_ppos_value_term_weighs_what_drls_does():
    """SB3's ``vf_coef * mean((returns - values) ** 2)`` against drl's ``vf_coef * value_loss``."""
    config = memory_study.variant_config("hopper", "lstm", 0, Path("out"))
    params = config.algo_params
    new_value, returns = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.0, 1.0, 2.0])
    drl = params.vf_coef * value_loss(
        new_value=new_value, old_value=new_value, returns=returns, params=params
    )
    sb3 = memory_study.recurrent_ppo_settings(config)["vf_coef"] * torch.mean(
        (returns - new_value) ** 2
    )
    assert float(sb3) == pytest.approx(float(drl))


@pytest.mark.parametrize(("variant", "recurrent"), [("lstm", True), ("mlp", False)])
def test_a_privileged_variant_differs_from_its_own_by_the_critics_observation_alone(
    variant, recurrent
):
    """The critic reads Hopper's whole observation (11 numbers: positions and velocities),
    the policy the five positions, as in the variant without the privilege."""
    plain = memory_study.variant_config("hopper", variant, 2, Path("out"))
    privileged = memory_study.variant_config("hopper", f"{variant}_privileged", 2, Path("out"))
    assert privileged.env.observation_groups.critic == ("0:11",)
    assert privileged.env.observation_groups.policy == plain.env.observation_groups.policy
    assert privileged.env.observation_groups.policy == ("0:5",)
    assert privileged.algo_params == plain.algo_params
    assert (privileged.algo_params.recurrent is not None) == recurrent
    assert privileged.name == f"hopper_{variant}_privileged_seed2"
    assert privileged.env.seed == plain.env.seed == 2


@pytest.mark.parametrize("task", sorted(memory_study.TASKS))
@pytest.mark.parametrize("variant", ["mlp", "lstm", "gru", "sb3_lstm"])
def test_an_equal_settings_variant_puts_its_critic_on_the_policys_group(task, variant):
    """Whatever the preset's critic reads (hopper_nov_lstm's reads all 11 numbers), the
    variants compared with RecurrentPPO give the critic the policy's observation alone."""
    config = memory_study.variant_config(task, variant, 0, Path("out"))
    groups = config.env.observation_groups
    assert groups.critic == groups.policy
    preset = find_preset(memory_study.TASKS[task]).config()
    assert groups.policy == preset.env.observation_groups.policy


def test_the_framestack_variants_critic_reads_the_stacked_positions_as_its_policy():
    groups = memory_study.variant_config(
        "hopper", "framestack", 0, Path("out")
    ).env.observation_groups
    assert groups.policy == groups.critic == ("0:5", "11:16", "22:27", "33:38")


def test_the_hopper_preset_is_the_privileged_lstm_variant():
    """hopper_nov_lstm's critic is privileged, so the study's ``lstm_privileged`` runs the
    preset itself (name, seed and output aside) and its ``lstm`` the critic on positions."""
    preset = find_preset("hopper_nov_lstm").config()
    assert preset.env.observation_groups.critic == ("0:11",)
    variant = memory_study.variant_config("hopper", "lstm_privileged", preset.env.seed, Path("o"))
    same_apart_from_paths = dataclasses.replace(
        variant,
        name=preset.name,
        output_dir=preset.output_dir,
        metrics_path=preset.metrics_path,
    )
    assert same_apart_from_paths == preset

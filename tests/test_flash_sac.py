"""FlashSAC components in-process: layers, actor, critic target, learner, custom-actor rules."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import math
import multiprocessing
import re

import numpy as np
import pytest
import torch
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import AffineTransform, TanhTransform

from drlcli.actors.contract import validate_policy_actor
from drlcli.actors.spec import ActorConfig, ActorSpec
from drlcli.algos.flash_sac.actor import (
    FlashSACActor,
    build_flash_sac_actor,
    truncated_zeta_pmf,
)
from drlcli.algos.flash_sac.algorithm import CRITICS, flash_sac_actor_spec
from drlcli.algos.flash_sac.critic import categorical_td_target
from drlcli.algos.flash_sac.cuda_graph import resolve_cuda_graph
from drlcli.algos.flash_sac.layers import UnitBatchNorm, UnitLinear, UnitRMSNorm
from drlcli.algos.flash_sac.learner import (
    FlashSACLearner,
    cosine_learning_rate,
    target_entropy,
)
from drlcli.algos.flash_sac.params import FlashSACParams
from drlcli.config import EnvConfig, config_from_dict
from drlcli.env_facts import EnvFacts
from drlcli.errors import ConfigError, PolicyActorContractError, TrainingError
from drlcli.off_policy.replay import TransitionReplay
from drlcli.runtime.run_context import RolloutActorContext
from tests.learner_contexts import learner_context


def stepper_context(actor_id: int, env: EnvConfig) -> RolloutActorContext:
    """An ``EnvStepper``'s context: it reads its id and environments only (no policy)."""
    return RolloutActorContext(actor_id, env, spec=None, params=None, gamma=0.99)


LOW, HIGH = [-1.0, 0.0], [1.0, 4.0]  # a non-symmetric range: the affine part matters
FACTS = EnvFacts("task", 5, 2, np.array(LOW), np.array(HIGH))
WIDE_FACTS = EnvFacts("task", 4, 1, np.array([-3.0]), np.array([3.0]))
SMALL = FlashSACParams(
    batch_size=32,
    actor_hidden_dim=16,
    actor_num_blocks=1,
    critic_hidden_dim=16,
    critic_num_blocks=1,
    num_bins=21,
)
CUSTOM = ActorConfig("tests.custom_actors:build", {"action_low": LOW, "action_high": HIGH})


def make_actor(**kwargs):
    return build_flash_sac_actor(
        5, 2, action_low=LOW, action_high=HIGH, hidden_dim=16, num_blocks=1, **kwargs
    )


def make_learner(params=SMALL, seed=0):
    spec = flash_sac_actor_spec(params, LOW, HIGH)
    return FlashSACLearner(learner_context(spec, FACTS, params, seed=seed))


def random_batch(size=32, seed=0):
    rng = np.random.default_rng(seed)
    buffer = TransitionReplay(256, 5, 2, seed)
    buffer.add(
        rng.normal(size=(256, 5)),
        rng.uniform(LOW, HIGH, (256, 2)),
        rng.normal(size=256),
        rng.normal(size=(256, 5)),
        rng.random(256) < 0.1,
    )
    return buffer.sample(size, reward_scale=1.0, device=torch.device("cpu"))


def test_unit_norm_constraints_hold_after_normalize():
    linear, norm, rms = UnitLinear(2, 6, 4), UnitBatchNorm(2, 8), UnitRMSNorm(2, 8)
    with torch.no_grad():
        for p in [linear.weight, norm.weight, norm.bias, rms.weight]:
            p.mul_(3.0).add_(0.5)
    for layer in (linear, norm, rms):
        layer.normalize_parameters()
    torch.testing.assert_close(linear.weight.norm(dim=-1), torch.ones(2, 4))
    affine = (norm.weight.square() + norm.bias.square()).sum(-1).sqrt()
    torch.testing.assert_close(affine, torch.full((2,), math.sqrt(8)))
    torch.testing.assert_close(rms.weight.norm(dim=-1), torch.full((2,), math.sqrt(8)))


def test_builtin_actor_passes_the_contract():
    actor = make_actor()
    validate_policy_actor(actor, 5, 2)
    assert actor.action_transform_id == "tanh_affine"


def test_log_prob_is_the_change_of_variables_through_tanh_and_affine():
    torch.manual_seed(0)
    actor = make_actor()
    obs = torch.randn(256, 5)
    actions, info = actor(obs, training=False)
    mean, std = actor.get_mean_and_std(obs)
    reference = TransformedDistribution(
        Normal(mean, std),
        [TanhTransform(cache_size=1), AffineTransform(actor.action_bias, actor.action_range)],
    )
    # The reference inverts tanh; compare where float32 can still invert it (not saturated).
    squashed = (actions - actor.action_bias) / actor.action_range
    invertible = (squashed.abs() < 0.99).all(-1)
    assert invertible.sum() > 200
    torch.testing.assert_close(
        info["log_prob"][invertible],
        reference.log_prob(actions).sum(-1)[invertible],
        rtol=1e-3,
        atol=2e-3,
    )
    assert (actions >= torch.tensor(LOW)).all() and (actions <= torch.tensor(HIGH)).all()
    assert (std >= math.exp(-10) - 1e-9).all() and (std <= math.exp(2) + 1e-6).all()


def test_explore_deterministic_training_mean_and_export_agree():
    actor = make_actor()
    obs = torch.randn(7, 5)
    deterministic = actor.explore(obs, deterministic=True)
    mean, _ = actor.get_mean_and_std(obs)
    expected = actor.action_bias + actor.action_range * torch.tanh(mean)
    torch.testing.assert_close(deterministic, expected)
    torch.testing.assert_close(actor.as_export_module()(obs), expected)


def test_exploration_noise_is_held_and_redrawn_per_env_on_done():
    actor = make_actor(noise_zeta_mu=0.01, noise_zeta_max=16)  # nearly uniform hold lengths
    obs = torch.zeros(3, 5)
    mean, std = actor.get_mean_and_std(obs)

    def noise_of(actions):
        u = torch.atanh(
            ((actions - actor.action_bias) / actor.action_range).clamp(-0.999999, 0.999999)
        )
        return (u - mean) / std

    def step(dones=(False, False, False)):
        return noise_of(actor.explore(obs, dones=torch.tensor(dones)))

    def same(a, b):
        return torch.allclose(a, b, rtol=1e-3, atol=1e-3)

    torch.manual_seed(0)
    first = step((True, True, True))
    assert ((actor._steps_left >= 0) & (actor._steps_left < 16)).all()
    actor._steps_left[:] = torch.tensor([0, 1, 5])  # env 0's hold ran out; 1 and 2 go on
    second = step()
    assert not same(second[0], first[0]) and same(second[1:], first[1:])
    third = step()  # now env 1's hold has run out too
    assert not same(third[1], second[1]) and same(third[2], second[2])
    actor._steps_left[:] = 5
    fourth = step((True, False, False))  # env 0's episode ended: redraw it alone
    assert not same(fourth[0], third[0]) and same(fourth[1:], third[1:])


def test_hold_lengths_follow_the_zeta_distribution():
    actor = make_actor(noise_zeta_mu=50.0, noise_zeta_max=16)  # P(k = 1) ~ 1: redraw every step
    obs = torch.zeros(4, 5)
    torch.manual_seed(1)
    previous = actor.explore(obs, dones=torch.ones(4, dtype=torch.bool))
    for _ in range(3):
        current = actor.explore(obs, dones=torch.zeros(4, dtype=torch.bool))
        assert not torch.isclose(current, previous).any()
        previous = current


def test_truncated_zeta_distribution():
    pmf = truncated_zeta_pmf(2.0, 16)
    assert pmf.shape == (16,)
    torch.testing.assert_close(pmf.sum(), torch.tensor(1.0))
    expected = torch.tensor([1.0 / k**2 for k in range(1, 17)])
    torch.testing.assert_close(pmf, expected / expected.sum())


def test_categorical_target_projection():
    bounds = (-2.0, 2.0)  # 5 atoms, spacing 1
    next_log_probs = torch.log(torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0]]).clamp(min=1e-30))
    # Non-terminal: atom 0 moves to 0.5 + 0.5 * (0 - 0) = 0.5, split between atoms 0 and 1.
    target = categorical_td_target(
        next_log_probs, torch.tensor([0.5]), torch.tensor([0.0]), torch.tensor([0.0]), 0.5, *bounds
    )
    torch.testing.assert_close(target, torch.tensor([[0.0, 0.0, 0.5, 0.5, 0.0]]))
    # Terminated: every atom collapses onto r = -1.25 -> split 0.75 / 0.25 between -1 and -2.
    uniform = torch.full((1, 5), 0.2).log()
    target = categorical_td_target(
        uniform, torch.tensor([-1.25]), torch.tensor([1.0]), torch.tensor([3.0]), 0.9, *bounds
    )
    torch.testing.assert_close(target, torch.tensor([[0.25, 0.75, 0.0, 0.0, 0.0]]))
    # The entropy term shifts atoms down; mass beyond the support is clipped to the edge.
    target = categorical_td_target(
        uniform, torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([10.0]), 1.0, *bounds
    )
    torch.testing.assert_close(target, torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0]]))


def test_categorical_target_projects_each_row_of_a_batch_on_its_own():
    bounds = (-2.0, 2.0)
    one_hot = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]).clamp(min=1e-30).log()
    uniform = torch.full((5,), 0.2).log()
    target = categorical_td_target(
        torch.stack([one_hot, uniform, uniform]),
        rewards=torch.tensor([0.5, -1.25, 0.0]),
        terminated=torch.tensor([0.0, 1.0, 0.0]),
        next_entropy_term=torch.tensor([0.0, 3.0, 10.0]),
        gamma=0.5,
        v_min=bounds[0],
        v_max=bounds[1],
    )
    expected = torch.tensor(
        [
            [0.0, 0.0, 0.5, 0.5, 0.0],  # 0.5 + 0.5 * 0: between atoms 0 and 1
            [0.25, 0.75, 0.0, 0.0, 0.0],  # terminated: everything on r = -1.25
            [1.0, 0.0, 0.0, 0.0, 0.0],  # shifted below the support: clipped to its edge
        ]
    )
    torch.testing.assert_close(target, expected)


def test_replay_buffer_wraps_around():
    buffer = TransitionReplay(4, 1, 1)
    for value in range(6):
        buffer.add(
            np.array([[value]]),
            np.array([[0.0]]),
            np.array([value]),
            np.array([[0]]),
            np.array([False]),
        )
    assert len(buffer) == 4
    assert sorted(buffer.rew.tolist()) == [2.0, 3.0, 4.0, 5.0]


def test_learner_update_schedule_and_unit_norm_critic():
    learner = make_learner()
    batch = random_batch()
    critic_before = {k: v.clone() for k, v in learner.critic.state_dict().items()}
    first = learner.update(batch)
    assert {"Loss/actor", "Loss/temperature", "temperature", "entropy"} <= set(first)
    second = learner.update(batch)
    assert "Loss/actor" not in second  # actor and temperature every 2nd update
    assert learner.updates == 2
    # Unit-norm rows after the critic's steps.
    torch.testing.assert_close(learner.critic.head.weight.norm(dim=-1), torch.ones(2, 21))
    assert not torch.equal(critic_before["head.weight"], learner.critic.state_dict()["head.weight"])
    assert all(math.isfinite(v) for v in first.values())


def test_target_critic_follows_by_ema_with_tau_and_copies_the_statistics():
    params = dataclasses.replace(SMALL, target_tau=0.25)
    learner = make_learner(params)
    before = {k: v.clone() for k, v in learner.target_critic.named_parameters()}
    learner.update(random_batch())
    critic = dict(learner.critic.named_parameters())
    for name, parameter in learner.target_critic.named_parameters():
        expected = before[name] + 0.25 * (critic[name].detach() - before[name])
        torch.testing.assert_close(parameter, expected, rtol=0, atol=1e-6)
        assert not torch.equal(parameter, critic[name])  # not a hard copy
    critic_buffers = dict(learner.critic.named_buffers())
    for name, buffer in learner.target_critic.named_buffers():
        assert torch.equal(buffer, critic_buffers[name])


def test_target_entropy_formula():
    # A/2 log(2 pi e sigma^2) + sum log range, worked out by hand for A = 2, sigma = 0.15.
    value = target_entropy(2, 0.15, torch.tensor([1.0, 2.0]))
    assert value == pytest.approx(-0.26321572280247196, rel=1e-6)


@pytest.mark.parametrize(("target", "direction"), [(-100.0, -1), (100.0, 1)])
def test_temperature_falls_above_the_entropy_target_and_rises_below_it(target, direction):
    learner = make_learner(dataclasses.replace(SMALL, actor_update_period=1))
    learner.target_entropy = target
    before = float(learner.temperature.detach())
    learner.update(random_batch())
    assert (float(learner.temperature.detach()) - before) * direction > 0


def test_cosine_learning_rate():
    assert cosine_learning_rate(3e-4, 1.5e-4, 0.0) == pytest.approx(3e-4)
    assert cosine_learning_rate(3e-4, 1.5e-4, 0.5) == pytest.approx(2.25e-4)
    assert cosine_learning_rate(3e-4, 1.5e-4, 1.0) == pytest.approx(1.5e-4)


def test_custom_actor_is_the_one_instance_and_its_aux_loss_reaches_its_parameters():
    params = dataclasses.replace(SMALL, actor_config=CUSTOM, actor_update_period=1)
    batch = random_batch()
    heads = {}
    for weight in (0.0, 1000.0):  # identical learners but for the aux loss's weight
        learner = make_learner(params)
        assert type(learner.actor).__name__ == "AuxLossActor"
        learner.actor.aux_weight = weight
        metrics = learner.update(batch)
        assert (metrics["Loss/aux_action_l2"] > 0) == (weight > 0)
        heads[weight] = learner.actor.mean_head.weight.detach().clone()
    # Only the aux loss differs, so a different actor step means its gradient was applied.
    assert not torch.allclose(heads[0.0], heads[1000.0], atol=1e-4)


def test_aux_loss_names_must_not_change():
    params = dataclasses.replace(
        SMALL,
        actor_update_period=1,
        actor_config=ActorConfig(CUSTOM.builder, {**CUSTOM.kwargs, "drift_after": 2}),
    )
    learner = make_learner(params)
    batch = random_batch()
    learner.update(batch)
    with pytest.raises(TrainingError) as error:
        for _ in range(3):
            learner.update(batch)
    assert str(error.value) == (
        "the actor's aux_losses changed from ['action_l2'] to ['something_else']; "
        "the set of auxiliary losses must stay the same during training"
    )


def _spawned_build(seed, queue):
    from tests.custom_actors import build_with_seed

    # Plain lists: torch tensors would travel as shared memory that dies with this process.
    queue.put({name: tensor.tolist() for name, tensor in build_with_seed(seed, 3, 1).items()})


@pytest.mark.subprocess
def test_an_env_stepper_process_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys; from drlcli.runtime.env_stepper import EnvStepper; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.subprocess
def test_a_spawned_process_rebuilds_the_same_actor_from_the_spec():
    from tests.custom_actors import build_with_seed

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_spawned_build, args=(7, queue))
    process.start()
    remote = queue.get(timeout=120)
    process.join(timeout=60)
    local = build_with_seed(7, 3, 1)
    assert set(remote) == set(local)
    for name in local:
        torch.testing.assert_close(torch.tensor(remote[name]), local[name])


@pytest.mark.parametrize(
    ("algo_params", "message"),
    [
        (
            {"actor_config": {"builder": "x.y:z"}, "use_whole_cycle_cuda_graph": True},
            "custom actor (actor_config) cannot run in a whole-cycle CUDA graph",
        ),
        (
            {"actor_config": {"builder": "x.y:z"}, "actor_normalize_parameters": False},
            "false only applies to the built-in actor",
        ),
        ({"v_min": 1.0, "v_max": 1.0}, "v_min: must be below v_max"),
        ({"actor_config": {"kwargs": {}}}, "algo_params.actor_config.builder: required"),
        ({"actor_config": {"builder": 3}}, "algo_params.actor_config.builder: expected a string"),
        (
            {"actor_config": {"builder": "no_colon.module"}},
            "algo_params.actor_config.builder: must look like 'pkg.module:callable'",
        ),
        (
            {"actor_config": {"builder": "x.y:z", "kwargs": [1, 2]}},
            "algo_params.actor_config.kwargs: expected a mapping",
        ),
        (
            {"actor_config": {"builder": "x.y:z", "kwargs": {"width": float("nan")}}},
            "algo_params.actor_config.kwargs.width: nan is not plain data",
        ),
        (
            {"actor_config": {"builder": "x.y:z", "kwargs": {"when": datetime.date(2026, 1, 1)}}},
            "algo_params.actor_config.kwargs.when: datetime.date(2026, 1, 1) is not plain data",
        ),
        (
            {"actor_config": {"builder": "x.y:z", "kwarg": {}}},
            "algo_params.actor_config.kwarg: unknown key; did you mean 'kwargs'?",
        ),
    ],
)
def test_adr_rules_fail_closed_at_config_load(algo_params, message):
    with pytest.raises(ConfigError) as error:
        config_from_dict({"algo": "flash_sac", "algo_params": algo_params})
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_cuda_graph_auto_default_on_nvidia_refuses_a_custom_actor(monkeypatch):
    custom = ActorSpec(CUSTOM.builder, CUSTOM.kwargs)
    builtin = flash_sac_actor_spec(SMALL, LOW, HIGH)
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(ConfigError, match="by default on NVIDIA CUDA"):
        resolve_cuda_graph(SMALL, custom, cuda)
    assert resolve_cuda_graph(SMALL, builtin, cuda) is True
    off = dataclasses.replace(SMALL, use_whole_cycle_cuda_graph=False)
    assert resolve_cuda_graph(off, custom, cuda) is False
    # A driver with a CPU build of torch (a cluster's login node) judges the cluster's CUDA
    # learners as they will run; a ROCm build's "cuda" is not NVIDIA's.
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ConfigError, match="by default on NVIDIA CUDA"):
        resolve_cuda_graph(SMALL, custom, cuda)
    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    assert resolve_cuda_graph(SMALL, custom, cuda) is False
    # CPU: auto is off; asking for the graph explicitly is an error.
    assert resolve_cuda_graph(SMALL, builtin, torch.device("cpu")) is False
    on = dataclasses.replace(SMALL, use_whole_cycle_cuda_graph=True)
    with pytest.raises(ConfigError, match="needs a CUDA learner device"):
        resolve_cuda_graph(on, builtin, torch.device("cpu"))


def test_learner_state_round_trip_restores_schedule_and_networks():
    learner = make_learner()
    batch = random_batch()
    for _ in range(3):
        learner.update(batch)
    state = learner.state_dict()
    other = make_learner(seed=5)
    other.load_state_dict(state)
    assert other.updates == 3
    for name, tensor in learner.critic.state_dict().items():
        torch.testing.assert_close(other.critic.state_dict()[name], tensor)
    torch.testing.assert_close(other.log_temperature, learner.log_temperature)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({}, None),
        ({"critic_hidden_dim": 32}, r"its critic's .* has shape \[.*16.*\], the config builds"),
        ({"critic_num_blocks": 2}, r"its critic has \d+ tensors, the config builds \d+"),
        ({"num_bins": 41}, r"head_bias has shape \[2, 21\], the config builds \[2, 41\]"),
        # Same shapes, other atoms: loading would silently keep the stored support.
        ({"v_min": -10.0}, r"support is \[-5, 5\], the config sets v_min -10 and v_max 5"),
    ],
)
def test_resume_check_names_what_of_the_critic_the_config_cannot_take(change, message):
    state = make_learner().state_dict()
    problem = CRITICS.resume_problem(dataclasses.replace(SMALL, **change), state, 5, 2)
    if message is None:
        assert problem is None
    else:
        assert re.search(message, problem), problem


def test_resume_check_calls_a_critic_that_is_not_tensors_damaged():
    state = make_learner().state_dict()
    state["target_critic"] = {"atoms": [0.0, 1.0]}
    assert CRITICS.resume_problem(SMALL, state, 5, 2) == (
        "its target_critic is not a state dict of tensors; the file is damaged"
    )


def test_the_collector_runs_in_process_with_a_local_stepper_pool():
    """The algorithm's classes are plain Python: a round without Ray."""
    from drlcli.config import EnvConfig
    from drlcli.off_policy.collector import OffPolicyCollector
    from drlcli.runtime.env_stepper import EnvStepper, LocalStepperPool

    env = EnvConfig(id="InvertedPendulum-v5", num_envs=2, seed=3)
    steppers = LocalStepperPool(
        [EnvStepper(stepper_context(index, env)) for index in (0, 1)], num_envs=2
    )
    params = dataclasses.replace(SMALL, warmup_steps=16, batch_size=8, updates_per_env_step=0.5)
    spec = flash_sac_actor_spec(params, [-3.0], [3.0])
    learner = FlashSACLearner(learner_context(spec, WIDE_FACTS, params))
    collector = OffPolicyCollector(learner, steppers, params, [-3.0], [3.0], 4, 0.99)
    stats, metrics = collector.run(10)
    assert collector.transitions == 40 and metrics["buffer_size"] == 40.0
    # Updates start once 16 transitions are in (after 4 steps); then 4 * 0.5 per step.
    assert metrics["updates"] == 6 * 2
    assert stats["episodes"] == len(stats["episode_returns"])
    state = collector.state_dict()
    assert state["transitions"] == 40 and state["return_scaler"]["count"] == 40.0


@pytest.mark.parametrize("broken", ["rew", "obs"])
def test_a_non_finite_input_stops_the_update_naming_the_quantities(broken):
    learner = make_learner(dataclasses.replace(SMALL, actor_update_period=1))
    batch = random_batch()
    batch[broken][3] = float("nan")
    with pytest.raises(TrainingError) as error:
        learner.update(batch)
    message = str(error.value)
    advice = " is not finite; lower algo_params.learning_rate or check the environment's rewards"
    if broken == "rew":  # the critic's target alone
        assert message == "FlashSAC update 1: Loss/critic nan" + advice
    else:  # every figure of the update, each named, comma-separated
        assert message == (
            "FlashSAC update 1: Loss/actor nan, Loss/temperature nan, entropy nan, "
            "temperature nan, Loss/critic nan, q_mean nan" + advice
        )


def test_an_update_reports_the_cosine_learning_rate_it_used():
    from drlcli.algos.flash_sac.learner import cosine_learning_rate

    params = dataclasses.replace(SMALL, learning_rate=1e-3, learning_rate_end=1e-4)
    learner = make_learner(params)
    batch = random_batch()
    rates = [learner.update(batch)["learning_rate"] for _ in range(3)]
    assert rates == [cosine_learning_rate(1e-3, 1e-4, step / 100) for step in range(3)]
    assert rates[0] == 1e-3 and rates[1] < rates[0]
    # Past the planned updates (a resume with a larger budget) the schedule stays at its end.
    assert cosine_learning_rate(1e-3, 1e-4, 1.5) == cosine_learning_rate(1e-3, 1e-4, 1.0)
    assert cosine_learning_rate(1e-3, 1e-4, -0.5) == 1e-3


def test_a_data_parallel_learner_averages_the_gradients_of_each_network_it_steps():
    class RecordingGroup:  # stands in for the all-reduce of a DataParallelGroup
        def __init__(self):
            self.averaged = []

        def average_gradients(self, parameters):
            self.averaged.append({id(parameter) for parameter in parameters})

    params = dataclasses.replace(SMALL, actor_update_period=1)
    learner = make_learner(params)
    learner.data_parallel = group = RecordingGroup()
    learner.update(random_batch())
    critic = {id(parameter) for parameter in learner.critic.parameters()}
    actor = {id(parameter) for parameter in learner.actor.parameters()}
    assert len(group.averaged) == 2  # once per optimiser step: the critic's, the actor's
    assert critic in group.averaged and actor | {id(learner.log_temperature)} in group.averaged


def test_the_collector_drops_the_transitions_of_a_restarted_stepper():
    """A stepper whose process was restarted reports its envs' step as lost: they are not
    stored as transitions, and their envs start new episodes (dones)."""
    from drlcli.config import EnvConfig
    from drlcli.off_policy.collector import OffPolicyCollector
    from drlcli.runtime.env_stepper import EnvStepper, LocalStepperPool

    class RestartingPool(LocalStepperPool):
        calls = 0

        def wait(self):
            results = super().wait()
            self.calls += 1
            if self.calls == 3:  # stepper 1 "restarted" during the third step
                results[1] = {**results[1], "lost": np.ones(2, dtype=bool)}
            return results

    env = EnvConfig(id="InvertedPendulum-v5", num_envs=2, seed=3)
    steppers = RestartingPool(
        [EnvStepper(stepper_context(index, env)) for index in (0, 1)], num_envs=2
    )
    params = dataclasses.replace(SMALL, warmup_steps=100, batch_size=8)
    spec = flash_sac_actor_spec(params, [-3.0], [3.0])
    learner = FlashSACLearner(learner_context(spec, WIDE_FACTS, params))
    collector = OffPolicyCollector(learner, steppers, params, [-3.0], [3.0], 4, 0.99)
    collector.run(3)
    assert collector.transitions == 10 and len(collector.replay) == 10  # 12 stepped, 2 lost
    np.testing.assert_array_equal(collector.dones[2:], [False, False])


def test_replays_for_another_learner_count_pool_in_collection_order_and_deal_out():
    from drlcli.off_policy.resume import replays_for

    def buffer(values):
        rows = np.asarray(values, dtype=np.float32)
        return {"obs": rows[:, None], "rew": rows}

    old = [buffer([1, 2, 3, 4]), buffer([10, 20])]
    assert replays_for(old, 2) == old  # the same count: unchanged
    (merged,) = replays_for(old, 1)
    # Each buffer's rows spread over the run: 1 and 10 are the oldest, 4 and 20 the newest.
    np.testing.assert_array_equal(merged["rew"], [1, 2, 10, 3, 4, 20])
    first, second = replays_for([merged], 2)
    np.testing.assert_array_equal(first["rew"], [1, 10, 4])
    np.testing.assert_array_equal(second["rew"], [2, 3, 20])
    np.testing.assert_array_equal(first["obs"][:, 0], first["rew"])


class EagerGraphs:
    """Stands in for CudaGraphUpdates on CPU: the same calls, run eagerly."""

    def __init__(self, step):
        self.step = step

    def run(self, batch, with_actor):
        return self.step(batch, with_actor)


def test_with_cuda_graphs_the_optimisers_are_capturable_and_the_schedule_runs_through_a_tensor(
    monkeypatch,
):
    """What a captured graph needs, checked on CPU with graphs forced on: capturable optimisers
    whose learning rate is one tensor, filled in place as the cosine schedule moves (a graph
    replays reads of that tensor), and updates equal to the eager learner's."""
    import drlcli.algos.flash_sac.learner as learner_module

    eager = make_learner()
    monkeypatch.setattr(learner_module, "resolve_cuda_graph", lambda *args: True)
    monkeypatch.setattr(learner_module, "CudaGraphUpdates", EagerGraphs)
    graphed = make_learner()
    optimizers = (
        graphed.actor_optimizer,
        graphed.critic_optimizer,
        graphed.temperature_optimizer,
    )
    rates = [optimizer.param_groups[0]["lr"] for optimizer in optimizers]
    assert all(optimizer.param_groups[0]["capturable"] for optimizer in optimizers)
    assert all(isinstance(rate, torch.Tensor) for rate in rates)
    assert not eager.actor_optimizer.param_groups[0]["capturable"]

    params = graphed.params
    for step in range(4):  # actor-and-critic and critic-only updates alternate
        batch = random_batch(seed=step)
        expected_rate = cosine_learning_rate(
            params.learning_rate, params.learning_rate_end, step / graphed.total_updates
        )
        rng = torch.get_rng_state()  # both draw the same policy samples
        graphed.update(batch)
        torch.set_rng_state(rng)
        eager.update(batch)
        for optimizer, rate in zip(optimizers, rates, strict=True):
            assert optimizer.param_groups[0]["lr"] is rate  # the same tensor, filled in place
            assert rate.item() == pytest.approx(expected_rate, rel=1e-6)
    for name, tensor in eager.critic.state_dict().items():
        torch.testing.assert_close(graphed.critic.state_dict()[name], tensor, rtol=1e-5, atol=1e-6)
    for name, tensor in eager.actor.state_dict().items():
        torch.testing.assert_close(graphed.actor.state_dict()[name], tensor, rtol=1e-5, atol=1e-6)


def _optimizers(learner):
    return (learner.actor_optimizer, learner.critic_optimizer, learner.temperature_optimizer)


def _settings(optimizer):
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


@pytest.mark.parametrize("written_by", ["graphed", "eager"])
def test_resume_keeps_this_devices_optimiser_settings_and_the_saved_moments(
    monkeypatch, written_by
):
    """A checkpoint's optimiser groups carry the settings of the learner that wrote it
    (``capturable``, ``fused``, a tensor or float ``lr``); a resumed learner keeps its own, as a
    fresh learner on its device holds them, and loads only the moments and step counts."""
    import drlcli.algos.flash_sac.learner as learner_module

    def learner(graphed: bool):
        with monkeypatch.context() as patch:
            if graphed:  # forced on, on CPU: capturable groups with a tensor lr
                patch.setattr(learner_module, "resolve_cuda_graph", lambda *args: True)
                patch.setattr(learner_module, "CudaGraphUpdates", EagerGraphs)
            return make_learner()

    writer = learner(graphed=written_by == "graphed")
    for step in range(3):
        writer.update(random_batch(seed=step))
    state = copy.deepcopy(writer.state_dict())  # as from a file: loading aliases tensors
    resumed = learner(graphed=written_by == "eager")  # the other kind of learner
    fresh = learner(graphed=written_by == "eager")
    own_rates = [optimizer.param_groups[0]["lr"] for optimizer in _optimizers(resumed)]
    assert _settings(resumed.actor_optimizer) != _settings(writer.actor_optimizer)
    resumed.load_state_dict(state)
    for optimizer, reference, saved, rate in zip(
        _optimizers(resumed), _optimizers(fresh), _optimizers(writer), own_rates, strict=True
    ):
        assert _settings(optimizer) == _settings(reference)
        assert optimizer.param_groups[0]["lr"] is rate  # a graph would read this object
        for parameter, saved_parameter in zip(
            optimizer.param_groups[0]["params"], saved.param_groups[0]["params"], strict=True
        ):
            moments, saved_moments = optimizer.state[parameter], saved.state[saved_parameter]
            assert moments["step"].device.type == "cpu"
            assert moments["step"].item() == saved_moments["step"].item() > 0
            torch.testing.assert_close(moments["exp_avg"], saved_moments["exp_avg"])
            torch.testing.assert_close(moments["exp_avg_sq"], saved_moments["exp_avg_sq"])
    rng = torch.get_rng_state()
    resumed.update(random_batch(seed=9))  # and it trains on as the writer would
    torch.set_rng_state(rng)
    writer.update(random_batch(seed=9))
    for name, tensor in writer.critic.state_dict().items():
        torch.testing.assert_close(resumed.critic.state_dict()[name], tensor, rtol=1e-5, atol=1e-6)


def test_joining_data_parallel_learners_shares_every_batch_norm_and_a_graphed_one_refuses():
    from drlcli.off_policy.data_parallel import DataParallelGroup

    learner = make_learner()
    group = DataParallelGroup(0, 2)  # joining calls no collective
    learner.use_data_parallel(group)
    assert learner.data_parallel is group
    for network in (learner.actor, learner.critic, learner.target_critic):
        norms = [layer for layer in network.modules() if isinstance(layer, UnitBatchNorm)]
        assert norms and all(layer.data_parallel is group for layer in norms)
    graphed = make_learner()
    graphed.uses_cuda_graph = True
    with pytest.raises(
        TrainingError, match="^a CUDA-graphed learner cannot join data-parallel learners$"
    ):
        graphed.use_data_parallel(group)
    assert graphed.data_parallel is None


def test_learner_0s_store_takes_the_other_learners_on_a_free_port():
    import datetime

    from drlcli.off_policy.data_parallel import JOIN_TIMEOUT_S, open_store

    store, another = open_store("127.0.0.1"), open_store("127.0.0.1")
    assert store.port > 0 and another.port > 0 and store.port != another.port  # each a free one
    assert store.timeout == datetime.timedelta(seconds=JOIN_TIMEOUT_S)  # how long a join waits
    client = torch.distributed.TCPStore(
        "127.0.0.1", store.port, is_master=False, timeout=datetime.timedelta(seconds=10)
    )
    client.set("rank1", "ready")
    assert store.get("rank1") == b"ready"


def test_a_loaded_learner_holds_its_auxiliary_losses_to_the_stored_names():
    params = dataclasses.replace(
        SMALL, actor_update_period=1, actor_config=ActorConfig(CUSTOM.builder, CUSTOM.kwargs)
    )
    trained = make_learner(params)
    trained.update(random_batch())
    state = trained.state_dict()
    assert state["aux_names"] == ["action_l2"]
    resumed = make_learner(params)
    resumed.load_state_dict(state)
    assert resumed.aux_names == frozenset({"action_l2"})
    older = make_learner(params)  # a state written before the names were stored
    older.load_state_dict({**state, "aux_names": None})
    assert older.aux_names is None


def test_the_built_in_flash_sac_actor_has_the_papers_defaults():
    """128 hidden units, 2 blocks, noise held for zeta(2)-distributed steps of at most 16."""
    actor = build_flash_sac_actor(3, 2, action_low=[-1.0, -2.0], action_high=[1.0, 2.0])
    reference = FlashSACActor(3, 2, [-1.0, -2.0], [1.0, 2.0], 128, 2, 2.0, 16)
    assert actor.mean_head.weight.shape == reference.mean_head.weight.shape
    assert [name for name, _ in actor.named_parameters()] == [
        name for name, _ in reference.named_parameters()
    ]
    torch.testing.assert_close(actor.zeta_pmf, truncated_zeta_pmf(2.0, 16), rtol=0, atol=0)
    assert next(actor.parameters()).device.type == "cpu"
    custom = build_flash_sac_actor(
        3, 2, action_low=[-1.0] * 2, action_high=[1.0] * 2, noise_zeta_mu=3.0, noise_zeta_max=5
    )
    torch.testing.assert_close(custom.zeta_pmf, truncated_zeta_pmf(3.0, 5), rtol=0, atol=0)


def test_a_learner_aims_at_the_entropy_of_its_action_box_and_never_trains_the_target():
    learner = make_learner()
    # LOW, HIGH = [-1, 0], [1, 4]: half-ranges 1 and 2.
    expected = target_entropy(2, SMALL.target_sigma, torch.tensor([1.0, 2.0]))
    assert float(learner.target_entropy) == pytest.approx(float(expected), rel=1e-6)
    assert not any(p.requires_grad for p in learner.target_critic.parameters())
    assert all(p.requires_grad for p in learner.critic.parameters())


def test_a_learner_defaults_to_seed_0_and_plans_at_least_one_update():
    from drlcli.algos.flash_sac.learner import cosine_learning_rate

    spec = flash_sac_actor_spec(SMALL, LOW, HIGH)
    default = FlashSACLearner(learner_context(spec, FACTS, SMALL))
    seeded = make_learner(seed=0)
    for mine, theirs in zip(default.actor.parameters(), seeded.actor.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    params = dataclasses.replace(SMALL, learning_rate=1e-3, learning_rate_end=1e-4)
    for planned in (0, 1):  # a budget of no update plans one: the schedule ends after it
        learner = FlashSACLearner(learner_context(spec, FACTS, params, updates=planned))
        assert learner.total_updates == 1
        rates = [learner.update(random_batch())["learning_rate"] for _ in range(2)]
        assert rates == [1e-3, cosine_learning_rate(1e-3, 1e-4, 1.0)]


def test_flash_sac_adam_is_fused_with_a_float_rate_and_graph_ready_only_when_graphed():
    from drlcli.algos.flash_sac.learner import adam

    weight = torch.nn.Parameter(torch.zeros(3))
    eager = adam([weight], 1e-3, graphed=False).param_groups[0]
    assert (eager["lr"], eager["fused"], eager["capturable"]) == (1e-3, True, False)
    assert type(eager["lr"]) is float  # a checkpoint's optimiser state stays plain numbers
    graphed = adam([weight], 1e-3, graphed=True).param_groups[0]
    assert isinstance(graphed["lr"], torch.Tensor) and graphed["lr"].device == weight.device
    assert float(graphed["lr"]) == pytest.approx(1e-3) and graphed["capturable"]
    # A device without the fused kernel (meta here) gets torch's default implementation.
    on_meta = torch.nn.Parameter(torch.zeros(3, device="meta"))
    assert adam([on_meta], 1e-3, graphed=False).param_groups[0]["fused"] is None


@pytest.mark.parametrize(
    ("low", "high", "side"),
    [([-5.0, -5.0], [1.0, 4.0], "action_low"), ([-1.0, 0.0], [5.0, 9.0], "action_high")],
)
def test_a_learner_refuses_an_actor_whose_actions_leave_the_environments_box(low, high, side):
    """The custom actor's own box is wider than the env's (LOW, HIGH) on one side."""
    spec = ActorSpec("tests.custom_actors:build", {"action_low": low, "action_high": high})
    with pytest.raises(PolicyActorContractError, match=f"outside the environment's {side}"):
        FlashSACLearner(learner_context(spec, FACTS, SMALL, updates=10))


def test_replay_sampling_defaults_to_seed_0_and_forward_to_evaluation_mode():
    def filled(**seed):
        replay = TransitionReplay(64, 2, 1, **seed)
        for step in range(64):
            value = np.full((1, 2), float(step), np.float32)
            replay.add(value, np.zeros((1, 1), np.float32), np.zeros(1), value, np.zeros(1, bool))
        return replay

    cpu = torch.device("cpu")
    first = filled().sample(8, 1.0, cpu)["obs"]
    assert torch.equal(first, filled(seed=0).sample(8, 1.0, cpu)["obs"])
    assert not torch.equal(first, filled(seed=1).sample(8, 1.0, cpu)["obs"])
    actor = make_actor()
    actor.train(True)
    actor(torch.zeros(4, 5))  # no training flag: a deterministic-mode (BatchNorm) forward
    assert actor.training is False


def test_load_moments_moves_every_tensor_step_past_parameters_without_state():
    from drlcli.algos.flash_sac.learner import adam, load_moments

    def pair():
        return [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]

    saved_parameters = pair()
    saved = adam(saved_parameters, 1e-3, graphed=False)
    saved_parameters[1].grad = torch.ones(3)  # the first parameter never gets a gradient
    saved.step()
    state = saved.state_dict()
    assert 0 not in state["state"]
    state["state"][1]["step"] = torch.tensor(3.0, dtype=torch.float64)  # another writer's dtype
    parameters = pair()
    optimizer = adam(parameters, 1e-3, graphed=False)
    load_moments(optimizer, state)
    assert parameters[0] not in optimizer.state
    step = optimizer.state[parameters[1]]["step"]
    assert step.dtype == torch.float32 and float(step) == 3.0


def test_a_learner_process_builds_its_learner_from_the_context():
    """``OffPolicy.learner(LearnerContext)``: the learner a process of the run holds is
    the one the context describes, its cosine schedule over its share of the run's updates."""
    import math

    from drlcli.algos.entry_types import LearnerContext, RoundPlan
    from drlcli.algos.flash_sac.algorithm import FLASH_SAC

    params = dataclasses.replace(SMALL, updates_per_env_step=0.5)
    spec = flash_sac_actor_spec(params, LOW, HIGH)
    context = LearnerContext(spec, FACTS, params, 0.9, 1001, 2, "cpu", 7, RoundPlan(1, 1001))
    learner = FLASH_SAC.off_policy.learner(context)
    assert learner.total_updates == math.ceil(1001 / 2 * 0.5) == 251
    assert learner.gamma == 0.9 and learner.params is params
    assert isinstance(learner, FlashSACLearner) and learner.uses_cuda_graph is False
    direct = FlashSACLearner(context)
    assert learner.target_entropy == direct.target_entropy
    ours, theirs = learner.network_state(), direct.network_state()
    for network in ("actor", "critic", "target_critic"):
        for name, tensor in ours[network].items():
            assert torch.equal(tensor, theirs[network][name]), f"{network}.{name}"


@pytest.mark.parametrize(
    ("algo", "algo_params", "unread", "read_with"),
    [
        ("flash_sac", {"normalize_rewards": False}, "normalized_return_max", "normalize_rewards"),
        ("sac", {}, "normalized_return_max", "normalize_rewards"),
        ("sac", {"autotune_temperature": False}, "target_entropy_scale", "autotune_temperature"),
    ],
)
def test_a_setting_nothing_reads_under_the_others_is_refused(algo, algo_params, unread, read_with):
    """Training would ignore it: one line; its default's value (a stored config's) stays
    accepted."""
    with pytest.raises(ConfigError) as error:
        config_from_dict({"algo": algo, "algo_params": {**algo_params, unread: 0.5}})
    assert str(error.value) == (
        f"algo_params.{unread}: 0.5 is read only with {read_with}: true; set that, or remove "
        f"{unread}"
    )
    default = getattr(config_from_dict({"algo": algo}).algo_params, unread)
    given = config_from_dict({"algo": algo, "algo_params": {**algo_params, unread: default}})
    assert getattr(given.algo_params, unread) == default

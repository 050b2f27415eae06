"""SAC (drlcli/algos/sac/): the actor's distribution, each loss against a hand computation, the
temperature and target updates, custom actors, state, and a short run through Ray with verify,
play, export and resume."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from drlcli.actors.contract import validate_policy_actor
from drlcli.actors.spec import ActorConfig
from drlcli.algos.entry_types import OffPolicy
from drlcli.algos.sac.actor import build_sac_actor
from drlcli.algos.sac.algorithm import CRITICS, SAC, sac_actor_spec
from drlcli.algos.sac.learner import SACLearner, sac_target_entropy, soft_q_target
from drlcli.algos.sac.params import SACParams
from drlcli.env_facts import EnvFacts
from drlcli.errors import TrainingError
from drlcli.off_policy.replay import TransitionReplay
from tests.learner_contexts import learner_context

LOW, HIGH = [-1.0, -3.0], [1.0, 1.0]
FACTS = EnvFacts("task", 5, 2, np.array(LOW), np.array(HIGH))
SMALL = SACParams(batch_size=32, hidden_sizes=(16, 16), actor_update_period=1)


def make_learner(params=SMALL, seed=0):
    spec = sac_actor_spec(params, LOW, HIGH)
    return SACLearner(learner_context(spec, FACTS, params, seed=seed))


def random_batch(size=32, seed=0):
    rng = np.random.default_rng(seed)
    buffer = TransitionReplay(256, 5, 2, seed)
    buffer.add(
        rng.normal(size=(256, 5)),
        rng.uniform(LOW, HIGH, (256, 2)),
        rng.normal(size=256),
        rng.normal(size=(256, 5)),
        rng.random(256) < 0.3,
    )
    return buffer.sample(size, reward_scale=1.0, device=torch.device("cpu"))


def test_the_builtin_actor_meets_the_contract_and_its_log_prob_is_the_squashed_densitys():
    actor = build_sac_actor(5, 2, action_low=LOW, action_high=HIGH, hidden_sizes=[16, 16])
    validate_policy_actor(actor, 5, 2, LOW, HIGH)
    obs = torch.randn(64, 5)
    torch.manual_seed(1)
    actions, info = actor(obs, training=True)
    mean, std = actor.get_mean_and_std(obs)
    bias, scale = actor.action_bias, actor.action_range
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, std),
        [
            torch.distributions.TanhTransform(),
            torch.distributions.AffineTransform(bias, scale),
        ],
    )
    inside = actions.clamp(bias - scale * (1 - 1e-6), bias + scale * (1 - 1e-6))
    expected = reference.log_prob(inside).sum(-1)
    torch.testing.assert_close(info["log_prob"], expected, atol=2e-3, rtol=1e-4)
    assert bool(((actions >= torch.tensor(LOW)) & (actions <= torch.tensor(HIGH))).all())
    # log std stays in [-5, 2] whatever the head says
    log_std = std.detach().log()
    assert float(log_std.min()) >= -5.0 - 1e-6 and float(log_std.max()) <= 2.0 + 1e-6


def test_deterministic_explore_and_export_are_the_squashed_mean_and_exploration_is_fresh_noise():
    actor = build_sac_actor(5, 2, action_low=LOW, action_high=HIGH, hidden_sizes=[8])
    obs = torch.randn(4, 5)
    mean, std = actor.get_mean_and_std(obs)
    squashed = actor.action_bias + actor.action_range * torch.tanh(mean)
    torch.testing.assert_close(actor.explore(obs, deterministic=True), squashed)
    torch.testing.assert_close(actor.as_export_module()(obs), squashed)
    torch.manual_seed(3)
    first = actor.explore(obs)
    torch.manual_seed(3)
    noise = torch.randn_like(mean)
    torch.testing.assert_close(first, actor.transform(mean + std * noise))
    assert not torch.equal(actor.explore(obs), actor.explore(obs))  # redrawn every step


def test_the_soft_q_target_takes_the_lower_head_the_entropy_bonus_and_no_bootstrap_at_the_end():
    next_q = torch.tensor([[1.0, 5.0, 2.0], [3.0, 4.0, -1.0]])
    next_log_prob = torch.tensor([0.5, -1.0, 2.0])
    rewards = torch.tensor([1.0, 2.0, 3.0])
    terminated = torch.tensor([0.0, 0.0, 1.0])
    alpha = torch.tensor(0.2)
    target = soft_q_target(next_q, next_log_prob, rewards, terminated, 0.9, alpha)
    expected = [1.0 + 0.9 * (1.0 - 0.2 * 0.5), 2.0 + 0.9 * (4.0 + 0.2), 3.0]
    torch.testing.assert_close(target, torch.tensor(expected))


def test_the_entropy_target_is_minus_the_action_dimension_on_unit_bounds():
    assert sac_target_entropy(torch.ones(3)) == -3.0
    assert sac_target_entropy(torch.ones(2), scale=0.5) == -1.0
    assert sac_target_entropy(torch.tensor([1.0, 2.0])) == pytest.approx(-2.0 + math.log(2.0))


def _by_hand(learner, batch, seed):
    """The losses of ``learner.update(batch)`` after ``torch.manual_seed(seed)``, computed on a
    copy in the update's order (critic, its step, then the actor and temperature)."""
    reference = copy.deepcopy(learner)
    torch.manual_seed(seed)
    alpha = reference.temperature.detach()
    with torch.no_grad():
        next_actions, info = reference.actor(batch["next_obs"])
        next_q = reference.target_critic(batch["next_obs"], next_actions)
        soft = torch.minimum(next_q[0], next_q[1]) - alpha * info["log_prob"]
        y = batch["rew"] + 0.99 * (1 - batch["terminated"]) * soft
    q = reference.critic(batch["obs"], batch["act"])
    critic_loss = ((q[0] - y) ** 2).mean() + ((q[1] - y) ** 2).mean()
    reference.critic_optimizer.zero_grad()
    critic_loss.backward()
    reference.critic_optimizer.step()
    actions, info = reference.actor(batch["obs"], training=True)
    q_pi = reference.critic(batch["obs"], actions)
    log_prob = info["log_prob"]
    actor_loss = (alpha * log_prob - torch.minimum(q_pi[0], q_pi[1])).mean()
    temperature_loss = (-alpha * (log_prob + reference.target_entropy)).mean()
    return {
        "Loss/critic": float(critic_loss),
        "q_mean": float(q.mean()),
        "Loss/actor": float(actor_loss),
        "Loss/temperature": float(temperature_loss),
        "entropy": float(-log_prob.mean()),
        "temperature": float(alpha),
    }


def test_an_updates_losses_are_those_computed_by_hand():
    learner = make_learner(dataclasses.replace(SMALL, initial_temperature=0.3))
    batch = random_batch()
    expected = _by_hand(learner, batch, seed=7)
    torch.manual_seed(7)
    metrics = learner.update(batch)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name


def test_the_temperature_falls_when_the_policy_is_more_random_than_the_target_and_rises_else():
    for scale, direction in ((10.0, -1), (-10.0, 1)):  # target far below / far above H(pi)
        learner = make_learner(dataclasses.replace(SMALL, target_entropy_scale=scale))
        before = float(learner.temperature)
        learner.update(random_batch())
        assert (float(learner.temperature) - before) * direction > 0, scale
    fixed = make_learner(dataclasses.replace(SMALL, autotune_temperature=False))
    metrics = fixed.update(random_batch())
    assert float(fixed.temperature) == 1.0 and "Loss/temperature" not in metrics


def test_the_actor_step_raises_the_soft_value_of_its_own_actions():
    learner = make_learner(dataclasses.replace(SMALL, policy_learning_rate=1e-2))
    batch = random_batch()

    def soft_value():
        torch.manual_seed(11)
        with torch.no_grad():
            actions, info = learner.actor(batch["obs"], training=True)
            q = learner.critic(batch["obs"], actions).min(dim=0).values
            return float((q - learner.temperature * info["log_prob"]).mean())

    learner.critic.requires_grad_(False)  # the actor alone moves: its objective must improve
    learner.critic_optimizer = torch.optim.SGD(learner.critic.parameters(), lr=0.0)
    before = soft_value()
    for _ in range(5):
        learner._update_actor_and_temperature(batch["obs"])
    assert soft_value() > before


def test_targets_follow_the_critic_by_tau_and_actor_steps_are_delayed():
    params = dataclasses.replace(SMALL, target_tau=0.25, actor_update_period=2)
    learner = make_learner(params)
    old_target = copy.deepcopy(learner.target_critic.state_dict())
    first = learner.update(random_batch())
    for name, value in learner.target_critic.state_dict().items():
        expected = 0.75 * old_target[name] + 0.25 * learner.critic.state_dict()[name]
        torch.testing.assert_close(value, expected)
    actor_before = copy.deepcopy(learner.actor.state_dict())
    second = learner.update(random_batch(seed=1))
    assert "Loss/actor" in first and "Loss/actor" not in second  # update 1 of 2: critic only
    assert all(torch.equal(v, actor_before[k]) for k, v in learner.actor.state_dict().items())
    assert learner.updates == 2


def test_a_custom_actor_is_optimised_with_its_aux_loss_and_the_loss_sign_matters():
    custom = ActorConfig(
        "tests.custom_actors:build", {"action_low": LOW, "action_high": HIGH, "aux_weight": 50.0}
    )
    params = dataclasses.replace(SMALL, actor_config=custom, policy_learning_rate=1e-2)
    learner = make_learner(params)
    batch = random_batch()
    with torch.no_grad():
        start = float(learner.actor.explore(batch["obs"], deterministic=True).square().mean())
    for seed in range(5):
        metrics = learner.update(random_batch(seed=seed))
    assert metrics["Loss/aux_action_l2"] > 0  # logged under its own name
    with torch.no_grad():
        end = float(learner.actor.explore(batch["obs"], deterministic=True).square().mean())
    assert end < start  # a heavy aux loss towards zero actions pulls them in


def test_a_non_finite_update_stops_naming_the_figures():
    learner = make_learner()
    batch = random_batch()
    batch["rew"][3] = float("nan")
    with pytest.raises(TrainingError) as error:
        learner.update(batch)
    # the critic's target alone, then the actor's value of the corrupted critic
    assert str(error.value) == (
        "SAC update 1: Loss/critic nan, Loss/actor nan is not finite; lower "
        "algo_params.q_learning_rate or check the environment's rewards"
    )


def test_a_loaded_learner_continues_exactly():
    learner = make_learner()
    for seed in range(3):
        learner.update(random_batch(seed=seed))
    restored = make_learner(seed=9)
    restored.load_state_dict(copy.deepcopy(learner.state_dict()))
    torch.manual_seed(4)
    expected = learner.update(random_batch(seed=5))
    torch.manual_seed(4)
    assert restored.update(random_batch(seed=5)) == expected
    assert restored.updates == learner.updates == 4


def test_resume_check_names_the_q_network_widths_the_config_cannot_take():
    state = make_learner().state_dict()
    assert CRITICS.resume_problem(SMALL, state, 5, 2) is None
    wider = dataclasses.replace(SMALL, hidden_sizes=(32, 16))
    assert "algo_params.hidden_sizes [32, 16]" in CRITICS.resume_problem(wider, state, 5, 2)
    state["target_critic"] = {"x": [1.0]}
    assert CRITICS.resume_problem(SMALL, state, 5, 2) == (
        "its target_critic is not a state dict of tensors; the file is damaged"
    )


def test_the_entry_declares_the_off_policy_learner_and_the_state_it_checkpoints():
    learner = SAC.off_policy
    assert isinstance(SAC.training, OffPolicy) and learner is SAC.training
    state = make_learner().state_dict()
    assert set(SAC.learner_state_keys) - {"return_scaler", "transitions"} <= set(state)
    assert set(learner.network_keys) <= set(state)


def test_each_optimiser_has_its_own_rate_and_the_actor_steps_as_often_as_its_period():
    params = dataclasses.replace(SMALL, actor_update_period=3, q_learning_rate=2e-3)
    learner = make_learner(params)
    rates = [
        optimizer.param_groups[0]["lr"]
        for optimizer in (
            learner.actor_optimizer,
            learner.critic_optimizer,
            learner.temperature_optimizer,
        )
    ]
    assert rates == [3e-4, 2e-3, 3e-4]
    learner.update(random_batch())
    steps = {int(s["step"]) for s in learner.actor_optimizer.state.values()}
    assert steps == {3} and {int(s["step"]) for s in learner.critic_optimizer.state.values()} == {1}


def test_the_actor_step_leaves_no_gradient_on_the_q_networks_or_a_fixed_temperature():
    learner = make_learner(dataclasses.replace(SMALL, autotune_temperature=False))
    learner._update_actor_and_temperature(random_batch()["obs"])
    assert all(p.grad is None for p in learner.critic.parameters())
    assert learner.log_temperature.grad is None
    assert any(p.grad is not None for p in learner.actor.parameters())


TINY_SAC = """
algo: sac
env: {{id: InvertedPendulum-v5, num_envs: 2, seed: 1}}
total_env_steps: {total}
rollout_length: 40
output_dir: {output}
algo_params: {{batch_size: 16, warmup_steps: 40, hidden_sizes: [16, 16], save_replay_buffer: true}}
"""


def _train(folder, name, total, **kwargs):
    from drlcli.config import load_config
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    path = folder / f"{name}.yaml"
    path.write_text(TINY_SAC.format(total=total, output=folder / "out"))
    config = load_config(path)
    devices = AvailableDevices(cuda_devices=0, mps=False)
    return config, train(config, quiet=True, devices=devices, **kwargs)


@pytest.mark.usefixtures("ray_cluster")
def test_sac_trains_through_ray_to_a_verified_playable_exportable_checkpoint_and_resumes_exactly(
    tmp_path,
):
    """The shared off-policy layer carries SAC end to end: metrics, checkpoint, verify, play,
    export; and a run stopped after round 2 and resumed with its replay buffer is the run
    trained straight through."""
    from drlcli.checkpoints.audit import audit_checkpoint
    from drlcli.checkpoints.files import load_payload
    from drlcli.checkpoints.policy import load_play_actor
    from drlcli.evaluation import run_episodes
    from drlcli.export import export_onnx
    from drlcli.metrics.csv_file import read_metrics
    from drlcli.metrics.schema import metric_columns
    from tests.test_metrics import COMMON

    config, summary = _train(tmp_path, "straight", 240)  # 80 env steps a round
    assert summary.rounds == 3 and summary.env_steps == 240
    rows = read_metrics(config.metrics_path)
    assert list(rows[0]) == metric_columns(SAC) == [*COMMON, *SAC.metrics]
    assert float(rows[-1]["updates"]) > 0 and float(rows[-1]["temperature"]) < 1.0
    payload = load_payload(config.checkpoint_path)
    assert payload["algo"] == "sac" and payload["obs_rms_state"] is None
    assert payload["actor_semantics"]["builder"] == "drlcli.algos.sac.actor:build_sac_actor"
    assert payload["actor_semantics"]["action_transform"] == "tanh_affine"
    assert not audit_checkpoint(config.checkpoint_path).failed
    assert len(run_episodes(load_play_actor(config.checkpoint_path), 1, seed=0)) == 1
    assert export_onnx(config.checkpoint_path, tmp_path / "sac.onnx").max_abs_error <= 1e-5

    stopped, _ = _train(tmp_path, "stopped", 160)
    resumed, summary = _train(
        tmp_path, "stopped", 240, resume=stopped.checkpoint_path, resume_replay=True
    )
    assert summary.rounds == 3
    straight = load_payload(config.checkpoint_path)["learner_states"][0]
    again = load_payload(resumed.checkpoint_path)["learner_states"][0]
    assert again["updates"] == straight["updates"] and again["transitions"] == 240
    # every network, optimiser moment, counter, random stream and episode in progress
    assert _same(straight, again)
    skip = {"wall_time_s", "sps", "updates_per_second"}
    first = [{k: v for k, v in row.items() if k not in skip} for row in rows]
    resumed_rows = read_metrics(resumed.metrics_path)
    second = [{k: v for k, v in row.items() if k not in skip} for row in resumed_rows]
    assert second == first


def _same(a, b) -> bool:
    """Nested states equal bit for bit."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def test_a_learner_process_builds_its_sac_learner_from_the_context():
    from drlcli.algos.entry_types import LearnerContext, RoundPlan

    spec = sac_actor_spec(SMALL, LOW, HIGH)
    context = LearnerContext(spec, FACTS, SMALL, 0.9, 1000, 1, "cpu", 7, RoundPlan(1, 1000))
    learner = SAC.off_policy.learner(context)
    direct = SACLearner(context)
    assert isinstance(learner, SACLearner) and learner.gamma == 0.9 and learner.params is SMALL
    assert learner.target_entropy == direct.target_entropy
    assert _same(learner.network_state(), direct.network_state())


def test_the_actor_maps_onto_the_bounds_in_float32_and_samples_mean_plus_std_noise():
    from drlcli.algos.sac.actor import SACActor

    as_float64 = SACActor(5, 2, np.array(LOW), np.array(HIGH), (8,))  # float64 bounds in
    assert as_float64.action_bias.dtype == as_float64.action_range.dtype == torch.float32
    actor = build_sac_actor(5, 2, action_low=LOW, action_high=HIGH, hidden_sizes=[16, 8])
    assert actor.action_bias.tolist() == [0.0, -1.0] and actor.action_range.tolist() == [1.0, 2.0]
    assert [tuple(p.shape) for p in actor.trunk.parameters()] == [(16, 5), (16,), (8, 16), (8,)]
    obs = torch.randn(6, 5)
    raw = torch.tanh(actor.log_std_head(actor.trunk(obs)))
    _, std = actor.get_mean_and_std(obs)
    torch.testing.assert_close(std.log(), -5.0 + 3.5 * (raw + 1.0))
    torch.manual_seed(2)
    actions, _ = actor(obs, training=True)
    torch.manual_seed(2)
    mean, std = actor.get_mean_and_std(obs)
    torch.testing.assert_close(actions, actor.transform(mean + std * torch.randn_like(mean)))


@pytest.mark.parametrize("hidden", [(), (16, 12, 8)])
def test_linear_or_narrowing_networks_build_and_answer_in_shape(hidden):
    """No hidden layer: a linear policy and linear Q functions; narrowing widths: each head
    reads the last one."""
    params = dataclasses.replace(SMALL, hidden_sizes=hidden)
    learner = make_learner(params)
    batch = random_batch()
    assert learner.critic(batch["obs"], batch["act"]).shape == (2, 32)
    assert learner.actor.explore(batch["obs"]).shape == (32, 2)
    learner.update(batch)


def test_learner_defaults_optimisers_and_targets():
    spec = sac_actor_spec(SMALL, LOW, HIGH)
    default = SACLearner(learner_context(spec, FACTS, SMALL))
    assert _same(default.network_state(), make_learner(seed=0).network_state())  # seed 0
    assert all(
        o.param_groups[0]["fused"] is True
        for o in (default.actor_optimizer, default.critic_optimizer, default.temperature_optimizer)
    )  # the fused kernel on the CPU
    assert not any(p.requires_grad for p in default.target_critic.parameters())
    assert default.target_entropy == pytest.approx(-2.0 + math.log(2.0))  # range [1, 2]


@pytest.mark.parametrize(
    ("low", "high", "side"),
    [([-5.0, -5.0], [1.0, 4.0], "action_low"), ([-1.0, 0.0], [5.0, 9.0], "action_high")],
)
def test_a_learner_refuses_a_custom_actor_whose_actions_leave_the_box(low, high, side):
    from drlcli.actors.spec import ActorSpec
    from drlcli.errors import PolicyActorContractError

    spec = ActorSpec("tests.custom_actors:build", {"action_low": low, "action_high": high})
    with pytest.raises(PolicyActorContractError, match=f"outside the environment's {side}"):
        SACLearner(learner_context(spec, FACTS, SMALL))


def test_a_data_parallel_learner_averages_the_gradients_of_each_optimisers_parameters():
    class RecordingGroup:  # stands in for the all-reduce of a DataParallelGroup
        def __init__(self):
            self.averaged = []

        def average_gradients(self, parameters):
            self.averaged.append({id(parameter) for parameter in parameters})

    learner = make_learner()
    group = RecordingGroup()
    learner.use_data_parallel(group)
    assert learner.data_parallel is group
    learner.update(random_batch())
    critic = {id(p) for p in learner.critic.parameters()}
    actor = {id(p) for p in learner.actor.parameters()}
    assert group.averaged == [critic, actor, {id(learner.log_temperature)}]


def test_targets_move_toward_every_critic_tensor():
    learner = make_learner(dataclasses.replace(SMALL, target_tau=1.0))
    learner.update(random_batch())  # tau 1: the targets are the critic after its step
    assert _same(learner.target_critic.state_dict(), learner.critic.state_dict())


def test_next_actions_come_from_inference_mode_and_the_actor_step_from_training_mode():
    """What a custom actor with training-time layers (BatchNorm) sees: forward(s', False) for
    the target, forward(s, True) for its own step."""
    learner = make_learner()
    calls, forward = [], learner.actor.forward

    def recording(obs, training):  # no default: each call must say which mode it wants
        calls.append(training)
        return forward(obs, training=training)

    learner.actor.forward = recording
    learner.update(random_batch())
    assert calls == [False, True]

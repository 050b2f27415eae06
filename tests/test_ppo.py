"""PPO components in-process: ReplayBuffer, MuJoCoActor.sample, Learner.train_step."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import torch

from drlcli.algos.ppo.algorithm import gaussian_actor_spec
from drlcli.algos.ppo.buffer import ReplayBuffer
from drlcli.algos.ppo.learner import Learner
from drlcli.algos.ppo.maths import approx_kl, clip_fraction, explained_variance
from drlcli.algos.ppo.params import PPOParams
from drlcli.config import EnvConfig
from drlcli.envs import EnvBatch
from drlcli.errors import TrainingError
from drlcli.normalization import RewardScaler, RmsState, normalize_observation
from drlcli.runtime.mujoco_actor import MuJoCoActor
from drlcli.runtime.run_context import RolloutActorContext

PARAMS = PPOParams(num_epochs=2, num_minibatches=4, hidden_sizes=(16, 16))
ENV = EnvConfig(id="InvertedPendulum-v5", num_envs=2, seed=5)
SPEC = gaussian_actor_spec(PARAMS, [-3.0], [3.0])


@pytest.fixture(scope="module")
def rollout_actor():
    actor = MuJoCoActor(RolloutActorContext(0, ENV, SPEC, PARAMS, gamma=0.99))
    yield actor
    actor.close()


@pytest.fixture
def learner():
    return Learner(SPEC, obs_dim=4, action_dim=1, params=PARAMS, seed=0)


def test_sample_returns_columnar_trajectory_and_stats(rollout_actor, learner):
    trajectory, stats = rollout_actor.sample(learner.network_state(), 50, 0.99, 0.95, None)
    assert set(trajectory) == {"obs", "act", "logp", "value", "adv", "ret"}
    assert trajectory["obs"].shape == (100, 4) and trajectory["act"].shape == (100, 1)
    for key in ("logp", "value", "adv", "ret"):
        assert trajectory[key].shape == (100,) and np.isfinite(trajectory[key]).all()
    np.testing.assert_allclose(
        trajectory["ret"], trajectory["adv"] + trajectory["value"], rtol=1e-5
    )
    assert stats["actor_id"] == 0
    assert stats["episodes"] == len(stats["episode_returns"])
    assert stats["episode_return_sum"] == pytest.approx(sum(stats["episode_returns"]))
    assert stats["obs_rms_moments"]["count"] == 100.0


def test_stored_log_prob_gives_ratio_exactly_one(rollout_actor, learner):
    # Push the mean out of the action bounds so many samples get clipped for env.step.
    state = learner.network_state()
    state["actor"]["mean_network.4.bias"] = torch.tensor([2.9])
    state["actor"]["log_std"] = torch.tensor([0.5])
    trajectory, _ = rollout_actor.sample(state, 50, 0.99, 0.95, None)
    assert (np.abs(trajectory["act"]) > 3.0).any(), "expected out-of-bounds policy actions"
    learner.load_network_state(state)
    with torch.no_grad():
        logp, _ = learner.actor.log_prob_and_entropy(
            torch.from_numpy(trajectory["obs"]), torch.from_numpy(trajectory["act"])
        )
    ratio = torch.exp(logp - torch.from_numpy(trajectory["logp"]))
    torch.testing.assert_close(ratio, torch.ones_like(ratio), rtol=0, atol=1e-6)


@pytest.mark.parametrize("value_hidden_sizes", [None, (32, 8)])
def test_the_numpy_rollout_samples_what_the_torch_modules_would(value_hidden_sizes):
    # The built-in networks run in numpy in the rollout (closed_form.DenseNetwork); with the
    # modules instead, the same seed draws the same noise and gives the same trajectory.
    params = dataclasses.replace(PARAMS, value_hidden_sizes=value_hidden_sizes)
    state = Learner(SPEC, obs_dim=4, action_dim=1, params=params, seed=2).network_state()
    trajectories = []
    for dense in (True, False):
        actor = MuJoCoActor(RolloutActorContext(0, ENV, SPEC, params, gamma=0.99))
        assert actor.dense_policy_mean is not None and actor.dense_value is not None
        if not dense:
            actor.dense_policy_mean = actor.dense_value = None
        trajectories.append(actor.sample(state, 60, 0.99, 0.95, None)[0])
        actor.close()
    for key in trajectories[0]:
        np.testing.assert_allclose(trajectories[0][key], trajectories[1][key], rtol=1e-4, atol=1e-5)


def test_one_obs_rms_state_for_the_whole_rollout_and_incremental_moments(rollout_actor, learner):
    state = RmsState(
        mean=np.array([0.1, -0.2, 0.3, 0.0]), var=np.array([4.0, 1.0, 0.25, 9.0]), count=1e6
    )
    trajectory, stats = rollout_actor.sample(
        learner.network_state(), 40, 0.99, 0.95, state.to_dict()
    )
    moments = RmsState.from_dict(stats["obs_rms_moments"])
    # Only this round's 80 raw observations, not the 1e6 of history.
    assert moments.count == 80.0
    # Undo the (fixed) normalisation: the mean of the raw observations must match the moments.
    raw = trajectory["obs"].astype(np.float64) * np.sqrt(state.var + 1e-8) + state.mean
    np.testing.assert_allclose(raw.mean(axis=0), moments.mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        normalize_observation(raw, state, clip=10.0), trajectory["obs"], atol=1e-5
    )


def test_truncation_bootstraps_from_the_final_observation_not_the_reset_one():
    short = dataclasses.replace(ENV, num_envs=1, max_episode_steps=5)
    params = dataclasses.replace(PARAMS, normalize_rewards=False)
    actor = MuJoCoActor(RolloutActorContext(0, short, SPEC, params, 0.9))
    learner = Learner(SPEC, 4, 1, PARAMS, seed=0)
    state = learner.network_state()
    # A value network that depends strongly on the observation: V(final) != V(reset).
    state["value"]["network.4.weight"] = torch.full((1, 16), 50.0)
    trajectory, stats = actor.sample(state, 5, 0.9, 1.0, None)
    actor.close()
    assert stats["episode_returns"] == [5.0], "the pendulum must reach the time limit"
    # Replay the same actions on the same seed to get both candidate observations.
    replay = EnvBatch.for_rollout_actor(short, 0)
    for action in np.clip(trajectory["act"], -3.0, 3.0):
        step = replay.step(action[None].astype(np.float64))
    replay.close()
    assert step.truncated[0]
    learner.load_network_state(state)

    def value(observation):
        with torch.no_grad():
            return float(learner.value_network(torch.tensor(observation, dtype=torch.float32)))

    final, after_reset = value(step.final_obs), value(step.next_obs)
    assert abs(final - after_reset) > 1.0  # the test can tell the two apart
    # Last step, lambda 1: return = r + gamma * V(s'), s' the pre-reset observation.
    assert trajectory["ret"][-1] == pytest.approx(1.0 + 0.9 * final, rel=1e-5, abs=1e-4)


def test_buffer_rejects_bad_trajectories():
    buffer = ReplayBuffer()
    with pytest.raises(ValueError, match="lacks"):
        buffer.add({"obs": np.zeros((2, 1))})
    columns = {k: np.zeros(3) for k in ("obs", "act", "logp", "value", "adv")}
    with pytest.raises(ValueError, match="differ in length"):
        buffer.add({**columns, "ret": np.zeros(2)})
    with pytest.raises(ValueError, match="empty"):
        buffer.data()


def test_train_step_reports_buffer_size_before_clearing(rollout_actor, learner):
    first, _ = rollout_actor.sample(learner.network_state(), 32, 0.99, 0.95, None)
    second, _ = rollout_actor.sample(learner.network_state(), 32, 0.99, 0.95, None)
    assert learner.add(first, second) == 128
    state, metrics = learner.train_step(fraction_done=0.75)
    assert metrics["buffer_size"] == 128.0
    assert len(learner.buffer) == 0
    assert metrics["epochs"] == 2.0
    assert set(state) == {"actor", "value"}
    for name in ("Loss/policy", "Loss/value", "Loss/entropy", "approx_kl", "clip_fraction"):
        assert np.isfinite(metrics[name])
    # Linear annealing: a round that starts 3/4 into the run steps with 1/4 of the rate.
    assert metrics["learning_rate"] == pytest.approx(PARAMS.learning_rate / 4)
    assert learner.optimizer.param_groups[0]["lr"] == metrics["learning_rate"]


def test_a_learner_keeps_its_own_schedule_from_the_runs_plan(rollout_actor):
    """The learner, not the driver, knows where the run stands: a resumed run of 4 rounds of
    100 steps, 1 round done, anneals from 1/4 of the way, one round per train_step."""
    from drlcli.algos.entry_types import RoundPlan

    plan = RoundPlan(total_rounds=4, steps_per_round=100, start_round=1, start_env_steps=100)
    assert plan.planned_env_steps == 400
    learner = Learner(SPEC, obs_dim=4, action_dim=1, params=PARAMS, seed=0, plan=plan)
    rates = []
    for _ in range(3):
        trajectory, _ = rollout_actor.sample(learner.network_state(), 16, 0.99, 0.95, None)
        learner.add(trajectory)
        rates.append(learner.train_step()[1]["learning_rate"])
    lr = PARAMS.learning_rate
    assert rates == [lr * (1 - 100 / 400), lr * (1 - 200 / 400), lr * (1 - 300 / 400)]
    assert learner.clock.env_steps == 400
    without_plan = Learner(SPEC, obs_dim=4, action_dim=1, params=PARAMS, seed=0)
    without_plan.add(trajectory)
    with pytest.raises(TypeError) as error:
        without_plan.train_step()
    assert str(error.value) == "train_step: a learner built without a plan needs fraction_done"


@pytest.mark.parametrize("closed_form", [True, False])
def test_train_step_moves_the_parameters_down_the_ppo_loss(rollout_actor, closed_form):
    """One full-batch step with a small learning rate lowers the PPO loss of that batch (its
    clipped surrogate, value and entropy terms together): a step up the gradient, or one that
    does not move, fails."""
    from drlcli.algos.ppo.maths import ppo_loss, standardize_advantages

    params = dataclasses.replace(
        PARAMS, num_epochs=1, num_minibatches=1, learning_rate=1e-3, anneal_learning_rate=False
    )
    learner = Learner(SPEC, 4, 1, params, seed=0, closed_form=closed_form)
    trajectory, _ = rollout_actor.sample(learner.network_state(), 32, 0.99, 0.95, None)
    data = {name: torch.as_tensor(column) for name, column in trajectory.items()}

    def batch_loss() -> float:
        with torch.no_grad():
            new_logprob, entropy = learner.actor.log_prob_and_entropy(data["obs"], data["act"])
            loss, _ = ppo_loss(
                new_logprob=new_logprob,
                entropy=entropy,
                new_value=learner.value_network(data["obs"]),
                old_logprob=data["logp"],
                old_value=data["value"],
                advantages=standardize_advantages(data["adv"]),
                returns=data["ret"],
                params=params,
            )
        return float(loss)

    before = batch_loss()
    learner.add(trajectory)
    learner.train_step(0.0)
    assert batch_loss() < before


@pytest.mark.parametrize(("target_kl", "expected_epochs"), [(1e-9, 1), (1e9, 5), (None, 5)])
def test_kl_early_stop_ends_the_round_once_kl_exceeds_the_target(
    rollout_actor, target_kl, expected_epochs
):
    # The first minibatch has ratio 1 (KL 0): a tiny target stops at the second, in epoch 1;
    # a target that is never exceeded, or none, runs every epoch.
    params = dataclasses.replace(PARAMS, num_epochs=5, target_kl=target_kl)
    learner = Learner(SPEC, 4, 1, params, seed=0)
    trajectory, _ = rollout_actor.sample(learner.network_state(), 32, 0.99, 0.95, None)
    learner.add(trajectory)
    _, metrics = learner.train_step(0.0)
    assert metrics["epochs"] == expected_epochs


def test_gradient_clipping_bounds_the_applied_gradient(rollout_actor):
    clipped = Learner(SPEC, 4, 1, dataclasses.replace(PARAMS, max_grad_norm=1e-3), seed=0)
    trajectory, _ = rollout_actor.sample(clipped.network_state(), 32, 0.99, 0.95, None)
    clipped.add(trajectory)
    _, metrics = clipped.train_step(0.0)
    # The last minibatch's gradients are still on the parameters: clipped to the bound,
    # while the reported (pre-clip) norm is far above it.
    parameters = [*clipped.actor.parameters(), *clipped.value_network.parameters()]
    applied = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters]))
    assert applied <= 1e-3 * 1.0001
    assert metrics["grad_norm"] > 1e-2


def test_non_finite_data_fails_with_a_training_error(rollout_actor, learner):
    trajectory, _ = rollout_actor.sample(learner.network_state(), 16, 0.99, 0.95, None)
    trajectory["adv"][:] = np.nan
    learner.add(trajectory)
    with pytest.raises(TrainingError, match="the PPO update's policy loss nan, value loss nan"):
        learner.train_step(0.0)


def _loss(**overrides):
    """ppo_loss on a two-sample batch whose ratio is 1 (new log-prob == old)."""
    from drlcli.algos.ppo.maths import ppo_loss

    inputs = {
        "new_logprob": torch.tensor([-1.0, -2.0]),
        "entropy": torch.tensor([1.5, 0.5]),
        "new_value": torch.tensor([1.0, 0.0]),
        "old_logprob": torch.tensor([-1.0, -2.0]),
        "old_value": torch.tensor([0.0, 0.0]),
        "advantages": torch.tensor([1.0, -1.0]),
        "returns": torch.tensor([1.0, 1.0]),
        "params": PPOParams(),
    }
    inputs.update(overrides)
    return ppo_loss(**inputs)


def test_ppo_loss_terms_by_hand():
    loss, stats = _loss()
    # ratio 1: pg = mean(-A) = 0; v = 0.5 * mean([0, 1]) = 0.25; ent_coef 0: no entropy term.
    assert float(stats["pg_loss"]) == 0.0
    assert float(stats["v_loss"]) == 0.25
    assert float(stats["entropy_loss"]) == 1.0
    assert float(loss) == pytest.approx(0.5 * 0.25)


def test_ppo_loss_clips_the_ratio_pessimistically():
    # ratio e^1 on a positive advantage: clipped at 1.2; ratio e^-1 on a negative one: 0.8.
    _, stats = _loss(new_logprob=torch.tensor([0.0, -3.0]))
    assert float(stats["pg_loss"]) == pytest.approx((-1.2 + 0.8) / 2)


def test_ppo_loss_entropy_coefficient_subtracts_the_mean_entropy():
    params = PPOParams(ent_coef=0.1)
    loss, _ = _loss(params=params)
    assert float(loss) == pytest.approx(0.5 * 0.25 - 0.1 * 1.0)


def test_ppo_loss_value_clipping_takes_the_worse_of_clipped_and_unclipped():
    # Sample 0 moved its value from 0 to 1 (its return): unclipped error 0, but the clipped
    # value 0.2 errs by 0.8, and the max keeps 0.64. Sample 1 did not move: error 1 both ways.
    loss, stats = _loss(params=PPOParams(clip_value_loss=True))
    assert float(stats["v_loss"]) == pytest.approx(0.5 * (0.64 + 1.0) / 2)
    assert float(loss) == pytest.approx(0.5 * float(stats["v_loss"]))


@pytest.mark.parametrize("normalize", [True, False])
def test_advantage_normalisation_makes_the_update_scale_free(rollout_actor, normalize):
    """Standardised advantages: scaling every advantage by 1000 changes nothing; raw ones: it
    changes the update."""
    params = dataclasses.replace(PARAMS, normalize_advantages=normalize, num_minibatches=1)
    trajectory, _ = rollout_actor.sample(
        Learner(SPEC, 4, 1, params).network_state(), 32, 0.99, 0.95, None
    )
    updates = []
    for scale in (1.0, 1000.0):
        learner = Learner(SPEC, 4, 1, params, seed=0)
        learner.add({**trajectory, "adv": trajectory["adv"] * scale})
        state, _ = learner.train_step(0.0)
        updates.append(state["actor"]["mean_network.0.weight"])
    same = torch.allclose(updates[0], updates[1], rtol=1e-4, atol=1e-6)
    assert same == normalize


def test_warm_up_gives_the_first_round_standardised_observations():
    """The warm-up's moments standardise the first round of a task whose features differ in
    scale by hundreds, and it leaves the first round exactly as a run without it would sample
    it: the same environment states and the same policy noise."""
    from tests import user_robot

    env = EnvConfig(id=f"tests.user_robot:{user_robot.ENV_ID}", num_envs=8, seed=3)
    spec = gaussian_actor_spec(PARAMS, [-1.0, -1.0], [1.0, 1.0])
    network = Learner(spec, obs_dim=9, action_dim=2, params=PARAMS, seed=0).network_state()
    # One at a time: each seeds torch's (process-wide) generator when it is made.
    warmed = MuJoCoActor(RolloutActorContext(0, env, spec, PARAMS, gamma=0.99))
    moments = RmsState.from_dict(warmed.warm_up_observations(200)["obs_rms_moments"])
    first, _ = warmed.sample(network, 200, 0.99, 0.95, moments.to_dict())
    plain = MuJoCoActor(RolloutActorContext(0, env, spec, PARAMS, gamma=0.99))
    try:
        assert moments.count == 1600.0
        assert moments.var.max() / moments.var.min() > 1e4  # raw features far apart in scale
        reference, _ = plain.sample(network, 200, 0.99, 0.95, moments.to_dict())
        np.testing.assert_array_equal(first["act"], reference["act"])
        np.testing.assert_array_equal(first["obs"], reference["obs"])
        # Standardised: every feature of the first round is of unit scale.
        assert np.abs(first["obs"].mean(axis=0)).max() < 1.0
        assert first["obs"].std(axis=0).min() > 0.5 and first["obs"].std(axis=0).max() < 2.0
    finally:
        warmed.close()
        plain.close()


def gae_by_hand(rewards, values, next_values, terminated, truncated, gamma, gae_lambda):
    """GAE one env and step at a time, as Schulman et al. define it: an episode's advantages
    sum its discounted TD errors, restarting wherever an episode ended."""
    steps, num_envs = rewards.shape
    advantages = np.zeros((steps, num_envs))
    for env in range(num_envs):
        following = 0.0
        for t in reversed(range(steps)):
            if terminated[t, env] or truncated[t, env]:
                following = 0.0
            bootstrap = 0.0 if terminated[t, env] else gamma * next_values[t, env]
            delta = rewards[t, env] + bootstrap - values[t, env]
            following = delta + gamma * gae_lambda * following
            advantages[t, env] = following
    return advantages


# Statistics far from the pendulum's own: a value of an unstandardised observation differs.
SHIFTED_RMS = {"mean": np.array([0.3, -0.2, 1.0, 0.5]), "var": np.full(4, 0.04), "count": 50.0}


@pytest.mark.parametrize(
    ("normalize_rewards", "obs_rms"), [(False, None), (True, None), (False, SHIFTED_RMS)]
)
def test_advantages_and_returns_are_gae_of_the_replayed_episodes(normalize_rewards, obs_rms):
    """The trajectory's advantages and returns against GAE by hand on the rewards, terminations
    and next-state values of the same episodes replayed step by step: the bootstrap from the
    next step's value (and from the last observation after the last step, each standardised
    with the round's statistics), the scaled rewards."""
    steps, gamma, gae_lambda = 40, 0.9, 0.8
    env = dataclasses.replace(ENV, max_episode_steps=15)  # time limits as well as falls
    params = dataclasses.replace(PARAMS, normalize_rewards=normalize_rewards)
    actor = MuJoCoActor(RolloutActorContext(0, env, SPEC, params, gamma))
    state = Learner(SPEC, 4, 1, PARAMS, seed=0).network_state()
    state["value"]["network.4.weight"] = torch.full((1, 16), 5.0)  # values vary with the state
    trajectory, _ = actor.sample(state, steps, gamma, gae_lambda, obs_rms)
    actor.close()

    learner = Learner(SPEC, 4, 1, PARAMS, seed=0)
    learner.load_network_state(state)
    rms = None if obs_rms is None else RmsState.from_dict(obs_rms)

    def value(observations):
        standardised = normalize_observation(observations, rms, PARAMS.observation_clip)
        with torch.no_grad():
            return learner.value_network(torch.as_tensor(standardised, dtype=torch.float32))

    num_envs = env.num_envs
    actions = trajectory["act"].reshape(steps, num_envs, 1)
    replay = EnvBatch.for_rollout_actor(env, 0)
    scaler = RewardScaler(num_envs, gamma)
    rewards, next_values = np.zeros((steps, num_envs)), np.zeros((steps, num_envs))
    terminated = np.zeros((steps, num_envs), dtype=bool)
    truncated = np.zeros((steps, num_envs), dtype=bool)
    for t in range(steps):
        step = replay.step(np.clip(actions[t], -3.0, 3.0).astype(np.float64))
        terminated[t], truncated[t] = step.terminated, step.truncated
        rewards[t] = step.rewards
        if normalize_rewards:
            scaler.update(step.rewards, step.terminated | step.truncated)
            rewards[t] = np.clip(step.rewards / scaler.divisor(), -10.0, 10.0)
        next_values[t] = value(step.final_obs)  # V(s_{t+1}) before any reset
    replay.close()
    assert terminated.any() and truncated.any() and not (terminated | truncated)[-1].all()
    if normalize_rewards:
        assert abs(scaler.divisor() - 1.0) > 0.1  # scaling changes the rewards

    values = trajectory["value"].reshape(steps, num_envs)
    expected = gae_by_hand(rewards, values, next_values, terminated, truncated, gamma, gae_lambda)
    np.testing.assert_allclose(trajectory["adv"].reshape(steps, num_envs), expected, atol=1e-4)
    np.testing.assert_allclose(
        trajectory["ret"].reshape(steps, num_envs), expected + values, atol=1e-4
    )


def test_minibatches_cover_the_round_once_per_epoch_with_round_standardised_advantages():
    """Every epoch's minibatches hold each stored sample once, its columns still side by side,
    with the advantage standardised over the whole round (not per minibatch)."""
    params = dataclasses.replace(PARAMS, num_epochs=2, num_minibatches=4, target_kl=None)
    learner = Learner(SPEC, 4, 1, params, seed=0, closed_form=False)
    count = 64
    generator = np.random.default_rng(0)
    trajectory = {
        "obs": np.arange(count * 4, dtype=np.float32).reshape(count, 4) / 100,
        "act": generator.normal(size=(count, 1)).astype(np.float32),
        "logp": generator.normal(size=count).astype(np.float32) - 1.0,
        "value": generator.normal(size=count).astype(np.float32),
        "adv": (3.0 + 2.0 * generator.normal(size=count)).astype(np.float32),
        "ret": generator.normal(size=count).astype(np.float32),
    }
    learner.add(trajectory)
    seen = []
    compute = learner.minibatch_gradients

    def record(**minibatch):
        seen.append({name: column.detach().clone() for name, column in minibatch.items()})
        return compute(**minibatch)

    learner.minibatch_gradients = record
    learner.train_step(0.0)
    assert len(seen) == 8 and all(len(batch["obs"]) == 16 for batch in seen)
    advantages = trajectory["adv"].astype(np.float64)
    standardised = (advantages - advantages.mean()) / (advantages.std(ddof=1) + 1e-8)
    stored = {"actions": "act", "old_logprob": "logp", "old_value": "value", "returns": "ret"}
    for epoch in (seen[:4], seen[4:]):
        rows = np.concatenate([(batch["obs"][:, 0].numpy() * 100 / 4).round() for batch in epoch])
        index = rows.astype(int)
        assert sorted(index) == list(range(count))  # each sample once per epoch
        for name, column in stored.items():
            got = np.concatenate([batch[name].numpy() for batch in epoch])
            np.testing.assert_array_equal(got, trajectory[column][index])
        got = np.concatenate([batch["advantages"].numpy() for batch in epoch])
        np.testing.assert_allclose(got, standardised[index], rtol=1e-5, atol=1e-6)
    assert not np.array_equal(
        np.concatenate([b["obs"][:, 0].numpy() for b in seen[:4]]),
        np.concatenate([b["obs"][:, 0].numpy() for b in seen[4:]]),
    )  # reshuffled every epoch


def test_approx_kl_is_the_k3_estimator():
    # ratios 2 and 1/2: ((2 - 1) - log 2 + (1/2 - 1) + log 2) / 2 = 0.25
    logratio = np.log([2.0, 0.5])
    assert approx_kl(logratio) == pytest.approx(0.25)
    assert approx_kl(torch.tensor(logratio)) == pytest.approx(0.25)
    assert approx_kl(np.zeros(3)) == 0.0


def test_clip_fraction_counts_the_ratios_outside_the_clip_range():
    # ratios 1, 1.3, 0.7, 1.1 with eps 0.2: 1.3 and 0.7 lie outside [0.8, 1.2]
    logratio = torch.log(torch.tensor([1.0, 1.3, 0.7, 1.1]))
    assert clip_fraction(logratio, 0.2) == 0.5
    assert clip_fraction(logratio, 0.35) == 0.0


def test_explained_variance_by_hand():
    returns = torch.tensor([1.0, 2.0, 4.0, 7.0])
    assert explained_variance(returns.clone(), returns) == 1.0
    assert explained_variance(torch.full((4,), 100.0), returns) == pytest.approx(0.0, abs=1e-6)
    # residuals 1, -1, 1, -1: Var 4/3 against Var[R] = 7 (unbiased, both)
    predicted = returns - torch.tensor([1.0, -1.0, 1.0, -1.0])
    assert explained_variance(predicted, returns) == pytest.approx(1 - (4 / 3) / 7)
    assert np.isnan(explained_variance(returns, torch.full((4,), 3.0)))


def test_the_reported_kl_clip_fraction_and_explained_variance_are_those_of_the_new_policy(
    rollout_actor,
):
    params = dataclasses.replace(PARAMS, num_epochs=4, learning_rate=3e-3)
    learner = Learner(SPEC, 4, 1, params, seed=0)
    trajectory, _ = rollout_actor.sample(learner.network_state(), 64, 0.99, 0.95, None)
    learner.add(trajectory)
    _, metrics = learner.train_step(0.0)
    data = {name: torch.as_tensor(column) for name, column in trajectory.items()}
    with torch.no_grad():
        new_logprob, _ = learner.actor.log_prob_and_entropy(data["obs"], data["act"])
        ratio = torch.exp(new_logprob - data["logp"]).numpy().astype(np.float64)
        predicted = learner.value_network(data["obs"]).numpy().astype(np.float64)
    returns = trajectory["ret"].astype(np.float64)
    clipped = np.abs(ratio - 1.0) > params.clip_coef
    assert 0 < clipped.mean() < 1  # the test tells a right fraction from 0 or 1
    assert metrics["clip_fraction"] == pytest.approx(clipped.mean())
    assert metrics["approx_kl"] == pytest.approx(np.mean(ratio - 1 - np.log(ratio)), rel=1e-4)
    explained = 1 - np.var(returns - predicted) / np.var(returns)
    assert metrics["explained_variance"] == pytest.approx(explained, rel=1e-4, abs=1e-5)
    assert metrics["explained_variance"] != pytest.approx(0.0, abs=1e-3)


def test_a_rollout_actor_loaded_with_anothers_state_samples_what_it_would_have():
    """``MuJoCoActor.state_dict`` / ``load_state_dict``: the episodes in progress, the sampling
    noise and the reward scaler's discounted returns carry over, so the next round is the same
    in a fresh process (an exact resume)."""
    env = dataclasses.replace(ENV, max_episode_steps=30)
    network = Learner(SPEC, 4, 1, PARAMS, seed=0).network_state()
    first = MuJoCoActor(RolloutActorContext(0, env, SPEC, PARAMS, gamma=0.99))
    try:
        first.sample(network, 45, 0.99, 0.95, None)  # mid-episode, scaler statistics grown
        moments = first.reward_scaler.state_dict()
        state = first.state_dict()
        assert np.abs(state["discounted_return"]).max() > 0
        expected, expected_stats = first.sample(network, 20, 0.99, 0.95, None)
    finally:
        first.close()
    torch.manual_seed(123)  # another process's generator state: the loaded one must win
    second = MuJoCoActor(RolloutActorContext(0, env, SPEC, PARAMS, gamma=0.99))
    try:
        assert second.load_state_dict(state)["actor_id"] == 0
        second.restore_reward_scaler(moments)
        got, stats = second.sample(network, 20, 0.99, 0.95, None)
    finally:
        second.close()
    for name, column in expected.items():
        np.testing.assert_array_equal(got[name], column, err_msg=name)
    assert stats["episode_returns"] == expected_stats["episode_returns"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda state: state.pop("envs"), "'envs'"),
        (lambda state: state.update(torch_rng=[1, 2, 3]), "torch_rng|RNG|state"),
        (lambda state: state.update(discounted_return=np.zeros(5)), r"discounted returns of shape"),
    ],
)
def test_a_rollout_actor_refuses_a_state_that_does_not_fit_in_one_line(damage, message):
    from drlcli.errors import CheckpointError

    actor = MuJoCoActor(RolloutActorContext(3, ENV, SPEC, PARAMS, gamma=0.99))
    try:
        state = actor.state_dict()
        damage(state)
        with pytest.raises(CheckpointError, match=r"^rollout actor 3's stored state does not fit"):
            actor.load_state_dict(state)
        with pytest.raises(CheckpointError, match=message):
            actor.load_state_dict(state)
    finally:
        actor.close()


def test_a_learner_loaded_with_anothers_state_makes_the_same_next_update(rollout_actor):
    """Networks, the optimiser's moments and the minibatch order's generator all carry over."""
    import copy

    first = Learner(SPEC, 4, 1, PARAMS, seed=0)
    trajectory, _ = rollout_actor.sample(first.network_state(), 32, 0.99, 0.95, None)
    first.add(trajectory)
    first.train_step(0.0)
    state = copy.deepcopy(first.state_dict())
    second = Learner(SPEC, 4, 1, PARAMS, seed=7)  # other weights and another shuffle stream
    stored = dict(state, shuffle_generator=state["shuffle_generator"].tolist())  # bytes as ints
    second.load_state_dict(stored)
    first.add(trajectory)
    second.add(trajectory)
    expected, expected_metrics = first.train_step(0.5)
    got, metrics = second.train_step(0.5)
    for part in ("actor", "value"):
        for name, tensor in expected[part].items():
            assert torch.equal(got[part][name], tensor), (part, name)
    assert metrics["Loss/policy"] == expected_metrics["Loss/policy"]


def test_a_damaged_shuffle_generator_is_refused_in_one_line():
    from drlcli.errors import CheckpointError

    learner = Learner(SPEC, 4, 1, PARAMS, seed=0)
    state = dict(learner.state_dict(), shuffle_generator=torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(CheckpointError, match=r"^the checkpoint's shuffle_generator state is dam"):
        learner.load_state_dict(state)


def test_the_reported_losses_and_gradient_norm_are_means_over_the_minibatches(rollout_actor):
    learner = Learner(SPEC, 4, 1, PARAMS, seed=0)
    trajectory, _ = rollout_actor.sample(learner.network_state(), 64, 0.99, 0.95, None)
    learner.add(trajectory)
    losses, norms = [], []
    compute_gradients, clip = learner.minibatch_gradients, learner.flat.clip_grad_norm

    def recorded_gradients(**batch):
        stats = compute_gradients(**batch)
        losses.append([float(stats[k]) for k in ("pg_loss", "v_loss", "entropy_loss")])
        return stats

    def recorded_clip(max_norm):
        norms.append(float(clip(max_norm)))
        return norms[-1]

    learner.minibatch_gradients = recorded_gradients
    learner.flat.clip_grad_norm = recorded_clip
    _, metrics = learner.train_step(0.0)
    assert len(losses) == len(norms) == PARAMS.num_epochs * PARAMS.num_minibatches
    policy, value, entropy = np.mean(losses, axis=0)
    assert len({policy, value, entropy, np.mean(norms)}) == 4  # a swap would show
    assert metrics["Loss/policy"] == pytest.approx(policy, rel=1e-6)
    assert metrics["Loss/value"] == pytest.approx(value, rel=1e-6)
    assert metrics["Loss/entropy"] == pytest.approx(entropy, rel=1e-6)
    assert metrics["grad_norm"] == pytest.approx(np.mean(norms), rel=1e-6)


def test_constant_returns_have_no_explained_variance(rollout_actor):
    learner = Learner(SPEC, 4, 1, PARAMS, seed=0)
    trajectory, _ = rollout_actor.sample(learner.network_state(), 16, 0.99, 0.95, None)
    learner.add({**trajectory, "ret": np.full_like(trajectory["ret"], 2.0)})
    _, metrics = learner.train_step(0.0)
    assert np.isnan(metrics["explained_variance"])  # 1 - x / 0 is no figure


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        ("returns", "value loss inf, gradient norm nan"),
        ("log_std", "policy loss nan, entropy nan, gradient norm nan"),
    ],
)
def test_a_non_finite_update_names_the_quantities_and_what_to_do(rollout_actor, broken, named):
    # One minibatch: its losses are computed before an update could spread the infinity.
    params = dataclasses.replace(PARAMS, num_epochs=1, num_minibatches=1)
    learner = Learner(SPEC, 4, 1, params, seed=0)
    trajectory, _ = rollout_actor.sample(learner.network_state(), 16, 0.99, 0.95, None)
    if broken == "returns":
        trajectory = {**trajectory, "ret": np.full_like(trajectory["ret"], np.inf)}
    else:
        with torch.no_grad():
            learner.actor.log_std.fill_(float("nan"))
    learner.add(trajectory)
    with pytest.raises(TrainingError) as error:
        learner.train_step(0.0)
    assert str(error.value) == (
        f"the PPO update's {named} (mean over minibatches) is not "
        "finite; lower algo_params.learning_rate or check the environment's rewards"
    )


def test_a_policy_actor_that_replaces_a_parameter_tensor_is_told_how_to_update_in_place(
    rollout_actor,
):
    from drlcli.errors import PolicyActorContractError

    learner = Learner(SPEC, 4, 1, PARAMS, seed=0)
    trajectory, _ = rollout_actor.sample(learner.network_state(), 16, 0.99, 0.95, None)
    learner.add(trajectory)
    log_std = learner.actor.log_std
    learner.actor.normalize_parameters = lambda: setattr(log_std, "data", log_std.data.clone())
    with pytest.raises(PolicyActorContractError) as error:
        learner.train_step(0.0)
    assert str(error.value) == (
        "the policy actor replaced a parameter tensor or its gradient during the update "
        "(e.g. `p.data = ...` in normalize_parameters); update parameters in place "
        "(`p.copy_(...)` under torch.no_grad())"
    )


@pytest.mark.parametrize(
    ("samples", "minibatches", "standardised"),
    [(1, 1, False), (2, 2, True), (4, 4, True)],  # one sample has no spread to divide by
)
def test_small_buffers_make_minibatches_of_at_least_one_sample(
    rollout_actor, samples, minibatches, standardised
):
    params = dataclasses.replace(PARAMS, num_epochs=1, num_minibatches=minibatches)
    learner = Learner(SPEC, 4, 1, params, seed=0)
    trajectory, _ = rollout_actor.sample(learner.network_state(), 8, 0.99, 0.95, None)
    learner.add({name: column[:samples] for name, column in trajectory.items()})
    seen, compute_gradients = [], learner.minibatch_gradients

    def record(**batch):
        seen.append(np.asarray(batch["advantages"], dtype=np.float64))
        return compute_gradients(**batch)

    learner.minibatch_gradients = record
    _, metrics = learner.train_step(0.0)
    assert [len(batch) for batch in seen] == [samples // minibatches] * minibatches
    advantages = np.concatenate(seen)
    raw = trajectory["adv"][:samples].astype(np.float64)
    if standardised:
        # float32 standardisation against float64: an absolute slack for the entries near 0
        np.testing.assert_allclose(
            np.sort(advantages),
            np.sort((raw - raw.mean()) / raw.std(ddof=1)),
            rtol=1e-5,
            atol=1e-6,
        )
    else:
        np.testing.assert_allclose(advantages, raw, rtol=1e-6)
    assert np.isfinite(metrics["Loss/policy"])


def test_the_warm_up_draws_its_actions_over_the_whole_box_from_the_actors_own_seed():
    """Its actions are seeded by the rollout actor (the same every time, another for another
    actor), uniform over ``[low, high]`` (InvertedPendulum's is [-3, 3]), and its answer names
    the actor and its process, as the driver's restart handling reads them."""
    import os

    def warm_up(actor_id: int) -> tuple[dict, np.ndarray]:
        actor = MuJoCoActor(RolloutActorContext(actor_id, ENV, SPEC, PARAMS, gamma=0.99))
        taken, step = [], actor.envs.step
        actor.envs.step = lambda actions: (taken.append(np.array(actions)), step(actions))[1]
        try:
            return actor.warm_up_observations(100), np.concatenate(taken)
        finally:
            actor.close()

    answer, actions = warm_up(0)
    again, same_actions = warm_up(0)
    _, other_actions = warm_up(1)
    assert (answer["actor_id"], answer["process_id"]) == (0, os.getpid())
    assert set(answer) == {"actor_id", "process_id", "obs_rms_moments"}
    np.testing.assert_array_equal(actions, same_actions)
    for name, value in answer["obs_rms_moments"].items():
        np.testing.assert_array_equal(value, again["obs_rms_moments"][name])
    assert not np.array_equal(actions, other_actions)
    assert actions.min() < -2.5 and actions.max() > 2.5  # the whole box, not [-3, 1]
    assert answer["obs_rms_moments"]["count"] == 100 * ENV.num_envs


def shifted_spec(shift: float, bound: float):
    from drlcli.actors.spec import ActorSpec

    kwargs = {"action_low": [-bound], "action_high": [bound], "shift": shift}
    return ActorSpec("tests.custom_actors:build_shifted_gaussian", kwargs)


def offset_spec(offset: float):
    from drlcli.actors.spec import ActorSpec

    kwargs = {"action_low": [-3.0], "action_high": [3.0], "offset": offset}
    return ActorSpec("tests.custom_actors:build_offset_gaussian", kwargs)


# A mean network the numpy copy cannot run (shifted), and a plain one whose forward adds an
# offset outside it: either way the subclass's own forward must sample.
@pytest.mark.parametrize("make_spec", [lambda: shifted_spec(2.0, 3.0), lambda: offset_spec(2.0)])
def test_a_subclass_of_the_built_in_actor_samples_as_its_own_module(make_spec):
    spec = make_spec()
    actor = MuJoCoActor(RolloutActorContext(0, ENV, spec, PARAMS, gamma=0.99))
    try:
        network = Learner(spec, 4, 1, PARAMS, seed=0).network_state()
        trajectory, _ = actor.sample(network, 20, 0.99, 0.95, None)
    finally:
        actor.close()
    # Its own forward: the moved mean (a copy of the built-in's layers would give about 0).
    assert abs(float(trajectory["act"].mean()) - 2.0) < 0.5


def test_a_rollout_actor_refuses_a_policy_whose_actions_leave_the_environments_box():
    from drlcli.errors import PolicyActorContractError

    # Its own bounds are [-5, 5], InvertedPendulum's [-3, 3]; its mean sits at 4.
    with pytest.raises(PolicyActorContractError, match="outside the environment's action_high 3"):
        MuJoCoActor(RolloutActorContext(0, ENV, shifted_spec(4.0, 5.0), PARAMS, gamma=0.99))


def test_a_rollout_actor_without_reward_scaling_carries_no_discounted_returns():
    params = dataclasses.replace(PARAMS, normalize_rewards=False)
    actor = MuJoCoActor(RolloutActorContext(0, ENV, SPEC, params, gamma=0.99))
    try:
        state = actor.state_dict()
        assert state["discounted_return"] is None and state["actor_id"] == 0
        assert actor.load_state_dict(state)["actor_id"] == 0
    finally:
        actor.close()


def one_rollout(env, params, steps, obs_rms=None):
    """``(trajectory, stats, the reward scaler)`` of one ``steps``-step sample of a fresh
    rollout actor with a fresh learner's networks."""
    actor = MuJoCoActor(RolloutActorContext(0, env, SPEC, params, gamma=0.99))
    try:
        network = Learner(SPEC, 4, 1, params, seed=0).network_state()
        return (*actor.sample(network, steps, 0.99, 0.95, obs_rms), actor.reward_scaler)
    finally:
        actor.close()


def test_a_rollout_gives_float32_columns_and_every_episode_it_finished():
    env = dataclasses.replace(ENV, max_episode_steps=5)  # every env ends an episode often
    trajectory, stats, reward_scaler = one_rollout(env, PARAMS, 40)
    assert {key: value.dtype for key, value in trajectory.items()} == dict.fromkeys(
        ("obs", "act", "logp", "value", "adv", "ret"), np.float32
    )
    assert set(stats) == {
        "actor_id",
        "process_id",
        "episodes",
        "episode_return_sum",
        "episode_returns",
        "episode_len_sum",
        "episode_successes",
        "obs_rms_moments",
        "reward_moments",
    }
    assert stats["process_id"] == os.getpid()
    assert stats["episode_successes"] == []  # the task reports no success
    # 40 steps of 2 envs with episodes of at most 5 steps: at least 7 finished per env, each
    # counted once, at whichever step it ended.
    assert stats["episodes"] >= 14 and len(stats["episode_returns"]) == stats["episodes"]
    assert 14 <= stats["episode_len_sum"] <= 80
    assert stats["episode_len_sum"] >= stats["episodes"]
    assert stats["reward_moments"] == reward_scaler.state_dict()
    assert stats["reward_moments"]["count"] == 80


def test_without_observation_statistics_a_rollout_keeps_the_raw_observations():
    params = dataclasses.replace(PARAMS, normalize_observations=False)
    trajectory, stats, _ = one_rollout(ENV, params, 30, SHIFTED_RMS)
    # The statistics given are not applied: the stored observations are the raw ones.
    np.testing.assert_allclose(
        trajectory["obs"].mean(axis=0), stats["obs_rms_moments"]["mean"], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        trajectory["obs"].var(axis=0), stats["obs_rms_moments"]["var"], rtol=1e-4, atol=1e-7
    )


RANGED = EnvConfig(id="tests.range_envs:drltest/Ranged-v0", num_envs=2, seed=1)


def ranged_sample(mean: float, low: float, high: float, **params_changes):
    """One 20-step rollout of ``drltest/Ranged-v0`` (reward ``-|a - centre|``) with ``gamma =
    lambda = 0``, so each step's return is its (scaled, clipped) reward; the policy's mean
    sits at ``mean`` with a tiny std."""
    params = dataclasses.replace(PARAMS, **params_changes)
    env = dataclasses.replace(RANGED, kwargs={"low": [low], "high": [high]})
    spec = gaussian_actor_spec(params, [low], [high])
    actor = MuJoCoActor(RolloutActorContext(0, env, spec, params, gamma=0.0))
    state = Learner(spec, 3, 1, params, seed=0).network_state()
    state["actor"]["mean_network.4.weight"] = torch.zeros(1, 16)
    state["actor"]["mean_network.4.bias"] = torch.tensor([mean])
    state["actor"]["log_std"] = torch.tensor([-6.0])
    try:
        return actor.sample(state, 20, 0.0, 0.0, None)[0]
    finally:
        actor.close()


@pytest.mark.parametrize(("mean", "clipped_to"), [(-10.0, -1.0), (10.0, 2.0)])
def test_the_env_steps_with_actions_clipped_to_its_box_on_either_side(mean, clipped_to):
    trajectory = ranged_sample(mean, -1.0, 2.0, normalize_rewards=False)
    assert np.abs(trajectory["act"] - mean).max() < 0.1  # stored: the raw sample
    # The env saw the clipped action: reward -|clipped - centre|, centre 0.5.
    np.testing.assert_allclose(trajectory["ret"], -abs(clipped_to - 0.5), rtol=1e-3)


def test_scaled_rewards_are_clipped_on_both_sides():
    # Rewards about -1.5 with a spread of a few hundredths: scaled, they are far below -0.5.
    trajectory = ranged_sample(-1.0, -1.0, 2.0, normalize_rewards=True, reward_clip=0.5)
    assert trajectory["ret"].min() == pytest.approx(-0.5)
    assert trajectory["ret"].max() <= 0.5


def test_a_rollout_actor_runs_one_torch_thread_and_asks_a_custom_actor_for_samples():
    threads = torch.get_num_threads()
    try:
        actor = MuJoCoActor(RolloutActorContext(0, ENV, shifted_spec(0.0, 3.0), PARAMS, gamma=0.99))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    flags = []
    module_forward = actor.actor.forward

    def forward(obs, training=True):  # the default is not what the rollout actor asks for
        flags.append(training)
        return module_forward(obs, training=training)

    actor.actor.forward = forward
    try:
        network = Learner(shifted_spec(0.0, 3.0), 4, 1, PARAMS, seed=0).network_state()
        actor.sample(network, 3, 0.99, 0.95, None)
    finally:
        actor.close()
    assert flags == [False, False, False]  # PPO's sample: forward's own stochastic action


def test_rollout_actor_states_hold_their_keys_and_load_discounted_returns_as_float64():
    actor = MuJoCoActor(RolloutActorContext(0, ENV, SPEC, PARAMS, gamma=0.99))
    try:
        warm = actor.warm_up_observations(4)
        assert set(warm) == {"actor_id", "process_id", "obs_rms_moments"}
        assert warm["process_id"] == os.getpid() and warm["actor_id"] == 0
        state = actor.state_dict()
        keys = {"actor_id", "envs", "torch_rng", "reward_scaler", "discounted_return", "recurrent"}
        assert set(state) == keys | {"process_id"}  # the driver's, not stored
        assert state.pop("process_id") == os.getpid()
        assert state["reward_scaler"] is None  # no step taken yet
        assert state["recurrent"] is None  # an MLP policy carries no state between steps
        state["discounted_return"] = np.array([0.1, 0.2], np.float32)
        moments = {"mean": np.array([0.5]), "var": np.array([4.0]), "count": 3.0, "abs_max": 9.0}
        state["reward_scaler"] = moments
        assert actor.load_state_dict(state) == {"actor_id": 0, "process_id": os.getpid()}
        loaded = actor.reward_scaler.discounted_return
        assert loaded.dtype == np.float64
        np.testing.assert_array_equal(loaded, np.array([0.1, 0.2], np.float32).astype(np.float64))
        # The rollout actor's own state carries its reward statistics: they load with it.
        assert actor.reward_scaler.state_dict() == {**moments, "count": 3.0}
        assert actor.reward_scaler.divisor() == pytest.approx(np.sqrt(4.0 + 1e-8))
        assert actor.state_dict()["reward_scaler"]["abs_max"] == 9.0
    finally:
        actor.close()
    unscaled = MuJoCoActor(
        RolloutActorContext(
            0, ENV, SPEC, dataclasses.replace(PARAMS, normalize_rewards=False), 0.99
        )
    )
    try:  # a state with discounted returns loads into a rollout actor without reward scaling
        assert unscaled.load_state_dict(state)["actor_id"] == 0
        assert unscaled.reward_scaler is None
    finally:
        unscaled.close()


def test_advantages_of_a_tiny_spread_are_standardised_by_std_plus_epsilon():
    from drlcli.algos.ppo.maths import standardize_advantages

    # std (unbiased) = sqrt(2) * 1e-8: (A - mean) / (std + 1e-8) = +-1 / (sqrt(2) + 1).
    standardised = standardize_advantages(torch.tensor([0.0, 2e-8], dtype=torch.float64))
    torch.testing.assert_close(
        standardised, torch.tensor([-1.0, 1.0], dtype=torch.float64) / (2**0.5 + 1)
    )


def test_the_learner_defaults_to_seed_0_the_closed_form_and_cleanrls_fused_adam():
    params = dataclasses.replace(PARAMS, learning_rate=1.234e-4)
    default = Learner(SPEC, 4, 1, params)
    seeded = Learner(SPEC, 4, 1, params, seed=0)
    for mine, theirs in zip(default.actor.parameters(), seeded.actor.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    assert default.closed_form is not None
    group = default.optimizer.param_groups[0]
    assert (group["lr"], group["eps"], group["fused"]) == (1.234e-4, 1e-5, True)


def test_a_learner_refuses_an_optimiser_state_of_another_layout_in_one_sentence():
    from drlcli.errors import CheckpointError

    learner = Learner(SPEC, 4, 1, PARAMS, seed=0)
    state = learner.state_dict()
    state["optimizer"] = {"state": {}, "param_groups": [{"params": [0, 1]}, {"params": [2]}]}
    with pytest.raises(CheckpointError) as error:
        learner.load_state_dict(state)
    message = str(error.value)
    assert message.startswith("the checkpoint's optimiser state does not fit this learner (")
    assert message.endswith(
        "); it was written by another drl version or network layout: start a new run instead"
    )

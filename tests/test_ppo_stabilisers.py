"""PPO's stabilisers (issue 59), each against a hand computation: the adaptive-KL learning
rate (rsl_rl's rule), Robust Policy Optimization's mean perturbation, the policy's last-layer
scale; their refusals and their exact resume."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
import torch

from drlcli.actors.gaussian import policy_output_layer
from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.ppo.algorithm import check_actor, gaussian_actor_spec
from drlcli.algos.ppo.learner import Learner
from drlcli.algos.ppo.maths import (
    adapted_learning_rate,
    approx_kl,
    compute_gae,
    rpo_shifted_actions,
)
from drlcli.algos.ppo.networks import ReturnStatistics, build_value_network
from drlcli.algos.ppo.params import PPOParams, RecurrentParams
from drlcli.algos.ppo.round_steps import STEP_COLUMNS, RoundSteps, rollout_shape
from drlcli.algos.registry import get_algorithm
from drlcli.config import config_from_dict
from drlcli.errors import ConfigError, PolicyActorContractError
from drlcli.runtime.preflight import resume_ignored_changes

OBS_DIM, ACTION_DIM, ROWS = 5, 2, 64
PARAMS = PPOParams(num_epochs=2, num_minibatches=4, hidden_sizes=(16, 16))


def _learner(params: PPOParams, closed_form: bool = True, seed: int = 3) -> Learner:
    spec = gaussian_actor_spec(params, [-1.0] * ACTION_DIM, [1.0] * ACTION_DIM)
    return Learner(spec, OBS_DIM, ACTION_DIM, params, seed=seed, closed_form=closed_form)


def _round(seed: int, logp_offset: float = 0.0) -> dict[str, np.ndarray]:
    """A round's trajectory; ``logp_offset`` moves the stored log-probs from the policy's."""
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((ROWS, OBS_DIM)).astype(np.float32),
        "act": (rng.standard_normal((ROWS, ACTION_DIM)) * 0.5).astype(np.float32),
        "logp": np.full(ROWS, -1.9 + logp_offset, dtype=np.float32),
        "value": rng.standard_normal(ROWS).astype(np.float32),
        "adv": rng.standard_normal(ROWS).astype(np.float32),
        "ret": rng.standard_normal(ROWS).astype(np.float32),
    }


def _through_bytes(state: dict) -> dict:
    """``state`` saved and loaded again, as a checkpoint holds it (no tensor shared)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _train(learner: Learner, seed: int, fraction_done: float = 0.0):
    learner.add(_round(seed))
    return learner.train_step(fraction_done)


# --- adaptive KL ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("learning_rate", "kl", "expected"),
    [
        (3e-4, 0.021, 3e-4 / 1.5),  # above 2 * desired_kl: smaller
        (3e-4, 0.0049, 3e-4 * 1.5),  # under desired_kl / 2: larger
        (3e-4, 0.02, 3e-4),  # on the band's edges: unchanged
        (3e-4, 0.005, 3e-4),
        (1.2e-5, 1.0, 1e-5),  # the bounds hold
        (9e-3, 0.0, 1e-2),
        (3e-4, math.nan, 3e-4),  # a NaN KL leaves it (the round's check names the NaN)
    ],
)
def test_the_adaptive_kl_step_is_rsl_rls_rule(learning_rate, kl, expected):
    assert adapted_learning_rate(learning_rate, kl, desired_kl=0.01) == pytest.approx(expected)


def test_adaptive_kl_replays_by_hand_minibatch_by_minibatch():
    """The learning rate after each minibatch is the hand-applied rule on the KL that
    minibatch measured before its step; the round reports where it ended."""
    params = dataclasses.replace(
        PARAMS, learning_rate_schedule="adaptive_kl", desired_kl=0.002, learning_rate=3e-3
    )
    learner = _learner(params)
    seen: list[tuple[float, float]] = []  # (kl, learning rate the step then used)
    compute = learner.minibatch_gradients

    def recording(**minibatch):
        stats = compute(**minibatch)
        seen.append((approx_kl(stats["logratio"]), None))
        return stats

    step = learner.flat.adam_step

    def recording_step(optimizer):
        seen[-1] = (seen[-1][0], optimizer.param_groups[0]["lr"])
        step(optimizer)

    learner.minibatch_gradients = recording
    learner.flat.adam_step = recording_step
    _, metrics = _train(learner, seed=1, fraction_done=0.5)  # the fraction is not read
    expected = params.learning_rate
    for kl, used in seen:
        expected = adapted_learning_rate(expected, kl, params.desired_kl)
        assert used == expected
    assert len(seen) == params.num_epochs * params.num_minibatches
    assert len({used for _, used in seen}) > 1  # the rule acted
    assert metrics["learning_rate"] == expected == learner.optimizer.param_groups[0]["lr"]


def test_the_anneal_schedule_is_unchanged_by_desired_kl():
    learner = _learner(dataclasses.replace(PARAMS, desired_kl=1e-6))
    _, metrics = _train(learner, seed=1, fraction_done=0.25)
    assert metrics["learning_rate"] == pytest.approx(PARAMS.learning_rate * 0.75)


def test_adaptive_kl_resumes_from_the_step_size_it_reached():
    """The step size lives in the optimiser's checkpointed state: a learner restored from a
    state_dict trains the next round exactly as the one never stopped."""
    params = dataclasses.replace(PARAMS, learning_rate_schedule="adaptive_kl", desired_kl=1e-3)
    whole = _learner(params)
    _train(whole, seed=1)
    saved = _through_bytes(whole.state_dict())
    reached = whole.optimizer.param_groups[0]["lr"]
    assert reached != params.learning_rate
    resumed = _learner(params, seed=99)
    resumed.load_state_dict(saved)
    assert resumed.optimizer.param_groups[0]["lr"] == reached
    (state, metrics), (resumed_state, resumed_metrics) = _train(whole, 2), _train(resumed, 2)
    assert metrics == resumed_metrics
    for part in ("actor", "value"):
        for name, tensor in state[part].items():
            assert torch.equal(tensor, resumed_state[part][name]), name


def test_a_resume_warns_that_an_edited_learning_rate_is_not_read_under_adaptive_kl():
    """A resume under adaptive_kl goes on from the reached step size: an edited learning_rate
    gets one warning line that names both values; an unchanged one, or the anneal schedule
    (which reads it), gets none."""

    def config(**algo_params):
        return config_from_dict(
            {"env": {"id": "InvertedPendulum-v5"}, "algo": "ppo", "algo_params": algo_params}
        )

    ppo = get_algorithm("ppo")
    adaptive = {"learning_rate_schedule": "adaptive_kl", "learning_rate": 3e-4}
    stored = config(**adaptive).to_dict()
    edited = config(**{**adaptive, "learning_rate": 1e-3})
    (line,) = resume_ignored_changes(ppo, edited, stored)
    assert line.startswith("warning: algo_params.learning_rate 0.001 is not read on resume")
    assert "had 0.0003" in line
    assert resume_ignored_changes(ppo, config(**adaptive), stored) == []
    annealed = config(learning_rate=1e-3)
    assert resume_ignored_changes(ppo, annealed, config(learning_rate=3e-4).to_dict()) == []


# --- Robust Policy Optimization ------------------------------------------------------------


def test_rpo_is_the_log_prob_of_the_shifted_mean():
    """``log pi(a | mu + z) = log pi(a - z | mu)`` for the built-in actors, the recurrent one
    included: what the learner computes with the stored actions shifted back."""
    torch.manual_seed(0)
    obs = torch.randn(7, OBS_DIM)
    actions = torch.randn(7, ACTION_DIM)
    generator = torch.Generator().manual_seed(4)
    shifted = rpo_shifted_actions(actions, 0.5, generator)
    shift = actions - shifted  # z
    assert shift.abs().max() <= 0.5 and shift.abs().min() > 0
    assert shift.std() > 0.1  # drawn, not constant
    actor = _learner(PARAMS).actor
    with torch.no_grad():
        mean, std = actor.get_mean_and_std(obs)
        expected = torch.distributions.Normal(mean + shift, std).log_prob(actions).sum(-1)
        got, entropy = actor.log_prob_and_entropy(obs, shifted)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(entropy, torch.distributions.Normal(mean, std).entropy().sum(-1))


def test_rpo_changes_the_update_draws_anew_each_epoch_and_matches_autograd():
    params = dataclasses.replace(PARAMS, rpo_alpha=0.5)
    plain_state, _ = _train(_learner(PARAMS), seed=1)
    closed, autograd = _learner(params, closed_form=True), _learner(params, closed_form=False)
    assert closed.closed_form is not None and autograd.closed_form is None
    (state, metrics), (reference, reference_metrics) = _train(closed, 1), _train(autograd, 1)
    for part in ("actor", "value"):
        for name, tensor in state[part].items():
            torch.testing.assert_close(tensor, reference[part][name], rtol=1e-4, atol=1e-5)
    for name, value in metrics.items():
        assert value == pytest.approx(reference_metrics[name], rel=1e-4, abs=1e-6), name
    mean_weight = "mean_network.4.weight"
    assert not torch.allclose(state["actor"][mean_weight], plain_state["actor"][mean_weight])
    # Each epoch's noise is new: two epochs of one round do not see the same shift.
    generator = torch.Generator().manual_seed(0)
    actions = torch.zeros(ROWS, ACTION_DIM)
    first, second = (rpo_shifted_actions(actions, 0.5, generator) for _ in range(2))
    assert not torch.equal(first, second)


def test_rpo_reaches_a_recurrent_policys_chunks():
    """The recurrent path reads the same shifted actions ``[C, L, A]``: a round trains and
    differs from the round without RPO."""
    recurrent = RecurrentParams(cell="gru", size=8, sequence_length=4)
    states = []
    for rpo_alpha in (None, 0.5):
        params = dataclasses.replace(PARAMS, recurrent=recurrent, rpo_alpha=rpo_alpha)
        spec = gaussian_actor_spec(params, [-1.0] * ACTION_DIM, [1.0] * ACTION_DIM)
        learner = Learner(spec, OBS_DIM, ACTION_DIM, params, seed=3)
        rng = np.random.default_rng(0)
        steps = 16
        trajectory = _round(1)
        trajectory = {k: v[:steps] for k, v in trajectory.items()}
        trajectory["episode_start"] = np.zeros((steps, 1), dtype=bool)  # [T, envs]
        trajectory["episode_start"][[0, 9]] = True
        for name in ("policy_state", "value_state"):  # a GRU's [layers, size] per step
            trajectory[name] = rng.standard_normal((steps, 1, 8)).astype(np.float32)
        learner.add(trajectory)
        states.append(learner.train_step(0.0)[0])
    weight = "mean_network.2.weight"
    assert not torch.equal(states[0]["actor"][weight], states[1]["actor"][weight])


# --- the policy's last layer ---------------------------------------------------------------


@pytest.mark.parametrize("recurrent", [None, RecurrentParams(cell="lstm", size=8)])
def test_the_last_layer_scale_multiplies_the_initial_output_weights(recurrent):
    base = dataclasses.replace(PARAMS, recurrent=recurrent)
    plain = _learner(base).actor
    scaled = _learner(dataclasses.replace(base, policy_last_layer_scale=0.01)).actor
    plain_layer, scaled_layer = policy_output_layer(plain), policy_output_layer(scaled)
    assert plain_layer is not None and scaled_layer is not None
    torch.testing.assert_close(scaled_layer.weight, plain_layer.weight * 0.01)
    for (name, tensor), (_, reference) in zip(
        scaled.state_dict().items(), plain.state_dict().items(), strict=True
    ):
        if not name.endswith(f"{len(plain.mean_network) - 1}.weight") or "mean" not in name:
            assert torch.equal(tensor, reference), name  # nothing else moved


# --- refusals ------------------------------------------------------------------------------


def _custom(builder: str, **kwargs):
    spec = ActorSpec(builder, {"action_low": [-1.0], "action_high": [1.0], **kwargs})
    return build_policy_actor(spec, 4, 1)


def test_an_actor_without_an_mlp_mean_refuses_the_last_layer_scale_in_one_line():
    actor = _custom("tests.custom_actors:build_shifted_gaussian", shift=0.1)
    params = dataclasses.replace(PARAMS, policy_last_layer_scale=0.01)
    with pytest.raises(PolicyActorContractError) as refused:
        check_actor(actor, params, 4, 1)
    assert "policy actor ShiftedGaussianActor has none" in str(refused.value)
    assert "\n" not in str(refused.value)
    check_actor(actor, PARAMS, 4, 1)  # without the setting it is a valid PPO actor


def test_an_actor_whose_log_prob_is_of_a_transformed_action_refuses_rpo(monkeypatch):
    actor = _custom("tests.custom_actors:build_shifted_gaussian", shift=0.1)
    monkeypatch.setattr(actor, "action_transform_id", "tanh_affine")
    with pytest.raises(PolicyActorContractError, match="'tanh_affine'-transformed action"):
        check_actor(actor, dataclasses.replace(PARAMS, rpo_alpha=0.5), 4, 1)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"rpo_alpha": 0}, "algo_params.rpo_alpha"),
        ({"rpo_alpha": -0.5}, "algo_params.rpo_alpha"),
        ({"desired_kl": 0}, "algo_params.desired_kl"),
        ({"learning_rate_schedule": "cosine"}, "algo_params.learning_rate_schedule"),
        ({"policy_last_layer_scale": 0}, "algo_params.policy_last_layer_scale"),
        ({"policy_last_layer_scale": "small"}, "algo_params.policy_last_layer_scale"),
        ({"recompute_advantages_per_epoch": "yes"}, "algo_params.recompute_advantages_per_epoch"),
        # read only under another setting: refused where training would ignore it
        (
            {"desired_kl": 0.02},
            "algo_params.desired_kl: 0.02 is read only with learning_rate_schedule: adaptive_kl; "
            "set that, or remove desired_kl",
        ),
        (
            {"learning_rate_schedule": "adaptive_kl", "anneal_learning_rate": False},
            "algo_params.anneal_learning_rate: False is read only with learning_rate_schedule: "
            "anneal; set that, or remove anneal_learning_rate",
        ),
        (
            {"normalize_observations": False, "observation_warmup_steps": 64},
            "algo_params.observation_warmup_steps: 64 is read only with normalize_observations",
        ),
    ],
)
def test_bad_stabiliser_values_are_one_line(entry, message):
    raw = {"algo": "ppo", "env": {"id": "InvertedPendulum-v5"}, "algo_params": entry}
    with pytest.raises(ConfigError) as refused:
        config_from_dict(raw)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "entry",
    [
        {"learning_rate_schedule": "adaptive_kl", "desired_kl": 0.02},
        {"desired_kl": 0.01},  # the default's value: nothing is ignored
        {"normalize_observations": False},
        {"observation_warmup_steps": 64},
    ],
)
def test_a_dependent_setting_is_taken_where_it_is_read(entry):
    raw = {"algo": "ppo", "env": {"id": "InvertedPendulum-v5"}, "algo_params": entry}
    params = config_from_dict(raw).algo_params
    assert all(getattr(params, key) == value for key, value in entry.items())


@pytest.mark.parametrize("recurrent", [None, RecurrentParams(cell="gru", size=8)])
def test_under_rpo_the_kl_that_adaptive_kl_reads_is_of_the_policy_not_of_its_noise(recurrent):
    """Data sampled by the policy itself and a tiny step: the policy barely moves, so every
    minibatch's KL is under desired_kl / 2 and the step size grows each minibatch, although
    RPO's perturbed log-probs are far from the stored ones (their KL would shrink it)."""
    params = dataclasses.replace(
        PARAMS,
        rpo_alpha=0.5,
        learning_rate_schedule="adaptive_kl",
        learning_rate=1e-6,
        recurrent=recurrent,
    )
    learner = _learner(params)
    trajectory = _round(1)
    if recurrent is not None:
        trajectory["episode_start"] = np.zeros((ROWS, 1), dtype=bool)
        trajectory["episode_start"][0] = True
        for name in ("policy_state", "value_state"):
            trajectory[name] = np.zeros((ROWS, 1, 8), dtype=np.float32)
    with torch.no_grad():  # the stored log-probs are the policy's own
        obs, actions = torch.from_numpy(trajectory["obs"]), torch.from_numpy(trajectory["act"])
        if recurrent is None:
            logp, _ = learner.actor.log_prob_and_entropy(obs, actions)
        else:  # one environment's sequence from a zero state
            logp, _ = learner.actor.sequence_log_prob_and_entropy(
                obs[:, None], actions[:, None], torch.zeros(1, 1, 8)
            )
    trajectory["logp"] = logp.reshape(ROWS).numpy()
    learner.add(trajectory)
    _, metrics = learner.train_step(0.0)
    # Minibatches per epoch: 4 of 64 samples, or of 2 chunks (32 steps each) 2 of one chunk.
    steps = params.num_epochs * (params.num_minibatches if recurrent is None else 2)
    assert metrics["learning_rate"] == pytest.approx(1e-6 * 1.5**steps)


# --- value-target normalisation ------------------------------------------------------------


def test_return_statistics_merge_rounds_as_numpy_over_all_of_them():
    statistics = ReturnStatistics()
    rng = np.random.default_rng(0)
    rounds = [rng.normal(300.0, 40.0, size) for size in (50, 7, 130)]
    for returns in rounds:
        statistics.update(torch.from_numpy(returns).float())
    every = np.concatenate([r.astype(np.float32).astype(np.float64) for r in rounds])
    assert float(statistics.count) == len(every)
    assert float(statistics.mean) == pytest.approx(every.mean(), rel=1e-12)
    assert float(statistics.var) == pytest.approx(every.var(), rel=1e-10)
    values = torch.tensor([250.0, 300.0, 410.0])
    normalized = statistics.normalize(values)
    std = math.sqrt(every.var() + 1e-8)
    expected = (values.double() - every.mean()) / std
    torch.testing.assert_close(normalized, expected.float())
    np.testing.assert_allclose(statistics.real(normalized.numpy()), values.numpy(), rtol=1e-6)
    statistics.update(torch.zeros(0))  # a round without real steps changes nothing
    assert float(statistics.count) == len(every)


def test_normalize_value_trains_on_standardised_targets_in_closed_form_and_autograd():
    """Returns of scale 1000: the round's statistics are numpy's, the value network learns the
    standardised targets (closed form equals autograd), and its gradients differ from the
    plain network's."""
    params = dataclasses.replace(PARAMS, normalize_value=True)
    trajectory = _round(1)
    trajectory["ret"] = (1000.0 + 50.0 * trajectory["ret"]).astype(np.float32)
    trajectory["value"] = (1000.0 + 50.0 * trajectory["value"]).astype(np.float32)
    results = []
    for closed_form in (True, False):
        learner = _learner(params, closed_form=closed_form)
        learner.add({k: v.copy() for k, v in trajectory.items()})
        results.append((learner, *learner.train_step(0.0)))
    (learner, state, metrics), (_, reference, reference_metrics) = results
    statistics = learner.value_network.return_statistics
    returns = trajectory["ret"].astype(np.float64)
    assert float(statistics.mean) == pytest.approx(returns.mean())
    assert float(statistics.var) == pytest.approx(returns.var(), rel=1e-6)
    for name, tensor in state["value"].items():
        torch.testing.assert_close(tensor, reference["value"][name], rtol=1e-4, atol=1e-5)
    for name, value in metrics.items():
        assert value == pytest.approx(reference_metrics[name], rel=1e-4, abs=1e-6), name
    # Standardised targets: the value loss is of order 1, not of 1000^2.
    assert metrics["Loss/value"] < 10.0
    plain = _learner(PARAMS)
    plain.add({k: v.copy() for k, v in trajectory.items()})
    assert plain.train_step(0.0)[1]["Loss/value"] > 1e5


@pytest.mark.parametrize("recurrent", [None, RecurrentParams(cell="gru", size=8)])
def test_the_rollout_uses_de_normalised_values(recurrent):
    """The same weights with return statistics (mean 50, var 4): every value the rollout
    stores, and so GAE, is the plain prediction times 2 plus 50 (a recurrent critic's too)."""
    from drlcli.config import EnvConfig
    from drlcli.runtime.mujoco_actor import MuJoCoActor
    from drlcli.runtime.run_context import RolloutActorContext

    env = EnvConfig(id="InvertedPendulum-v5", num_envs=2, seed=5)
    trajectories = []
    for normalize_value in (False, True):
        params = dataclasses.replace(PARAMS, normalize_value=normalize_value, recurrent=recurrent)
        spec = gaussian_actor_spec(params, [-3.0], [3.0])
        learner = Learner(spec, obs_dim=4, action_dim=1, params=params, seed=0)
        state = learner.network_state()
        if normalize_value:
            state["value"]["return_statistics.mean"] = torch.tensor(50.0, dtype=torch.float64)
            state["value"]["return_statistics.var"] = torch.tensor(4.0, dtype=torch.float64)
        torch.manual_seed(0)
        actor = MuJoCoActor(RolloutActorContext(0, env, spec, params, gamma=0.99))
        trajectories.append(actor.sample(state, 30, 0.99, 0.95, None)[0])
        actor.close()
    plain, normalized = trajectories
    np.testing.assert_array_equal(plain["obs"], normalized["obs"])
    np.testing.assert_allclose(normalized["value"], plain["value"] * 2.0 + 50.0, rtol=1e-5)


def test_normalize_value_resumes_exactly_and_refuses_the_other_setting():
    from drlcli.algos.ppo.algorithm import value_network_problem

    params = dataclasses.replace(PARAMS, normalize_value=True)
    whole = _learner(params)
    _train(whole, seed=1)
    saved = _through_bytes(whole.state_dict())
    resumed = _learner(params, seed=99)
    resumed.load_state_dict(saved)
    (state, metrics), (resumed_state, resumed_metrics) = _train(whole, 2), _train(resumed, 2)
    assert metrics == resumed_metrics
    for part in ("actor", "value"):
        for name, tensor in state[part].items():
            assert torch.equal(tensor, resumed_state[part][name]), name
    assert float(state["value"]["return_statistics.count"]) == 2 * ROWS
    assert value_network_problem(params, saved, OBS_DIM, ACTION_DIM) is None
    problem = value_network_problem(PARAMS, saved, OBS_DIM, ACTION_DIM)
    assert problem == (
        "its value network was trained with normalize_value, the config says false: resume "
        "with the setting it was trained with"
    )


# --- advantages recomputed per epoch -------------------------------------------------------


def test_round_steps_recompute_each_rollouts_gae_by_hand():
    """Two rollouts in one round: [T=2, 1 env] then [T=1, 2 envs]; gamma 0.9, lambda 0.8.
    The first's A_1 = 2 + 0.9 * 1.0 - 0.25 = 2.65 and A_0 = (1 + 0.9 * 0.25 - 0.5) + 0.72 *
    2.65 = 2.633; the second's steps end their rollout (A = delta), the terminated one
    without its bootstrap: 3 - 1 = 2 and 4 + 0.9 * 2 - 1 = 4.8."""
    steps = RoundSteps.of(
        {
            "reward": np.array([1.0, 2.0, 3.0, 4.0]),
            "terminated": np.array([False, False, True, False]),
            "truncated": np.zeros(4, dtype=bool),
            "next_obs": np.zeros((4, 1), dtype=np.float32),
            "rollout_step": np.array([0, 1, 0, 0], dtype=np.int32),
        },
        lengths=[2, 2],
        device=torch.device("cpu"),
    )
    assert steps.shapes == ((2, 1), (1, 2))
    values = np.array([0.5, 0.25, 1.0, 1.0])
    next_values = np.array([0.25, 1.0, 7.0, 2.0])
    advantages, returns = steps.advantages(values, next_values, gamma=0.9, gae_lambda=0.8)
    np.testing.assert_allclose(advantages, [2.633, 2.65, 2.0, 4.8])
    np.testing.assert_allclose(returns, advantages + values)


def test_a_rollout_that_is_not_time_major_is_refused():
    assert rollout_shape(np.array([0, 0, 0, 1, 1, 1])) == (2, 3)
    for steps in ([1, 0], [0, 0, 1], [0, 1, 0, 1]):
        with pytest.raises(ValueError, match="rollout_step"):
            rollout_shape(np.array(steps))


def _rollouts_with_steps(seed: int, length: int = 8, num_envs: int = 4) -> dict:
    """``_round``'s columns for two rollouts of ``[length, num_envs]`` with what GAE reads
    (``round_steps.STEP_COLUMNS``): an episode truncated and one terminated in each."""
    trajectory = _round(seed)
    rng = np.random.default_rng(seed + 100)
    rows = len(trajectory["obs"])
    terminated, truncated = np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool)
    terminated[[5, 37]], truncated[[10, 42]] = True, True
    step = np.repeat(np.arange(length, dtype=np.int32), num_envs)
    return trajectory | {
        "reward": rng.standard_normal(rows),
        "terminated": terminated,
        "truncated": truncated,
        "next_obs": rng.standard_normal((rows, OBS_DIM)).astype(np.float32),
        "rollout_step": np.concatenate([step, step]),
    }


@pytest.mark.parametrize("closed_form", [True, False])
@pytest.mark.parametrize("normalize_value", [False, True])
def test_each_epoch_after_the_first_reads_advantages_of_the_value_network_it_starts_with(
    closed_form, normalize_value
):
    """One minibatch per epoch, three epochs: the first reads the sampled advantages; each
    later one reads GAE recomputed by hand from the value network as it stands when that
    epoch starts (values de-normalised under normalize_value, targets normalised again)."""
    params = dataclasses.replace(
        PARAMS,
        num_epochs=3,
        num_minibatches=1,
        normalize_advantages=False,
        normalize_value=normalize_value,
        recompute_advantages_per_epoch=True,
    )
    spec = gaussian_actor_spec(params, [-1.0] * ACTION_DIM, [1.0] * ACTION_DIM)
    learner = Learner(
        spec, OBS_DIM, ACTION_DIM, params, seed=3, closed_form=closed_form,
        gamma=0.9, gae_lambda=0.8,
    )  # fmt: skip
    trajectory = _rollouts_with_steps(1)
    row_of = {row.tobytes(): index for index, row in enumerate(trajectory["obs"])}
    seen = []
    gradients = learner.minibatch_gradients

    def spy(**minibatch):
        order = [row_of[np.asarray(row).tobytes()] for row in minibatch["obs"]]
        inverse = np.argsort(order)
        network = {k: v.clone() for k, v in learner.value_network.state_dict().items()}
        seen.append(
            (network, *(np.asarray(minibatch[k])[inverse] for k in ("advantages", "returns")))
        )
        return gradients(**minibatch)

    learner.minibatch_gradients = spy
    for half in (slice(0, 32), slice(32, 64)):  # two rollout actors' trajectories
        learner.add({k: v[half].copy() for k, v in trajectory.items()})
    learner.train_step(0.0)
    assert len(seen) == 3
    np.testing.assert_array_equal(seen[0][1], trajectory["adv"])
    check = build_value_network(params, OBS_DIM)
    for network, advantages, returns in seen[1:]:
        check.load_state_dict(network)
        with torch.no_grad():
            values, next_values = (
                check(torch.from_numpy(trajectory[k])).double().numpy() for k in ("obs", "next_obs")
            )
        statistics = check.return_statistics
        if statistics is not None:
            values, next_values = (statistics.real(v) for v in (values, next_values))
        expected, expected_returns = [], []
        for half in (slice(0, 32), slice(32, 64)):
            grids = [
                column[half].reshape(8, 4)
                for column in (
                    trajectory["reward"], values, next_values,
                    trajectory["terminated"], trajectory["truncated"],
                )
            ]  # fmt: skip
            advantage, target = compute_gae(*grids, 0.9, 0.8)
            expected.append(advantage.reshape(-1))
            expected_returns.append(target.reshape(-1))
        expected_returns = np.concatenate(expected_returns)
        if statistics is not None:
            expected_returns = (expected_returns - float(statistics.mean)) / float(statistics.std())
        np.testing.assert_allclose(advantages, np.concatenate(expected), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(returns, expected_returns, rtol=1e-5, atol=1e-5)
        assert not np.allclose(advantages, trajectory["adv"], atol=1e-2)


def test_without_the_setting_every_epoch_reads_the_sampled_advantages():
    params = dataclasses.replace(PARAMS, num_epochs=3, num_minibatches=1)
    learner = _learner(params)
    seen = []
    gradients = learner.minibatch_gradients

    def spy(**minibatch):
        seen.append(np.sort(np.asarray(minibatch["advantages"])))
        return gradients(**minibatch)

    learner.minibatch_gradients = spy
    _train(learner, seed=1)
    assert len(seen) == 3 and all(np.array_equal(seen[0], later) for later in seen[1:])


def test_the_sampler_stores_what_gae_reads_and_the_learner_recomputes_its_advantages():
    """A rollout with truncations (time limit 7): ``next_obs`` is the next step's observation
    where the episode goes on and the final one where it was truncated; GAE recomputed from
    the sampler's own value network gives the sampler's advantages."""
    from drlcli.config import EnvConfig
    from drlcli.runtime.mujoco_actor import MuJoCoActor
    from drlcli.runtime.run_context import RolloutActorContext

    params = dataclasses.replace(PARAMS, recompute_advantages_per_epoch=True)
    env = EnvConfig(id="InvertedPendulum-v5", num_envs=3, seed=5, max_episode_steps=7)
    spec = gaussian_actor_spec(params, [-3.0], [3.0])
    learner = Learner(spec, 4, 1, params, seed=0, gamma=0.99, gae_lambda=0.95)
    torch.manual_seed(0)
    actor = MuJoCoActor(RolloutActorContext(0, env, spec, params, gamma=0.99))
    trajectory, _ = actor.sample(learner.network_state(), 20, 0.99, 0.95, None)
    actor.close()
    assert set(STEP_COLUMNS) <= set(trajectory)
    truncated = trajectory["truncated"].reshape(20, 3)
    assert truncated.sum() >= 3
    following = trajectory["obs"].reshape(20, 3, 4)[1:]
    next_obs = trajectory["next_obs"].reshape(20, 3, 4)[:-1]
    goes_on = ~truncated[:-1]
    np.testing.assert_array_equal(next_obs[goes_on], following[goes_on])
    assert not np.allclose(next_obs[~goes_on], following[~goes_on])
    steps = RoundSteps.of(trajectory, [len(trajectory["obs"])], torch.device("cpu"))
    with torch.no_grad():
        values, next_values = (
            learner.value_network(torch.from_numpy(trajectory[k])).double().numpy()
            for k in ("obs", "next_obs")
        )
    advantages, _ = steps.advantages(values, next_values, 0.99, 0.95)
    np.testing.assert_allclose(advantages, trajectory["adv"], rtol=1e-4, atol=1e-5)


def test_recompute_with_a_recurrent_policy_is_refused_in_one_line():
    raw = {
        "algo": "ppo",
        "env": {"id": "InvertedPendulum-v5"},
        "algo_params": {"recompute_advantages_per_epoch": True, "recurrent": {"cell": "gru"}},
    }
    with pytest.raises(ConfigError) as refused:
        config_from_dict(raw)
    message = str(refused.value)
    assert message.startswith("algo_params.recompute_advantages_per_epoch: ")
    assert "recurrent" in message and "\n" not in message

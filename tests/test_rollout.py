from __future__ import annotations

import numpy as np
import pytest
import torch

from drlcli.algos.ppo.maths import compute_gae
from drlcli.rollout import prepare_action


def test_out_of_bounds_sample_keeps_its_log_prob_and_only_env_action_is_clipped():
    low, high = np.array([-1.0, -0.5]), np.array([1.0, 0.5])
    mean, std = torch.tensor([0.9, 0.0]), torch.tensor([0.5, 0.5])
    sampled = np.array([[2.7, -0.9], [0.2, 0.1]])  # first row is out of bounds on both dims
    distribution = torch.distributions.Normal(mean, std)
    logp_old = distribution.log_prob(torch.as_tensor(sampled, dtype=torch.float32)).sum(-1)

    policy_action, env_action = prepare_action(sampled, low, high)

    np.testing.assert_array_equal(policy_action, sampled)
    np.testing.assert_array_equal(env_action, [[1.0, -0.5], [0.2, 0.1]])
    # The learner recomputes the log-prob from the *stored* action: the first ratio is exactly 1.
    logp_new = distribution.log_prob(torch.as_tensor(policy_action, dtype=torch.float32)).sum(-1)
    assert torch.equal(torch.exp(logp_new - logp_old), torch.ones(2))
    # Pairing the clipped action with the old log-prob would break that.
    logp_clipped = distribution.log_prob(torch.as_tensor(env_action, dtype=torch.float32)).sum(-1)
    assert not torch.allclose(logp_clipped, logp_old)


def test_prepare_action_does_not_modify_the_sample():
    sampled = np.array([[5.0]])
    prepare_action(sampled, np.array([-1.0]), np.array([1.0]))
    assert sampled[0, 0] == 5.0


def test_gae_hand_worked_example():
    # One env, five steps: ordinary, terminated, ordinary, truncated, ordinary (rollout end).
    gamma, lam = 0.9, 0.5
    rewards = np.array([1.0, 2.0, 3.0, 4.0, 5.0])[:, None]
    values = np.array([0.5, 1.0, 1.5, 2.0, 2.5])[:, None]
    # next_values: V(s_{t+1}) before any reset. Step 1 terminated (its V(s') is irrelevant),
    # step 3 truncated: 10.0 is V of the final pre-reset observation, not values[4].
    next_values = np.array([1.0, 99.0, 2.0, 10.0, 3.0])[:, None]
    terminated = np.array([0, 1, 0, 0, 0], dtype=bool)[:, None]
    truncated = np.array([0, 0, 0, 1, 0], dtype=bool)[:, None]

    advantages, returns = compute_gae(
        rewards, values, next_values, terminated, truncated, gamma, lam
    )

    delta4 = 5.0 + 0.9 * 3.0 - 2.5  # 5.2, bootstrap from the last next value
    delta3 = 4.0 + 0.9 * 10.0 - 2.0  # 11.0, truncation bootstraps from V(final obs)
    delta2 = 3.0 + 0.9 * 2.0 - 1.5  # 3.3
    delta1 = 2.0 + 0.0 - 1.0  # 1.0, termination: no bootstrap
    delta0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    a4 = delta4
    a3 = delta3  # the episode ended at step 3: nothing flows back from step 4
    a2 = delta2 + 0.45 * a3
    a1 = delta1  # terminated: nothing flows back from step 2
    a0 = delta0 + 0.45 * a1
    expected = np.array([a0, a1, a2, a3, a4])[:, None]
    np.testing.assert_allclose(advantages, expected, rtol=1e-12)
    np.testing.assert_allclose(returns, expected + values, rtol=1e-12)


def test_gae_takes_float_done_flags_and_float32_values():
    """Flags as 0.0/1.0 floats (some vector envs give them so) mean what the booleans do, and
    float32 values give the float64 result of the same numbers."""
    rewards = np.array([[1.0, 0.5], [2.0, 0.5], [3.0, 0.5]])
    values = np.array([[0.5, 0.1], [1.0, 0.2], [1.5, 0.3]], np.float32)
    next_values = np.array([[1.0, 0.2], [9.0, 0.3], [2.0, 0.4]], np.float32)
    terminated = np.array([[0, 0], [1, 0], [0, 0]], dtype=bool)
    truncated = np.array([[0, 1], [0, 0], [0, 0]], dtype=bool)
    expected = compute_gae(
        rewards,
        values.astype(np.float64),
        next_values.astype(np.float64),
        terminated,
        truncated,
        0.9,
        0.5,
    )
    found = compute_gae(
        rewards,
        values,
        next_values,
        terminated.astype(np.float32),
        truncated.astype(np.float64),
        0.9,
        0.5,
    )
    for mine, reference in zip(found, expected, strict=True):
        assert mine.dtype == np.float64
        np.testing.assert_array_equal(mine, reference)


def test_gae_nothing_propagates_across_episode_boundaries():
    rng = np.random.default_rng(0)
    steps, envs = 12, 3
    values = rng.normal(size=(steps, envs))
    next_values = rng.normal(size=(steps, envs))
    terminated = np.zeros((steps, envs), dtype=bool)
    truncated = np.zeros((steps, envs), dtype=bool)
    terminated[4, 0] = True
    truncated[6, 1] = True
    rewards = rng.normal(size=(steps, envs))
    base, _ = compute_gae(rewards, values, next_values, terminated, truncated, 0.99, 0.95)
    # Changing anything after a boundary must leave every advantage up to the boundary unchanged.
    changed = rewards.copy()
    changed[5:, 0] += 100.0
    changed[7:, 1] += 100.0
    after, _ = compute_gae(changed, values, next_values, terminated, truncated, 0.99, 0.95)
    np.testing.assert_array_equal(after[:5, 0], base[:5, 0])
    np.testing.assert_array_equal(after[:7, 1], base[:7, 1])
    # Env 2 has no boundary: its advantages do change all the way back.
    changed[-1, 2] += 1.0
    after, _ = compute_gae(changed, values, next_values, terminated, truncated, 0.99, 0.95)
    assert after[0, 2] != base[0, 2]


def test_gae_with_lambda_one_and_no_boundaries_is_discounted_return_minus_value():
    rewards = np.ones((4, 1))
    values = np.zeros((4, 1))
    next_values = np.zeros((4, 1))
    none = np.zeros((4, 1), dtype=bool)
    advantages, _ = compute_gae(rewards, values, next_values, none, none, 0.5, 1.0)
    np.testing.assert_allclose(advantages[:, 0], [1.875, 1.75, 1.5, 1.0])


@pytest.mark.parametrize("wrong", ["values", "next_values", "terminated", "truncated"])
def test_gae_rejects_mismatched_shapes_naming_the_input(wrong):
    inputs = {"values": np.ones((3, 2)), "next_values": np.ones((3, 2))}
    inputs |= {"terminated": np.zeros((3, 2), bool), "truncated": np.zeros((3, 2), bool)}
    inputs[wrong] = inputs[wrong][:, :1]
    with pytest.raises(ValueError, match=rf"^compute_gae: {wrong} has shape \(3, 1\), rewards"):
        compute_gae(np.ones((3, 2)), **inputs, gamma=0.9, gae_lambda=0.9)


def test_gae_computes_in_float64_whatever_the_input_types():
    """Integer rewards, float32 values and 0/1 flags: the same float64 result as float64 input
    (no rounding to the inputs' types: integer advantages would truncate)."""
    rewards = np.array([[1, 0], [0, 2], [3, 1]])
    values = np.array([[0.25, 0.5], [0.125, 1.0], [0.75, 0.5]], dtype=np.float32)
    next_values = np.array([[0.125, 1.0], [0.75, 0.5], [0.3, 0.2]], dtype=np.float32)
    terminated, truncated = np.array([[0, 0], [1, 0], [0, 0]]), np.array([[0, 0], [0, 0], [0, 1]])
    advantages, returns = compute_gae(
        rewards, values, next_values, terminated, truncated, 0.9, 0.95
    )
    expected, expected_returns = compute_gae(
        rewards.astype(np.float64),
        values.astype(np.float64),
        next_values.astype(np.float64),
        terminated.astype(bool),
        truncated.astype(bool),
        0.9,
        0.95,
    )
    assert advantages.dtype == returns.dtype == np.float64
    np.testing.assert_array_equal(advantages, expected)
    np.testing.assert_array_equal(returns, expected_returns)
    assert advantages[2, 0] == pytest.approx(3 + 0.9 * 0.3 - 0.75)  # not truncated to an integer

"""Pure rollout maths of Method.md: the action pair and generalised advantage estimation.

No torch, no Ray, no I/O: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np


def prepare_action(
    sampled_action: np.ndarray, action_low: np.ndarray, action_high: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Split a raw policy sample into the stored action and the action sent to ``env.step``.

    Args:
        sampled_action: raw Normal sample, shape ``[..., action_dim]``.
        action_low, action_high: the Box bounds, shape ``[action_dim]``.

    Returns:
        ``(policy_action, env_action)``. ``policy_action`` is the unmodified sample: it is stored
        in the trajectory and its log-prob is the PPO ``logp_old``, so the first ratio is exactly
        1. ``env_action`` is clipped to the bounds and is only ever given to ``env.step``.
    """
    policy_action = np.asarray(sampled_action)
    env_action = np.clip(policy_action, action_low, action_high)
    return policy_action, env_action


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation (Schulman et al. 2016), episode-boundary aware.

    All inputs have shape ``[T, num_envs]`` (time first). ``next_values[t]`` is ``V(s_{t+1})``
    where ``s_{t+1}`` is the observation the step returned *before* any reset: on a truncated
    step it is the final observation of the episode, not the first one of the next.

        delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},  done = terminated | truncated

    ``terminated`` removes the bootstrap (the task really ended); ``truncated`` keeps it (a time
    limit is not a terminal state). Both cut the recursion, so no advantage flows from a new
    episode back into the previous one. The last step's ``A_{T}`` is 0.

    Returns:
        ``(advantages, returns)``, float64 ``[T, num_envs]``, with ``returns = advantages + values``
        (the value-function target).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    next_values = np.asarray(next_values, dtype=np.float64)
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool)
    shape = rewards.shape
    for name, array in (
        ("values", values),
        ("next_values", next_values),
        ("terminated", terminated),
        ("truncated", truncated),
    ):
        if array.shape != shape:
            raise ValueError(f"compute_gae: {name} has shape {array.shape}, rewards {shape}")

    bootstrap = 1.0 - terminated
    continues = 1.0 - (terminated | truncated)
    deltas = rewards + gamma * bootstrap * next_values - values
    advantages = np.zeros_like(rewards)
    running = np.zeros(shape[1:], dtype=np.float64)
    for t in reversed(range(shape[0])):
        running = deltas[t] + gamma * gae_lambda * continues[t] * running
        advantages[t] = running
    return advantages, advantages + values

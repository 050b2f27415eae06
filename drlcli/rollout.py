"""The action pair of Method.md's rollout: what is stored and what ``env.step`` receives.

No torch, no Ray, no I/O: arrays in, arrays out. GAE is PPO's maths
(``drlcli/algos/ppo/maths.py``).
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

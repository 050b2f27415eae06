"""A round's steps as GAE reads them, for ``recompute_advantages_per_epoch`` (Tianshou's
``recompute_advantage``): before each epoch after the first, the learner recomputes the values
with its value network as the previous epochs left it, and from them the advantages and value
targets (``maths.compute_gae``, per rollout)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from drlcli.algos.ppo.maths import compute_gae

STEP_COLUMNS = ("reward", "terminated", "truncated", "next_obs", "rollout_step")
"""What a sampler adds to its trajectory under ``recompute_advantages_per_epoch``, each
``[N]`` (``next_obs`` ``[N, O]``) in the trajectory's time-major order: the rewards GAE
read (scaled and clipped), the done flags, the normalised observation each step led to
before any reset (an episode's final one where it was truncated) and the step's index ``t``
in its rollout."""


def rollout_shape(rollout_step: np.ndarray) -> tuple[int, int]:
    """``(T, num_envs)`` of one rollout from its time-major step indices ``[T * num_envs]``
    (``0, 0, ..., 1, 1, ...``).

    Raises:
        ValueError: the indices are not those of a time-major ``[T, num_envs]`` rollout.
    """
    steps = np.asarray(rollout_step)
    num_envs = int(np.count_nonzero(steps == 0))
    if num_envs == 0 or len(steps) % num_envs:
        raise ValueError(f"rollout_step of {len(steps)} rows is not a [T, num_envs] rollout's")
    length = len(steps) // num_envs
    if not np.array_equal(steps, np.repeat(np.arange(length), num_envs)):
        raise ValueError("rollout_step is not time-major (0, 0, ..., 1, 1, ...)")
    return length, num_envs


@dataclass(frozen=True)
class RoundSteps:
    """The round's rollouts, concatenated in the learner's row order.

    Attributes:
        rewards: ``[N]`` float64, as the sampler's GAE read them.
        terminated, truncated: ``[N]`` bool.
        next_obs: ``[N, O]``, the normalised ``s_{t+1}`` before any reset.
        shapes: ``(T, num_envs)`` of each rollout, in row order.
    """

    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: torch.Tensor
    shapes: tuple[tuple[int, int], ...]

    @classmethod
    def of(
        cls, data: dict[str, np.ndarray], lengths: Sequence[int], device: torch.device
    ) -> RoundSteps:
        """From the buffer's concatenated columns (``STEP_COLUMNS``) and the rows of each
        rollout added (``ReplayBuffer.lengths``).

        Raises:
            ValueError: a column is missing, or a rollout is not time-major.
        """
        missing = [name for name in STEP_COLUMNS if name not in data]
        if missing:
            raise ValueError(
                f"recompute_advantages_per_epoch: the trajectories lack {missing}; they were "
                "sampled without the setting"
            )
        bounds = np.cumsum([0, *lengths])
        shapes = tuple(
            rollout_shape(data["rollout_step"][start:end])
            for start, end in zip(bounds[:-1], bounds[1:], strict=True)
        )
        return cls(
            rewards=np.asarray(data["reward"], dtype=np.float64),
            terminated=np.asarray(data["terminated"], dtype=bool),
            truncated=np.asarray(data["truncated"], dtype=bool),
            next_obs=torch.as_tensor(data["next_obs"], device=device),
            shapes=shapes,
        )

    def advantages(
        self, values: np.ndarray, next_values: np.ndarray, gamma: float, gae_lambda: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """``compute_gae`` of each rollout with ``values = V(s_t)`` and ``next_values =
        V(s_{t+1})`` (``[N]``, this object's rows), concatenated: ``(advantages, returns)``,
        ``[N]`` float64."""
        advantages, returns, start = [], [], 0
        for length, num_envs in self.shapes:
            stop = start + length * num_envs
            grids = [
                column[start:stop].reshape(length, num_envs)
                for column in (self.rewards, values, next_values, self.terminated, self.truncated)
            ]
            rollout_advantages, rollout_returns = compute_gae(*grids, gamma, gae_lambda)
            advantages.append(rollout_advantages.reshape(-1))
            returns.append(rollout_returns.reshape(-1))
            start = stop
        return np.concatenate(advantages), np.concatenate(returns)

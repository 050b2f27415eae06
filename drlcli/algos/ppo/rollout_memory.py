"""Where a recurrent policy's memory lives during a rollout (ADR 0018): every environment's
policy and value-core state, carried from step to step and across rounds, zeroed where an
episode starts. Pure numpy, as the rollout steps the cores (``dense_recurrent.py``); its
checkpoint holds torch tensors. The rollout actor holds one and checkpoints it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class RolloutMemory:
    """The recurrent states of ``num_envs`` environments.

    Attributes:
        policy: the policy core's state ``[*, num_envs, size]`` float32 (``RecurrentCore``
            layout).
        value: the value core's.
        episode_starts: ``[num_envs]`` bool: the environment's next step is its episode's
            first (all at the start of a run; where the last step ended one, terminated or
            truncated, as the environments reset in the same step).
    """

    def __init__(self, policy_shape: tuple[int, ...], value_shape: tuple[int, ...]) -> None:
        self.policy = np.zeros(policy_shape, dtype=np.float32)
        self.value = np.zeros(value_shape, dtype=np.float32)
        self.episode_starts = np.ones(policy_shape[-2], dtype=bool)
        # The batch axis first, as a trajectory stores states (np.moveaxis costs 3x a transpose).
        self._policy_stored, self._value_stored = (
            (len(shape) - 2, *range(len(shape) - 2), len(shape) - 1)
            for shape in (policy_shape, value_shape)
        )

    def begin_step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Zero the states of environments whose episode starts now; returns what the step
        reads, as a trajectory stores it: ``(episode_start [n], policy_state [n, *state],
        value_state [n, *state])``, views to copy before the states move on."""
        starts = self.episode_starts
        if starts.any():
            self.policy[..., starts, :] = 0.0
            self.value[..., starts, :] = 0.0
        return (starts, *self._stored())

    def _stored(self) -> tuple[np.ndarray, np.ndarray]:
        """The two states as a trajectory stores them, ``[n, *state]``: views."""
        return self.policy.transpose(self._policy_stored), self.value.transpose(self._value_stored)

    def empty_trajectory(self, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Buffers for ``steps`` of ``begin_step``'s output: ``episode_start [steps, n]`` and
        the policy's and value core's states ``[steps, n, *state]``."""
        policy, value = self._stored()
        return (
            np.empty((steps, *self.episode_starts.shape), dtype=bool),
            np.empty((steps, *policy.shape), dtype=np.float32),
            np.empty((steps, *value.shape), dtype=np.float32),
        )

    def end_step(self, episode_ended: np.ndarray) -> None:
        """After the step: an environment whose episode ended starts its next one."""
        self.episode_starts = np.asarray(episode_ended, dtype=bool).copy()

    def value_state_of_next_step(self) -> np.ndarray:
        """The value core's state the next step will read (zeros where it starts an episode),
        without moving on: the bootstrap value of a rollout's last observation."""
        state = self.value.copy()
        state[..., self.episode_starts, :] = 0.0
        return state

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy_state": torch.from_numpy(self.policy.copy()),
            "value_state": torch.from_numpy(self.value.copy()),
            "episode_starts": self.episode_starts.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()`` output of the same shapes.

        Raises:
            ValueError: another shape (another cell, size, layers or number of envs).
        """
        policy = torch.as_tensor(state["policy_state"], dtype=torch.float32).numpy()
        value = torch.as_tensor(state["value_state"], dtype=torch.float32).numpy()
        starts = np.asarray(state["episode_starts"], dtype=bool)
        wanted = (self.policy.shape, self.value.shape, self.episode_starts.shape)
        stored = (policy.shape, value.shape, starts.shape)
        if stored != wanted:
            raise ValueError(f"recurrent states of shapes {stored}, expected {wanted}")
        self.policy, self.value, self.episode_starts = policy.copy(), value.copy(), starts.copy()

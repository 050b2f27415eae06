"""Where a recurrent policy's memory lives during a rollout (ADR 0018): every environment's
policy and value-core state, carried from step to step and across rounds, zeroed where an
episode starts. Pure torch and numpy: the rollout actor holds one and checkpoints it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from drlcli.actors.recurrent import RecurrentCore
from drlcli.algos.ppo.sequences import stored_state


class RolloutMemory:
    """The recurrent states of ``num_envs`` environments.

    Attributes:
        policy: the policy core's state ``[*, num_envs, size]`` (``RecurrentCore`` layout).
        value: the value core's.
        episode_starts: ``[num_envs]`` bool: the environment's next step is its episode's
            first (all at the start of a run; where the last step ended one, terminated or
            truncated, as the environments reset in the same step).
    """

    def __init__(self, policy_shape: tuple[int, ...], value_shape: tuple[int, ...]) -> None:
        self.policy = torch.zeros(policy_shape)
        self.value = torch.zeros(value_shape)
        self.episode_starts = np.ones(policy_shape[-2], dtype=bool)

    def begin_step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Zero the states of environments whose episode starts now; returns what the step
        reads, as a trajectory stores it: ``(episode_start [n], policy_state [n, *state],
        value_state [n, *state])``."""
        starts = self.episode_starts.copy()
        if starts.any():
            reset = torch.from_numpy(starts)
            self.policy = RecurrentCore.reset(self.policy, reset)
            self.value = RecurrentCore.reset(self.value, reset)
        return starts, stored_state(self.policy).numpy(), stored_state(self.value).numpy()

    def end_step(self, episode_ended: np.ndarray) -> None:
        """After the step: an environment whose episode ended starts its next one."""
        self.episode_starts = np.asarray(episode_ended, dtype=bool).copy()

    def value_state_of_next_step(self) -> torch.Tensor:
        """The value core's state the next step will read (zeros where it starts an episode),
        without moving on: the bootstrap value of a rollout's last observation."""
        return RecurrentCore.reset(self.value, torch.from_numpy(self.episode_starts))

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy_state": self.policy.clone(),
            "value_state": self.value.clone(),
            "episode_starts": self.episode_starts.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()`` output of the same shapes.

        Raises:
            ValueError: another shape (another cell, size, layers or number of envs).
        """
        policy = torch.as_tensor(state["policy_state"], dtype=torch.float32)
        value = torch.as_tensor(state["value_state"], dtype=torch.float32)
        starts = np.asarray(state["episode_starts"], dtype=bool)
        wanted = (tuple(self.policy.shape), tuple(self.value.shape), self.episode_starts.shape)
        stored = (tuple(policy.shape), tuple(value.shape), starts.shape)
        if stored != wanted:
            raise ValueError(f"recurrent states of shapes {stored}, expected {wanted}")
        self.policy, self.value, self.episode_starts = policy.clone(), value.clone(), starts.copy()

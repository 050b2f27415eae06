"""Thin Ray shells around the learner and the rollout actor."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from drlcli.actors.spec import ActorSpec
from drlcli.algos.ppo.learner import Learner
from drlcli.config import PPOParams


class LearnerWorker:
    """One PPO learner in its own process: add a round's trajectories, train, report."""

    def __init__(
        self,
        actor_spec: ActorSpec,
        obs_dim: int,
        action_dim: int,
        params: PPOParams,
        device: str,
        seed: int,
    ) -> None:
        torch.set_num_threads(1)  # 64x64 networks: more threads only add overhead
        self.learner = Learner(actor_spec, obs_dim, action_dim, params, device, seed)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

    def train_round(
        self, learning_rate: float, *trajectories: dict[str, np.ndarray]
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """ReplayBuffer.add for each trajectory, then Learner.train_step."""
        self.learner.add(*trajectories)
        return self.learner.train_step(learning_rate)

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything resume needs from this learner: networks and optimiser."""
        return {**self.learner.state_dict(), "optimizer": self.learner.optimizer_state()}

    def restore(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)
        self.learner.load_optimizer_state(state["optimizer"])

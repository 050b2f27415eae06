"""PPO's learner process: a thin Ray shell around the plain ``Learner`` (its rollout actor,
``MuJoCoActor``, is a plain class Ray wraps as it is).

Its state methods have the names every learner process has: ``network_state`` /
``load_network_state`` (what parameter averaging mixes and broadcasts) and ``state_dict`` /
``load_state_dict`` (everything resume restores).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from drlcli.algos.entry_types import LearnerContext
from drlcli.algos.ppo.learner import build_ppo_learner


class PPOLearnerWorker:
    """One PPO learner in its own process: add a round's trajectories, train, report."""

    def __init__(self, context: LearnerContext) -> None:
        torch.set_num_threads(1)  # 64x64 networks: more threads only add overhead
        self.learner = build_ppo_learner(context)

    def train_round(
        self, *trajectories: dict[str, np.ndarray]
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """ReplayBuffer.add for each trajectory, then Learner.train_step (at the position of
        the learner's own schedule)."""
        self.learner.add(*trajectories)
        return self.learner.train_step()

    def network_state(self) -> dict[str, Any]:
        return self.learner.network_state()

    def load_network_state(self, state: dict[str, Any]) -> None:
        self.learner.load_network_state(state)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

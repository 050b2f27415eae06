"""``EnvFacts``: an environment's spaces as plain data, what the algorithms, checkpoints and
the runtime need to know of a task without making it (``envs.env_facts`` reads them from one)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from drlcli.observations import ObservationGroups, ObservationLayout


@dataclass(frozen=True)
class EnvFacts:
    """What the rest of drl needs to know about an environment's spaces.

    ``obs_dim`` is the width of the vectors the environment returns. With observation groups
    (a privileged critic) those are the training vectors: the policy reads ``policy_dim`` of
    them and the critic ``critic_dim``; ``policy_facts()`` is the task as the policy sees it
    (what checkpoints record and play, evaluation and export make).
    """

    env_id: str
    obs_dim: int
    action_dim: int
    action_low: np.ndarray  # [action_dim] float64
    action_high: np.ndarray  # [action_dim] float64
    observation_layout: ObservationLayout | None = None  # the parts named; None: a flat Box
    observation_groups: ObservationGroups | None = None  # None: policy and critic read it all

    @property
    def policy_dim(self) -> int:
        groups = self.observation_groups
        return self.obs_dim if groups is None else groups.policy_dim

    @property
    def critic_dim(self) -> int:
        groups = self.observation_groups
        return self.obs_dim if groups is None else groups.critic_dim

    @property
    def action_bounds(self) -> tuple[list[float], list[float]]:
        """``(low, high)`` as lists of floats: how learners and actor builders take them."""
        return self.action_low.tolist(), self.action_high.tolist()

    def policy_facts(self) -> EnvFacts:
        """The spaces as the policy sees them: without groups, these facts themselves."""
        groups = self.observation_groups
        if groups is None:
            return self
        return dataclasses.replace(
            self,
            obs_dim=groups.policy_dim,
            observation_layout=groups.policy_layout,
            observation_groups=None,
        )

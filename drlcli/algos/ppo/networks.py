"""PPO's value network (the policy actor is drlcli.actors.gaussian)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from drlcli.actors.gaussian import mlp


class ValueNetwork(nn.Module):
    """State-value function ``V(obs) -> [B]``, separate from the policy (PPO's MuJoCo setup)."""

    def __init__(self, obs_dim: int, hidden_sizes: Sequence[int], activation: str) -> None:
        super().__init__()
        self.network = mlp(obs_dim, hidden_sizes, 1, activation, output_gain=1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.network(obs).squeeze(-1)

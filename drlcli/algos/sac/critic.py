"""SAC's critic: two independent Q networks ("clipped double Q", Fujimoto et al. 2018, as SAC
uses it), each ``Q_j(s, a) = MLP(concat(s, a))``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from drlcli.algos.sac.actor import relu_mlp


class TwinQ(nn.Module):
    """``(obs [B, O], act [B, A]) -> [2, B]``: both heads' Q values."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        width = hidden_sizes[-1] if hidden_sizes else obs_dim + action_dim
        self.heads = nn.ModuleList(
            nn.Sequential(relu_mlp(obs_dim + action_dim, hidden_sizes), nn.Linear(width, 1))
            for _ in range(2)
        )

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        inputs = torch.cat([obs, act], dim=-1)
        return torch.stack([head(inputs).squeeze(-1) for head in self.heads])

"""PPO's value networks: the MLP's and the recurrent one (the policy actors are
drlcli.actors.gaussian and drlcli.actors.recurrent)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from drlcli.actors.gaussian import mlp
from drlcli.actors.recurrent import RecurrentCore
from drlcli.algos.ppo.params import PPOParams


class ValueNetwork(nn.Module):
    """State-value function ``V(obs) -> [B]``, separate from the policy (PPO's MuJoCo setup)."""

    def __init__(self, obs_dim: int, hidden_sizes: Sequence[int], activation: str) -> None:
        super().__init__()
        self.network = mlp(obs_dim, hidden_sizes, 1, activation, output_gain=1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.network(obs).squeeze(-1)


class RecurrentValueNetwork(nn.Module):
    """``V(h_t)`` with ``h_t`` a recurrent core's output after the episode's observations so
    far (ADR 0018): the critic's own core, reading the critic's observations.

    ``step`` is the rollout's (one observation of ``B`` environments and the state it reads);
    ``forward`` the learner's (chunks ``[L, C, O]`` from their first steps' states).
    """

    def __init__(
        self,
        obs_dim: int,
        cell: str,
        size: int,
        layers: int,
        hidden_sizes: Sequence[int],
        activation: str,
    ) -> None:
        super().__init__()
        self.core = RecurrentCore(cell, obs_dim, size, layers)
        self.network = mlp(size, hidden_sizes, 1, activation, output_gain=1.0)

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Values ``[B]`` of ``obs [B, O]`` and the state after the step."""
        features, after = self.core.step(obs, state)
        return self.network(features).squeeze(-1), after

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Values ``[L, C]`` of chunks ``obs [L, C, O]``, each read from ``state``."""
        features, _ = self.core.sequence(obs, state)
        return self.network(features).squeeze(-1)


def build_value_network(params: PPOParams, critic_dim: int) -> nn.Module:
    """PPO's value network over ``critic_dim`` observations: the MLP of
    ``value_network_hidden_sizes``, behind its own recurrent core with ``recurrent``."""
    hidden_sizes = params.value_network_hidden_sizes
    if params.recurrent is None:
        return ValueNetwork(critic_dim, hidden_sizes, params.activation)
    cell, size, layers = params.recurrent.core
    return RecurrentValueNetwork(critic_dim, cell, size, layers, hidden_sizes, params.activation)

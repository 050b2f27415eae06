"""PPO's value networks: the MLP's and the recurrent one (the policy actors are
drlcli.actors.gaussian and drlcli.actors.recurrent)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from drlcli.actors.gaussian import mlp
from drlcli.actors.recurrent import RecurrentCore
from drlcli.algos.ppo.params import PPOParams
from drlcli.normalization import VARIANCE_EPSILON, RmsState, merge_rms_states


class ReturnStatistics(nn.Module):
    """Running mean and variance of the value targets (``normalize_value``, rl_games'
    ``normalize_value``): the value network learns ``(R - mean) / std`` and its predictions
    are de-normalised (``real``) wherever a value is used as one (GAE, the bootstrap at
    truncation). Buffers, float64: they travel with the value network's state to the rollout
    actors, into checkpoints and through parameter averaging."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("var", torch.ones((), dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def update(self, returns: torch.Tensor) -> None:
        """Merge a round's value targets ``[N]`` into the history as observation statistics
        merge (``merge_rms_states``); the first round's moments replace the initial
        ``(0, 1)``."""
        batch = returns.detach().cpu().to(torch.float64).numpy()
        if batch.size == 0:
            return
        history = (
            RmsState(self.mean.cpu().numpy(), self.var.cpu().numpy(), float(self.count))
            if self.count > 0
            else None
        )
        moments = RmsState(np.array(batch.mean()), np.array(batch.var()), float(batch.size))
        merged = merge_rms_states([history, moments])
        self.mean.fill_(float(merged.mean))
        self.var.fill_(float(merged.var))
        self.count.fill_(merged.count)

    def std(self) -> torch.Tensor:
        return torch.sqrt(self.var + VARIANCE_EPSILON)

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        """``(values - mean) / std`` in ``values``' dtype."""
        return ((values - self.mean) / self.std()).to(values.dtype)

    def real(self, values: np.ndarray) -> np.ndarray:
        """A prediction ``[N]`` as a value of the return: ``values * std + mean``."""
        scaled = values * float(self.std()) + float(self.mean)
        return scaled.astype(values.dtype, copy=False)


class ValueNetwork(nn.Module):
    """State-value function ``V(obs) -> [B]``, separate from the policy (PPO's MuJoCo setup);
    with ``normalize_value``, of the normalised return (``return_statistics``)."""

    def __init__(
        self,
        obs_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        normalize_value: bool = False,
    ) -> None:
        super().__init__()
        self.network = mlp(obs_dim, hidden_sizes, 1, activation, output_gain=1.0)
        self.return_statistics = ReturnStatistics() if normalize_value else None

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
        normalize_value: bool = False,
    ) -> None:
        super().__init__()
        self.core = RecurrentCore(cell, obs_dim, size, layers)
        self.network = mlp(size, hidden_sizes, 1, activation, output_gain=1.0)
        self.return_statistics = ReturnStatistics() if normalize_value else None

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
    ``value_network_hidden_sizes``, behind its own recurrent core with ``recurrent``, with
    ``return_statistics`` under ``normalize_value``."""
    hidden_sizes = params.value_network_hidden_sizes
    if params.recurrent is None:
        return ValueNetwork(critic_dim, hidden_sizes, params.activation, params.normalize_value)
    cell, size, layers = params.recurrent.core
    return RecurrentValueNetwork(
        critic_dim, cell, size, layers, hidden_sizes, params.activation, params.normalize_value
    )

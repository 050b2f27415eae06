"""SAC's built-in policy actor: a tanh-squashed Gaussian MLP mapped affinely onto the bounds
(``drlcli/actors/tanh.py``; action transform ``tanh_affine``).

    h = MLP(obs) (ReLU),  mean = W_mu h,  log std = -5 + 7 (1 + tanh(W_sigma h)) / 2 in [-5, 2]
    u ~ N(mean, std),     a = bias + range * tanh(u)

Exploration draws fresh noise at every step (no held noise: SAC's stochastic policy as it is);
``explore(deterministic=True)`` and the export are ``bias + range * tanh(mean)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from drlcli.actors.spec import passes_keywords_to
from drlcli.actors.tanh import TanhGaussianActor

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def relu_mlp(in_features: int, hidden_sizes: Sequence[int]) -> nn.Sequential:
    """Linear + ReLU layers of ``hidden_sizes`` (torch's default initialisation, as in the
    paper's and CleanRL's SAC)."""
    layers: list[nn.Module] = []
    width = in_features
    for size in hidden_sizes:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return nn.Sequential(*layers)


class SACActor(TanhGaussianActor):
    """``obs [B, O] ->`` a tanh-squashed Gaussian over ``[B, A]`` actions inside the bounds. No
    layer differs between training and inference."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: Sequence[float],
        action_high: Sequence[float],
        hidden_sizes: Sequence[int] = (256, 256),
    ) -> None:
        super().__init__(action_low, action_high)
        self.trunk = relu_mlp(obs_dim, hidden_sizes)
        width = hidden_sizes[-1] if hidden_sizes else obs_dim
        self.mean_head = nn.Linear(width, action_dim)
        self.log_std_head = nn.Linear(width, action_dim)

    def get_mean_and_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-squash Gaussian parameters, each ``[B, A]``."""
        features = self.trunk(obs)
        raw = torch.tanh(self.log_std_head(features))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (raw + 1.0)
        return self.mean_head(features), log_std.exp()


@passes_keywords_to(SACActor)
def build_sac_actor(obs_dim: int, action_dim: int, device: Any = "cpu", **kwargs: Any) -> SACActor:
    """Builder of the built-in SAC actor (``drlcli.algos.sac.actor:build_sac_actor``);
    ``kwargs``: ``SACActor``'s ``action_low``, ``action_high`` and ``hidden_sizes``."""
    return SACActor(obs_dim, action_dim, **kwargs).to(device)

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

from drlcli.actors.memory import module_memory_bytes
from drlcli.actors.tanh import TanhAffineExport, squashed_gaussian_log_prob

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


class SACActor(nn.Module):
    """``obs [B, O] ->`` a tanh-squashed Gaussian over ``[B, A]`` actions inside the bounds."""

    action_transform_id = "tanh_affine"

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: Sequence[float],
        action_high: Sequence[float],
        hidden_sizes: Sequence[int] = (256, 256),
    ) -> None:
        super().__init__()
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.trunk = relu_mlp(obs_dim, hidden_sizes)
        width = hidden_sizes[-1] if hidden_sizes else obs_dim
        self.mean_head = nn.Linear(width, action_dim)
        self.log_std_head = nn.Linear(width, action_dim)
        self.register_buffer("action_bias", (high + low) / 2)
        self.register_buffer("action_range", (high - low) / 2)

    def get_mean_and_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-squash Gaussian parameters, each ``[B, A]``."""
        features = self.trunk(obs)
        raw = torch.tanh(self.log_std_head(features))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (raw + 1.0)
        return self.mean_head(features), log_std.exp()

    def transform(self, u: torch.Tensor) -> torch.Tensor:
        return self.action_bias + self.action_range * torch.tanh(u)

    def forward(self, obs: torch.Tensor, training: bool = False) -> tuple[torch.Tensor, dict]:
        """Reparameterised sample ``a [B, A]`` and ``info["log_prob"] [B]`` of ``a`` itself
        (change of variables through tanh and the affine rescale). No layer differs between
        training and inference: ``training`` changes nothing here."""
        mean, std = self.get_mean_and_std(obs)
        u = mean + std * torch.randn_like(mean)
        log_prob = squashed_gaussian_log_prob(u, mean, std, self.action_range)
        return self.transform(u), {"log_prob": log_prob}

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor, dones: torch.Tensor | None = None, deterministic: bool = False
    ) -> torch.Tensor:
        """Env actions ``[N, A]`` for N environments (``dones`` is unused: no held noise)."""
        mean, std = self.get_mean_and_std(obs)
        if deterministic:
            return self.transform(mean)
        return self.transform(mean + std * torch.randn_like(mean))

    def as_export_module(self) -> nn.Module:
        return TanhAffineExport(self)

    def normalize_parameters(self) -> None:
        """SAC keeps its weights as the optimiser leaves them: nothing to project."""

    def inference_startup_memory_categories(self) -> dict[str, int]:
        return module_memory_bytes(self)


def build_sac_actor(
    obs_dim: int,
    action_dim: int,
    device: Any = "cpu",
    *,
    action_low: Sequence[float],
    action_high: Sequence[float],
    hidden_sizes: Sequence[int] = (256, 256),
) -> SACActor:
    """Builder of the built-in SAC actor (``drlcli.algos.sac.actor:build_sac_actor``)."""
    return SACActor(obs_dim, action_dim, action_low, action_high, hidden_sizes).to(device)

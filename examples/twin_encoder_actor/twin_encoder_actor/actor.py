"""``TwinEncoderActor``: a policy actor that implements drl's contract from outside drl.

- Two encoders: the first half of the observation (for MuJoCo tasks mostly positions) and the
  second half (mostly velocities) are encoded separately, then joined.
- An auxiliary loss, ``mean_l2``: ``aux_weight * E[mean^2]``, which keeps the pre-transform
  mean away from the flat ends of the transform. drl adds it to the actor objective and logs it
  as ``Loss/aux_mean_l2``.
- A non-tanh action transform, ``softsign_affine``:
  ``a = bias + range * u / (1 + |u|)`` with ``bias = (high + low) / 2``,
  ``range = (high - low) / 2``, so ``log|da/du| = sum_i log range_i - 2 log(1 + |u_i|)``.

drl calls ``build(obs_dim=..., action_dim=..., device=..., **kwargs)`` with the kwargs of the
config's ``algo_params.actor_config``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from drlcli.actors.memory import module_memory_bytes

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0


def _encoder(in_features: int, hidden_dim: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(in_features, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, hidden_dim), nn.ReLU()
    )


class SoftsignExport(nn.Module):
    """``obs -> bias + range * softsign(mean(obs))``: the deterministic policy, as deployed."""

    def __init__(self, actor: TwinEncoderActor) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean, _ = self.actor.get_mean_and_std(obs)
        return self.actor.transform(mean)


class TwinEncoderActor(nn.Module):
    """Observations ``[B, O]`` -> actions ``[B, A]`` inside ``[action_low, action_high]``."""

    action_transform_id = "softsign_affine"

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: Sequence[float],
        action_high: Sequence[float],
        hidden_dim: int = 64,
        aux_weight: float = 1e-3,
    ) -> None:
        super().__init__()
        self.split = max(1, obs_dim // 2)
        # Raw observations arrive (FlashSAC keeps no running statistics): normalise them here.
        self.input_norm = nn.BatchNorm1d(obs_dim, momentum=0.01, affine=False)
        self.first_encoder = _encoder(self.split, hidden_dim)
        self.second_encoder = _encoder(max(1, obs_dim - self.split), hidden_dim)
        self.mean_head = nn.Linear(2 * hidden_dim, action_dim)
        self.log_std_head = nn.Linear(2 * hidden_dim, action_dim)
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.register_buffer("action_bias", (high + low) / 2)
        self.register_buffer("action_range", (high - low) / 2)
        self.aux_weight = float(aux_weight)
        self.has_second_part = obs_dim > self.split

    def get_mean_and_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-transform Gaussian parameters, each ``[B, A]``."""
        x = self.input_norm(obs)
        first = self.first_encoder(x[:, : self.split])
        second_input = x[:, self.split :] if self.has_second_part else x[:, :1]
        features = torch.cat([first, self.second_encoder(second_input)], dim=-1)
        log_std = self.log_std_head(features).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return self.mean_head(features), log_std.exp()

    def transform(self, u: torch.Tensor) -> torch.Tensor:
        return self.action_bias + self.action_range * u / (1.0 + u.abs())

    def forward(self, obs: torch.Tensor, training: bool = False) -> tuple[torch.Tensor, dict]:
        """A reparameterised action and ``info["log_prob"]`` of that (transformed) action; in
        training, ``info["aux_losses"] = {"mean_l2": ...}``, already weighted."""
        self.train(training)  # BatchNorm: batch statistics in training, running ones otherwise
        mean, std = self.get_mean_and_std(obs)
        noise = torch.randn_like(mean)
        u = mean + std * noise
        log_det = (self.action_range.log() - 2.0 * torch.log1p(u.abs())).sum(-1)
        log_prob = (-0.5 * noise.square() - std.log() - _HALF_LOG_2PI).sum(-1) - log_det
        info: dict[str, Any] = {"log_prob": log_prob}
        if training:
            info["aux_losses"] = {"mean_l2": self.aux_weight * mean.square().mean()}
        return self.transform(u), info

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor, dones: torch.Tensor | None = None, deterministic: bool = False
    ) -> torch.Tensor:
        """Env actions; independent Gaussian noise each step (``dones`` is not needed)."""
        self.eval()
        mean, std = self.get_mean_and_std(obs)
        if deterministic:
            return self.transform(mean)
        return self.transform(mean + std * torch.randn_like(mean))

    def as_export_module(self) -> nn.Module:
        self.eval()
        return SoftsignExport(self)

    def normalize_parameters(self) -> None:
        """No norm constraint in this architecture."""

    def inference_startup_memory_categories(self) -> dict[str, int]:
        """Parameters and buffers are all inference needs (drl's helper counts them)."""
        return module_memory_bytes(self)


def build(
    obs_dim: int,
    action_dim: int,
    device: Any = "cpu",
    *,
    action_low: Sequence[float],
    action_high: Sequence[float],
    hidden_dim: int = 64,
    aux_weight: float = 1e-3,
) -> TwinEncoderActor:
    """The builder a drl config names: ``twin_encoder_actor.actor:build``."""
    actor = TwinEncoderActor(obs_dim, action_dim, action_low, action_high, hidden_dim, aux_weight)
    return actor.to(device)

"""The built-in FlashSAC policy actor: a tanh-squashed Gaussian mapped affinely onto the bounds.

    u ~ N(mu(obs), sigma(obs)),   a = bias + range * tanh(u),
    bias = (high + low) / 2,      range = (high - low) / 2
    log pi(a) = sum_i [log N(u_i) - log(1 - tanh(u_i)^2) - log range_i]

The log-std is softly bounded: ``log sigma = -10 + 12 * (1 + tanh(z)) / 2`` lies in [-10, 2].
Exploration holds each env's noise ``eps`` for k steps, k ~ truncated Zeta(mu, max), and redraws
it when k runs out or that env's episode ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from drlcli.actors.spec import passes_keywords_to
from drlcli.actors.tanh import TanhGaussianActor
from drlcli.algos.flash_sac.layers import FlashSACEncoder, UnitLinear, normalize_module_parameters

LOG_STD_MIN, LOG_STD_MAX = -10.0, 2.0


def truncated_zeta_pmf(mu: float, max_steps: int) -> torch.Tensor:
    """``P(k) = k^-mu / sum_j j^-mu`` for ``k = 1..max_steps``."""
    steps = torch.arange(1, max_steps + 1, dtype=torch.float64)
    weights = steps.pow(-mu)
    return (weights / weights.sum()).float()


class FlashSACActor(TanhGaussianActor):
    """FlashSAC policy: encoder ``[B, O] -> [B, hidden]``, mean and log-std heads; exploration
    noise held per env for a Zeta-distributed number of steps."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: Sequence[float],
        action_high: Sequence[float],
        hidden_dim: int = 128,
        num_blocks: int = 2,
        noise_zeta_mu: float = 2.0,
        noise_zeta_max: int = 16,
    ) -> None:
        super().__init__(action_low, action_high)
        self.encoder = FlashSACEncoder(1, obs_dim, hidden_dim, num_blocks)
        self.mean_head = UnitLinear(1, hidden_dim, action_dim)
        self.mean_bias = nn.Parameter(torch.zeros(action_dim))
        self.log_std_head = UnitLinear(1, hidden_dim, action_dim)
        self.log_std_bias = nn.Parameter(torch.zeros(action_dim))
        self.register_buffer("zeta_pmf", truncated_zeta_pmf(noise_zeta_mu, noise_zeta_max))
        # Exploration state, per env: held noise and the steps it has left. Not parameters.
        self._noise: torch.Tensor | None = None
        self._steps_left: torch.Tensor | None = None
        self.normalize_parameters()

    def get_mean_and_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-squash Gaussian parameters, each ``[B, A]``."""
        features = self.encoder(obs.unsqueeze(0))
        mean = (self.mean_head(features) + self.mean_bias)[0]
        raw = (self.log_std_head(features) + self.log_std_bias)[0]
        log_std = LOG_STD_MIN + (LOG_STD_MAX - LOG_STD_MIN) * 0.5 * (1.0 + torch.tanh(raw))
        return mean, log_std.exp()

    def exploration_noise(self, mean: torch.Tensor, dones: torch.Tensor | None) -> torch.Tensor:
        """Each env's held noise ``[N, A]``, redrawn where its steps ran out or ``dones``
        marks its new episode."""
        count = mean.shape[0]
        if self._noise is None or self._noise.shape != mean.shape:
            self._noise = torch.zeros_like(mean)
            self._steps_left = torch.zeros(count, dtype=torch.long, device=mean.device)
        redraw = self._steps_left <= 0
        if dones is not None:
            redraw |= dones.to(device=mean.device, dtype=torch.bool).reshape(count)
        if redraw.any():
            fresh = int(redraw.sum())
            self._noise[redraw] = torch.randn(fresh, mean.shape[1], device=mean.device)
            held = torch.multinomial(self.zeta_pmf, fresh, replacement=True) + 1
            self._steps_left[redraw] = held.to(mean.device)
        self._steps_left -= 1
        return self._noise

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        normalize_module_parameters(self)


@passes_keywords_to(FlashSACActor)
def build_flash_sac_actor(
    obs_dim: int, action_dim: int, device: Any = "cpu", **kwargs: Any
) -> FlashSACActor:
    """Builder of the built-in FlashSAC actor (``...flash_sac.actor:build_flash_sac_actor``);
    ``kwargs``: ``FlashSACActor``'s bounds, widths and exploration-noise settings."""
    return FlashSACActor(obs_dim, action_dim, **kwargs).to(device)

"""The tanh-squashed Gaussian that FlashSAC's and SAC's built-in actors share (action transform
``tanh_affine``): pure functions of tensors, and the deployed deterministic policy.

    u ~ N(mean, std),   a = bias + range * tanh(u),
    bias = (high + low) / 2,   range = (high - low) / 2
    log pi(a) = sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) - log range_i]
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def tanh_log_det_jacobian(u: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(u)^2)``, written stably as ``2 (log 2 - u - softplus(-2u))``."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


def squashed_gaussian_log_prob(
    u: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, action_range: torch.Tensor
) -> torch.Tensor:
    """``log pi(a) [B]`` of the env action ``a = bias + range * tanh(u)``, for ``u, mean, std
    [B, A]`` and ``action_range [A]``: the Gaussian density of ``u`` with the change of
    variables through tanh and the affine rescale."""
    z = (u - mean) / std
    return (
        -0.5 * z.square()
        - std.log()
        - _HALF_LOG_2PI
        - tanh_log_det_jacobian(u)
        - action_range.log()
    ).sum(-1)


class TanhAffineExport(nn.Module):
    """``obs [B, O] -> bias + range * tanh(mean(obs))``: the deterministic deployed policy of an
    actor with ``get_mean_and_std(obs)`` and ``transform(u)``."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean, _ = self.actor.get_mean_and_std(obs)
        return self.actor.transform(mean)

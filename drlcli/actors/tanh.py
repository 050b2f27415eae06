"""The tanh-squashed Gaussian that FlashSAC's and SAC's built-in actors share (action transform
``tanh_affine``): pure functions of tensors, the deployed deterministic policy, and the
contract's methods around a subclass's ``get_mean_and_std``.

    u ~ N(mean, std),   a = bias + range * tanh(u),
    bias = (high + low) / 2,   range = (high - low) / 2
    log pi(a) = sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) - log range_i]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from drlcli.actors.memory import module_memory_bytes

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


class TanhGaussianActor(nn.Module):
    """The policy-actor contract for a tanh-squashed Gaussian inside the env's bounds, around
    ``get_mean_and_std(obs) -> (mean, std)``, each ``[B, A]``, which a subclass defines.

    ``forward`` draws the reparameterised training sample with ``sample_noise``; ``explore``
    draws fresh noise at every step unless a subclass holds it (``exploration_noise``). Both
    switch the module's mode (``training`` for the sample, eval for exploration), which
    matters only to an actor with normalisation layers.

    Args:
        action_low, action_high: env bounds ``[A]``; ``bias`` and ``range`` are kept as buffers.
    """

    action_transform_id = "tanh_affine"

    def __init__(self, action_low: Sequence[float], action_high: Sequence[float]) -> None:
        super().__init__()
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.register_buffer("action_bias", (high + low) / 2)
        self.register_buffer("action_range", (high - low) / 2)

    def get_mean_and_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def sample_noise(self, mean: torch.Tensor) -> torch.Tensor:
        """Standard normal noise ``[B, A]`` of the reparameterised training sample."""
        return torch.randn_like(mean)

    def exploration_noise(self, mean: torch.Tensor, dones: torch.Tensor | None) -> torch.Tensor:
        """Standard normal noise ``[N, A]`` of an exploration step: fresh at every step."""
        return torch.randn_like(mean)

    def transform(self, u: torch.Tensor) -> torch.Tensor:
        return self.action_bias + self.action_range * torch.tanh(u)

    def forward(self, obs: torch.Tensor, training: bool = False) -> tuple[torch.Tensor, dict]:
        """Reparameterised sample ``a [B, A]`` and ``info["log_prob"] [B]`` of ``a`` itself
        (change of variables through tanh and the affine rescale)."""
        self.train(training)
        mean, std = self.get_mean_and_std(obs)
        u = mean + std * self.sample_noise(mean)
        log_prob = squashed_gaussian_log_prob(u, mean, std, self.action_range)
        return self.transform(u), {"log_prob": log_prob}

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor, dones: torch.Tensor | None = None, deterministic: bool = False
    ) -> torch.Tensor:
        """Env actions ``[N, A]`` for N environments; ``dones[i]`` marks env i's new episode
        (for an actor that holds noise across steps)."""
        self.eval()
        mean, std = self.get_mean_and_std(obs)
        if deterministic:
            return self.transform(mean)
        return self.transform(mean + std * self.exploration_noise(mean, dones))

    def as_export_module(self) -> nn.Module:
        self.eval()
        return TanhAffineExport(self)

    def normalize_parameters(self) -> None:
        """Nothing to project unless a subclass has a parameter-norm constraint."""

    def inference_startup_memory_categories(self) -> dict[str, int]:
        return module_memory_bytes(self)

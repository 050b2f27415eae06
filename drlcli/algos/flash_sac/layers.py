"""FlashSAC building blocks (arXiv 2604.04539): unit-norm layers and inverted residual blocks.

Every layer carries an optional leading *ensemble* axis ``E`` so the two critic heads run as one
batched computation; the actor uses ``E = 1``. Activations are ``[E, B, d]``.

``normalize_parameters()`` projects weights back onto their norm constraints; the learner calls
it after initialisation and after every optimiser step:

- linear weights (bias-free): each output row to unit L2 norm;
- BatchNorm affine pair ``(gamma, beta)`` and RMSNorm weight: jointly rescaled to norm sqrt(d).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from drlcli.off_policy.data_parallel import DataParallelGroup


class UnitLinear(nn.Module):
    """Bias-free linear map ``[E, B, in] -> [E, B, out]``, orthogonal init, unit-norm rows."""

    def __init__(self, ensemble: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, out_features, in_features))
        for index in range(ensemble):
            nn.init.orthogonal_(self.weight.data[index])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight.transpose(1, 2))

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        self.weight.copy_(F.normalize(self.weight, dim=-1, eps=1e-8))


class UnitBatchNorm(nn.Module):
    """BatchNorm over the batch axis per ensemble member, affine pair kept at norm sqrt(d).

    Training mode normalises with the batch statistics and updates running statistics
    (momentum 0.01); evaluation mode uses the running statistics, so inference is a fixed
    affine map (this is also the observation normaliser when it is the first layer). With
    ``data_parallel`` set, the batch statistics are those of every learner's batch together.
    """

    def __init__(self, ensemble: int, features: int, momentum: float = 0.01, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, features))
        self.bias = nn.Parameter(torch.zeros(ensemble, features))
        self.register_buffer("running_mean", torch.zeros(ensemble, features))
        self.register_buffer("running_var", torch.ones(ensemble, features))
        self.momentum, self.eps = momentum, eps
        self.data_parallel: DataParallelGroup | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            if self.data_parallel is not None:
                shift = self.running_mean.unsqueeze(1).detach().clone()
                mean, var, count = self.data_parallel.batch_moments(x, shift)
            else:
                mean = x.mean(dim=1, keepdim=True)
                # Written out: torch 2.13's var over the middle axis was 14x slower on CPU.
                var = (x - mean).square().mean(dim=1, keepdim=True)
                count = x.shape[1]
            with torch.no_grad():
                unbiased = var.squeeze(1) * (count / max(count - 1, 1))
                self.running_mean.lerp_(mean.squeeze(1), self.momentum)
                self.running_var.lerp_(unbiased, self.momentum)
        else:
            mean = self.running_mean.unsqueeze(1)
            var = self.running_var.unsqueeze(1)
        normalized = (x - mean) * torch.rsqrt(var + self.eps)
        return normalized * self.weight.unsqueeze(1) + self.bias.unsqueeze(1)

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        squared = (self.weight.square() + self.bias.square()).sum(dim=-1, keepdim=True)
        factor = math.sqrt(self.weight.shape[-1]) * torch.rsqrt(squared + 1e-8)
        self.weight.mul_(factor)
        self.bias.mul_(factor)


class UnitRMSNorm(nn.Module):
    """RMSNorm over features with a weight kept at norm sqrt(d)."""

    def __init__(self, ensemble: int, features: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + self.eps)
        return x * scale * self.weight.unsqueeze(1)

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        squared = self.weight.square().sum(dim=-1, keepdim=True)
        self.weight.mul_(math.sqrt(self.weight.shape[-1]) * torch.rsqrt(squared + 1e-8))


class InvertedResidualBlock(nn.Module):
    """``x + ReLU(BN(W2 · ReLU(BN(W1 · x))))`` with a 4x wider middle layer."""

    def __init__(self, ensemble: int, width: int, expansion: int = 4) -> None:
        super().__init__()
        self.expand = UnitLinear(ensemble, width, width * expansion)
        self.expand_norm = UnitBatchNorm(ensemble, width * expansion)
        self.project = UnitLinear(ensemble, width * expansion, width)
        self.project_norm = UnitBatchNorm(ensemble, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.relu(self.expand_norm(self.expand(x)))
        return x + F.relu(self.project_norm(self.project(hidden)))


class FlashSACEncoder(nn.Module):
    """Input BatchNorm (the observation normaliser), unit linear embedding, residual blocks,
    post-RMSNorm: ``[E, B, in] -> [E, B, width]``."""

    def __init__(self, ensemble: int, in_features: int, width: int, num_blocks: int) -> None:
        super().__init__()
        self.input_norm = UnitBatchNorm(ensemble, in_features)
        self.embed = UnitLinear(ensemble, in_features, width)
        self.blocks = nn.ModuleList(
            InvertedResidualBlock(ensemble, width) for _ in range(num_blocks)
        )
        self.post_norm = UnitRMSNorm(ensemble, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(self.input_norm(x))
        for block in self.blocks:
            x = block(x)
        return self.post_norm(x)


def share_batch_statistics(module: nn.Module, group: DataParallelGroup | None) -> None:
    """Every FlashSAC BatchNorm layer inside ``module`` normalises over ``group``'s batches."""
    for layer in module.modules():
        if isinstance(layer, UnitBatchNorm):
            layer.data_parallel = group


def normalize_module_parameters(module: nn.Module) -> None:
    """Project every unit-norm layer inside ``module`` back onto its constraint."""
    for layer in module.modules():
        if isinstance(layer, (UnitLinear, UnitBatchNorm, UnitRMSNorm)):
            layer.normalize_parameters()

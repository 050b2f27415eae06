"""FlashSAC's distributional double critic and its categorical TD target."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from drlcli.algos.flash_sac.layers import FlashSACEncoder, UnitLinear, normalize_module_parameters
from drlcli.algos.flash_sac.params import FlashSACParams


class DoubleCategoricalCritic(nn.Module):
    """Two Q heads run as one ensemble; each predicts a categorical distribution over
    ``num_bins`` fixed atoms on ``[v_min, v_max]``.

    ``forward(obs [B, O], action [B, A]) -> (q [2, B], log_probs [2, B, K])`` with
    ``q = sum_k softmax(logits)_k * atom_k``.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dim: int,
        num_blocks: int,
        num_bins: int,
        v_min: float,
        v_max: float,
    ) -> None:
        super().__init__()
        self.encoder = FlashSACEncoder(2, obs_dim + action_dim, hidden_dim, num_blocks)
        self.head = UnitLinear(2, hidden_dim, num_bins)
        self.head_bias = nn.Parameter(torch.zeros(2, num_bins))
        self.register_buffer("atoms", torch.linspace(v_min, v_max, num_bins))
        self.normalize_parameters()

    @classmethod
    def from_params(
        cls, obs_dim: int, action_dim: int, params: FlashSACParams
    ) -> DoubleCategoricalCritic:
        """The critic ``algo_params`` describe (width, blocks, bins, support)."""
        return cls(
            obs_dim,
            action_dim,
            params.critic_hidden_dim,
            params.critic_num_blocks,
            params.num_bins,
            params.v_min,
            params.v_max,
        )

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1).unsqueeze(0).expand(2, -1, -1)
        logits = self.head(self.encoder(x)) + self.head_bias.unsqueeze(1)
        log_probs = F.log_softmax(logits, dim=-1)
        return (log_probs.exp() * self.atoms).sum(-1), log_probs

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        normalize_module_parameters(self)


def categorical_td_target(
    next_log_probs: torch.Tensor,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_entropy_term: torch.Tensor,
    gamma: float,
    v_min: float,
    v_max: float,
) -> torch.Tensor:
    """Project the soft Bellman target distribution onto the fixed atoms (C51 projection).

    Each atom ``z_k`` of the next-state distribution moves to
    ``r + gamma * (1 - terminated) * (z_k - alpha * log pi(a'|s'))``, clipped to the support; its
    probability is split between the two neighbouring atoms in proportion to the distance.
    Only termination cuts the bootstrap: truncated transitions keep it. No host
    synchronisation, so it can run inside a captured CUDA graph.

    Args:
        next_log_probs: ``[B, K]`` log-probabilities of the chosen target head at ``(s', a')``.
        rewards, terminated, next_entropy_term: ``[B]``; the last is ``alpha * log pi(a'|s')``.
        v_min, v_max: the support's ends; the ``K`` atoms are evenly spaced on it.

    Returns:
        ``[B, K]`` target probabilities (each row sums to 1).
    """
    num_bins = next_log_probs.shape[-1]
    atoms = torch.linspace(v_min, v_max, num_bins, device=next_log_probs.device)
    spacing = (v_max - v_min) / (num_bins - 1)
    keep = (1.0 - terminated.float()).unsqueeze(-1)
    shifted = rewards.unsqueeze(-1) + gamma * keep * (atoms - next_entropy_term.unsqueeze(-1))
    position = (shifted.clamp(v_min, v_max) - v_min) / spacing
    lower = position.floor().clamp(0, num_bins - 1)
    upper_weight = position - lower  # NaN where the target is: the loss then reports it
    lower_index = lower.nan_to_num(0.0).long()  # a NaN would index far out of range
    upper_index = (lower_index + 1).clamp(max=num_bins - 1)
    probs = next_log_probs.exp()
    target = torch.zeros_like(probs)
    target.scatter_add_(1, lower_index, probs * (1.0 - upper_weight))
    target.scatter_add_(1, upper_index, probs * upper_weight)
    return target

"""FlashSAC's distributional double critic, its categorical TD target, and reward scaling."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from drlcli.algos.flash_sac.layers import FlashSACEncoder, UnitLinear, normalize_module_parameters


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
    upper_weight = position - lower
    lower_index = lower.long()
    upper_index = (lower_index + 1).clamp(max=num_bins - 1)
    probs = next_log_probs.exp()
    target = torch.zeros_like(probs)
    target.scatter_add_(1, lower_index, probs * (1.0 - upper_weight))
    target.scatter_add_(1, upper_index, probs * upper_weight)
    return target


class ReturnScaler:
    """Scale rewards so discounted returns fit the critic's support (FlashSAC's normaliser).

    Tracks the per-env discounted return ``G <- gamma * (1 - done) * G + r``, its running
    variance and its largest magnitude; rewards are divided by
    ``max(sqrt(Var[G] + eps), max|G| / G_max)``.
    """

    def __init__(self, num_envs: int, gamma: float, return_max: float, eps: float = 1e-8):
        self.gamma, self.return_max, self.eps = gamma, return_max, eps
        self.discounted_return = np.zeros(num_envs)
        self.abs_max = 0.0
        self.count, self.mean, self.var = 0.0, 0.0, 1.0

    def update(self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        done = np.logical_or(terminated, truncated)
        self.discounted_return = self.gamma * (1.0 - done) * self.discounted_return + rewards
        self.abs_max = max(self.abs_max, float(np.abs(self.discounted_return).max()))
        batch_mean, batch_var, n = (
            self.discounted_return.mean(),
            self.discounted_return.var(),
            len(rewards),
        )
        total = self.count + n
        delta = batch_mean - self.mean
        self.var = (
            self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        ) / total
        self.mean += delta * n / total
        self.count = total

    def scale(self) -> float:
        """The current divisor (1 before any update)."""
        if self.count == 0:
            return 1.0
        return max(float(np.sqrt(self.var + self.eps)), self.abs_max / self.return_max, 1e-8)

    def state_dict(self) -> dict:
        return {
            "discounted_return": torch.as_tensor(self.discounted_return.copy()),
            "abs_max": self.abs_max,
            "count": self.count,
            "mean": float(self.mean),
            "var": float(self.var),
        }

    def load_state_dict(self, state: dict) -> None:
        stored = np.asarray(state["discounted_return"], dtype=np.float64)
        if stored.shape == self.discounted_return.shape:
            self.discounted_return = stored
        self.abs_max, self.count = float(state["abs_max"]), float(state["count"])
        self.mean, self.var = float(state["mean"]), float(state["var"])

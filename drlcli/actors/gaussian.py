"""The built-in PPO policy actor: a diagonal Gaussian with a state-independent log-std.

The policy's own action space is unbounded (the raw Normal sample); the environment receives
``clip(sample, low, high)`` (``prepare_action``). Its action transform is therefore ``clip`` and
``log_prob`` is that of the raw sample, which PPO stores: the first ratio of a round is exactly 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from drlcli.actors.memory import module_memory_bytes
from drlcli.actors.spec import passes_keywords_to

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def orthogonal_linear(in_features: int, out_features: int, gain: float) -> nn.Linear:
    """A linear layer with orthogonal weights of the given gain and zero bias (PPO practice)."""
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(
    in_features: int,
    hidden_sizes: Sequence[int],
    out_features: int,
    activation: str,
    output_gain: float,
) -> nn.Sequential:
    """Hidden layers with gain sqrt(2), an output layer with ``output_gain``."""
    layers: list[nn.Module] = []
    width = in_features
    for size in hidden_sizes:
        layers += [orthogonal_linear(width, size, math.sqrt(2.0)), ACTIVATIONS[activation]()]
        width = size
    layers.append(orthogonal_linear(width, out_features, output_gain))
    return nn.Sequential(*layers)


class ClipExport(nn.Module):
    """``obs -> clip(mean(obs), low, high)``: the deterministic policy, as deployed."""

    def __init__(self, mean_network: nn.Module, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__()
        self.mean_network = mean_network
        self.register_buffer("low", low.clone())
        self.register_buffer("high", high.clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.mean_network(obs), self.low, self.high)


def policy_output_layer(actor: Any) -> nn.Linear | None:
    """The output layer of a Gaussian actor's MLP mean (what PPO's ``policy_last_layer_scale``
    scales), or None for an actor whose mean is not such an MLP."""
    network = getattr(actor, "mean_network", None)
    if not isinstance(actor, GaussianPolicyActor) or not isinstance(network, nn.Sequential):
        return None
    return network[-1] if len(network) and isinstance(network[-1], nn.Linear) else None


class GaussianPolicyActor(nn.Module):
    """Diagonal Gaussian policy ``N(mu(obs), exp(log_std))`` for PPO.

    Args:
        obs_dim, action_dim: sizes of the (normalised) observation and the action.
        action_low, action_high: env bounds ``[action_dim]``, used by the clip transform.
        hidden_sizes, activation: the mean network.
        init_log_std: initial value of every log-std entry.
    """

    action_transform_id = "clip"

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: Sequence[float],
        action_high: Sequence[float],
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        init_log_std: float = 0.0,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.mean_network = mlp(obs_dim, hidden_sizes, action_dim, activation, output_gain=0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        self.register_buffer("action_low", torch.as_tensor(action_low, dtype=torch.float32))
        self.register_buffer("action_high", torch.as_tensor(action_high, dtype=torch.float32))

    # The Normal log-density and entropy are written out rather than built from
    # torch.distributions.Normal: the object construction dominated small-batch rollout cost.
    def _log_prob(self, actions: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - _HALF_LOG_2PI).sum(-1)

    def _entropy(self, batch: int) -> torch.Tensor:
        return (0.5 + _HALF_LOG_2PI + self.log_std).sum().expand(batch)

    def _sample(self, mean: torch.Tensor) -> torch.Tensor:
        """A reparameterised raw sample ``mean + exp(log_std) * eps`` ``[B, A]``."""
        return mean + torch.exp(self.log_std) * torch.randn_like(mean)

    def _env_action(self, mean: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """``transform(mean)`` when deterministic, else ``transform(sample)``."""
        return self.transform(mean if deterministic else self._sample(mean))

    def _mean(self, obs: torch.Tensor) -> torch.Tensor:
        """``mu(obs)`` ``[B, A]`` (a recurrent actor's: of an episode's first step)."""
        return self.mean_network(obs)

    def forward(
        self, obs: torch.Tensor, training: bool = False
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Sample raw actions ``[B, A]``; info holds ``log_prob`` and ``entropy``, both ``[B]``."""
        mean = self._mean(obs)
        actions = self._sample(mean)
        info = {
            "log_prob": self._log_prob(actions, mean),
            "entropy": self._entropy(len(obs)),
        }
        return actions, info

    def log_prob_and_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-prob ``[B]`` of stored raw actions and the entropy ``[B]``, for the PPO ratio."""
        return self._log_prob(actions, self._mean(obs)), self._entropy(len(obs))

    def get_mean_and_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self._mean(obs)
        return mean, self.log_std.exp().expand_as(mean)

    def transform(self, actions: torch.Tensor) -> torch.Tensor:
        """The env action of a raw action: ``clip(a, low, high)``."""
        return torch.clamp(actions, self.action_low, self.action_high)

    def explore(
        self,
        obs: torch.Tensor,
        dones: torch.Tensor | None = None,
        deterministic: bool = False,
    ) -> torch.Tensor:
        """Env actions: ``transform(mean)`` when deterministic, else ``transform(sample)``.

        ``dones`` is accepted for the contract; this policy keeps no per-episode state.
        """
        return self._env_action(self.mean_network(obs), deterministic)

    def as_export_module(self) -> nn.Module:
        return ClipExport(self.mean_network, self.action_low, self.action_high)

    def normalize_parameters(self) -> None:
        """Nothing to project: this architecture has no parameter-norm constraint."""

    def inference_startup_memory_categories(self) -> dict[str, int]:
        return module_memory_bytes(self)


@passes_keywords_to(GaussianPolicyActor)
def build_gaussian_actor(
    obs_dim: int, action_dim: int, device: Any = "cpu", **kwargs: Any
) -> GaussianPolicyActor:
    """Builder of the built-in PPO actor (``drlcli.actors.gaussian:build_gaussian_actor``);
    ``kwargs``: ``GaussianPolicyActor``'s ``action_low``, ``action_high``, ``hidden_sizes``,
    ``activation`` and ``init_log_std``."""
    return GaussianPolicyActor(obs_dim, action_dim, **kwargs).to(device)

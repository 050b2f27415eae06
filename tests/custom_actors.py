"""Custom policy actors for the custom-actor injection tests (a stand-in for a downstream
package)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from drlcli.actors.gaussian import GaussianPolicyActor
from drlcli.algos.flash_sac.actor import FlashSACActor


class AuxLossActor(FlashSACActor):
    """The FlashSAC actor plus an auxiliary loss that pulls actions towards zero."""

    def __init__(
        self, *args: Any, aux_weight: float = 0.1, drift_after: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.aux_weight = aux_weight
        self.drift_after = drift_after  # emit a different aux name after this many calls
        self.training_calls = 0

    def forward(self, obs: torch.Tensor, training: bool = False) -> tuple[torch.Tensor, dict]:
        actions, info = super().forward(obs, training)
        if training:
            self.training_calls += 1
            name = "action_l2"
            if self.drift_after is not None and self.training_calls > self.drift_after:
                name = "something_else"
            info["aux_losses"] = {name: self.aux_weight * actions.square().mean()}
        return actions, info


def build(
    obs_dim: int,
    action_dim: int,
    device: Any = "cpu",
    *,
    action_low: list[float],
    action_high: list[float],
    hidden_dim: int = 16,
    aux_weight: float = 0.1,
    drift_after: int | None = None,
    actor_class: type[AuxLossActor] = AuxLossActor,
) -> AuxLossActor:
    actor = actor_class(
        obs_dim,
        action_dim,
        action_low,
        action_high,
        hidden_dim,
        1,
        aux_weight=aux_weight,
        drift_after=drift_after,
    )
    return actor.to(device)


class SampleNoiseActor(AuxLossActor):
    """``AuxLossActor`` whose training noise is a fixed function of each observation instead of
    random draws: one learner on a concatenated batch draws the same noise per sample as
    data-parallel learners on its parts."""

    def forward(self, obs: torch.Tensor, training: bool = False) -> tuple[torch.Tensor, dict]:
        self._observations = obs
        return super().forward(obs, training)

    def sample_noise(self, mean: torch.Tensor) -> torch.Tensor:
        generator = torch.Generator().manual_seed(7)
        projection = torch.randn(self._observations.shape[1], mean.shape[1], generator=generator)
        return torch.sin(3.0 * self._observations @ projection.to(mean.device))


def build_sample_noise(*args: Any, **kwargs: Any) -> AuxLossActor:
    return build(*args, actor_class=SampleNoiseActor, **kwargs)


def build_with_seed(seed: int, obs_dim: int, action_dim: int) -> dict[str, torch.Tensor]:
    """Rebuild from the spec in whatever process calls this (the spawn test)."""
    from drlcli.actors.spec import ActorSpec, build_policy_actor

    torch.manual_seed(seed)
    spec = ActorSpec("tests.custom_actors:build", {"action_low": [-1.0], "action_high": [1.0]})
    return {
        k: v.clone() for k, v in build_policy_actor(spec, obs_dim, action_dim).state_dict().items()
    }


class _Shifted(torch.nn.Module):
    def __init__(self, network: torch.nn.Module, shift: float) -> None:
        super().__init__()
        self.network, self.shift = network, shift

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.network(obs) + self.shift


class ShiftedGaussianActor(GaussianPolicyActor):
    """The built-in PPO actor with its mean moved by ``shift``: a subclass, which a rollout
    actor must run as its own module (not as the built-in's numpy copy)."""

    def __init__(self, *args: Any, shift: float) -> None:
        super().__init__(*args)
        self.mean_network = _Shifted(self.mean_network, shift)


def build_shifted_gaussian(
    obs_dim: int,
    action_dim: int,
    device: Any = "cpu",
    *,
    action_low: list[float],
    action_high: list[float],
    shift: float,
    init_log_std: float = -3.0,
) -> ShiftedGaussianActor:
    low, high = (np.asarray(bound, dtype=np.float32) for bound in (action_low, action_high))
    actor = ShiftedGaussianActor(
        obs_dim, action_dim, low, high, (8,), "tanh", init_log_std, shift=shift
    )
    return actor.to(device)


class OffsetGaussianActor(GaussianPolicyActor):
    """The built-in PPO actor with its own (plain) layers whose samples and log-probabilities
    are those of its mean moved by ``offset``: a subclass that changes the maths outside the
    mean network, which a rollout actor must run as its own module."""

    def __init__(self, *args: Any, offset: float) -> None:
        super().__init__(*args)
        self.offset = offset

    def forward(self, obs: torch.Tensor, training: bool = False) -> tuple[torch.Tensor, dict]:
        mean = self.mean_network(obs) + self.offset
        actions = mean + torch.exp(self.log_std) * torch.randn_like(mean)
        info = {"log_prob": self._log_prob(actions, mean), "entropy": self._entropy(len(obs))}
        return actions, info

    def log_prob_and_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.mean_network(obs) + self.offset
        return self._log_prob(actions, mean), self._entropy(len(obs))


def build_offset_gaussian(
    obs_dim: int,
    action_dim: int,
    device: Any = "cpu",
    *,
    action_low: list[float],
    action_high: list[float],
    offset: float,
) -> OffsetGaussianActor:
    actor = OffsetGaussianActor(
        obs_dim, action_dim, action_low, action_high, (8,), "tanh", -3.0, offset=offset
    )
    return actor.to(device)


class UncopyableActor(AuxLossActor):
    """An actor that holds something ``copy.deepcopy`` cannot copy (a lock, a device handle):
    drl's checks must probe it in place."""

    def __deepcopy__(self, memo: dict) -> UncopyableActor:
        raise TypeError("cannot pickle '_thread.lock' object")


def build_uncopyable(*args: Any, **kwargs: Any) -> AuxLossActor:
    return build(*args, actor_class=UncopyableActor, **kwargs)


class RecurrentCustomActor(GaussianPolicyActor):
    """A foreign actor that declares a recurrent state: refused, custom actors are one-step
    (ADR 0018 decision 5)."""

    def recurrent_state_shape(self, batch: int) -> tuple[int, ...]:
        return (1, batch, 4)


def build_recurrent_custom_actor(obs_dim, action_dim, device="cpu"):
    return RecurrentCustomActor(obs_dim, action_dim, [-3.0] * action_dim, [3.0] * action_dim)

"""Recurrent policies (ADR 0018): ``RecurrentCore``, an LSTM or GRU that carries a hidden state
from step to step, and ``RecurrentGaussianPolicyActor``, PPO's Gaussian actor whose mean network
reads the core's output instead of the observation.

A rollout steps the core one observation at a time (``step``, after ``reset`` where an episode
begins) and stores the state each step read; the learner reads whole chunks of steps in one
fused call from those stored states (``sequence``; ``drlcli/algos/ppo/sequences.py`` cuts
them). Play and evaluation keep the state inside the actor (``explore``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from drlcli.actors.gaussian import GaussianPolicyActor
from drlcli.actors.recurrent_layout import CELLS, state_shape
from drlcli.actors.spec import passes_keywords_to


class RecurrentCore(nn.Module):
    """An LSTM or GRU of ``layers`` layers of ``size`` units over ``input_dim`` features.

    The state is one tensor ``[layers, B, size]`` for a GRU and two stacked,
    ``[2, layers, B, size]`` (hidden, cell), for an LSTM: one shape to store, reset and
    gather per step whatever the cell (``state_shape``).
    """

    def __init__(self, cell: str, input_dim: int, size: int, layers: int = 1) -> None:
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"cell must be one of {', '.join(CELLS)}, got {cell!r}")
        self.cell, self.size, self.layers = cell, size, layers
        kind = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = kind(input_dim, size, num_layers=layers)

    def state_shape(self, batch: int) -> tuple[int, ...]:
        """The shape of the state of ``batch`` sequences."""
        return state_shape((self.cell, self.size, self.layers), batch)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Zeros: the state at an episode's start."""
        return torch.zeros(self.state_shape(batch), device=device)

    def _unpack(self, state: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if self.cell == "lstm":
            return state[0].contiguous(), state[1].contiguous()
        return state.contiguous()

    def _pack(self, state: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.stack(state) if isinstance(state, tuple) else state

    @staticmethod
    def reset(state: torch.Tensor, episode_starts: torch.Tensor) -> torch.Tensor:
        """``state`` of ``B`` environments with zeros where ``episode_starts [B]`` (bool): the
        state a step reads. A rollout stores it as the state before that step."""
        keep = (~episode_starts).to(state.dtype).view(*([1] * (state.dim() - 2)), -1, 1)
        return state * keep

    def step(
        self, features: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of ``B`` environments: ``features [B, input_dim]`` and the state it reads
        (``reset`` first where an episode begins). Returns ``(output [B, size], state after
        the step)``."""
        output, after = self.rnn(features.unsqueeze(0), self._unpack(state))
        return output.squeeze(0), self._pack(after)

    def sequence(
        self, features: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``L`` steps of ``C`` chunks without a reset inside: ``features [L, C, input_dim]``
        from ``state`` (the state before each chunk's first step), in one fused call.
        Returns ``(outputs [L, C, size], state after the last step)``."""
        outputs, after = self.rnn(features, self._unpack(state))
        return outputs, self._pack(after)


class RecurrentGaussianPolicyActor(GaussianPolicyActor):
    """``N(mu(h_t), exp(log_std))`` with ``h_t`` the core's output after the observations of
    the episode so far: ADR 0018's recurrent surface beside ADR 0017's contract.

    ``forward``, ``log_prob_and_entropy`` and ``get_mean_and_std`` read one observation as the
    first step of an episode (a zero state); ``explore`` keeps its own state between calls.

    Args:
        obs_dim, action_dim, action_low, action_high, hidden_sizes, activation,
            init_log_std: as ``GaussianPolicyActor`` (the mean network reads ``size`` features).
        cell, size, layers: the core (``RecurrentCore``).
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: Sequence[float],
        action_high: Sequence[float],
        cell: str = "lstm",
        size: int = 128,
        layers: int = 1,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        init_log_std: float = 0.0,
    ) -> None:
        super().__init__(
            size, action_dim, action_low, action_high, hidden_sizes, activation, init_log_std
        )
        self.core = RecurrentCore(cell, obs_dim, size, layers)
        self.explore_state: torch.Tensor | None = None  # play's and evaluation's

    def recurrent_state_shape(self, batch: int) -> tuple[int, ...]:
        """The state of ``batch`` environments; zeros at an episode's start."""
        return self.core.state_shape(batch)

    def _mean(self, obs: torch.Tensor) -> torch.Tensor:
        """``mu`` of the first step of an episode (a zero state): what ``forward``,
        ``log_prob_and_entropy`` and ``get_mean_and_std`` read."""
        features, _ = self.core.step(obs, self.core.initial_state(len(obs), obs.device))
        return self.mean_network(features)

    def step(
        self, obs: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rollout's sampling: raw actions ``[B, A]``, their log-prob ``[B]`` and the state
        after the step, from ``obs [B, O]`` and the state the step reads."""
        features, after = self.core.step(obs, state)
        mean = self.mean_network(features)
        actions = self._sample(mean)
        return actions, self._log_prob(actions, mean), after

    def sequence_log_prob_and_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The learner's: log-probs and entropies ``[L, C]`` of stored raw ``actions
        [L, C, A]`` after ``obs [L, C, O]``, each chunk read from ``state`` (its first step's)."""
        features, _ = self.core.sequence(obs, state)
        log_prob = self._log_prob(actions, self.mean_network(features))
        return log_prob, self._entropy(log_prob.numel()).view_as(log_prob)

    def explore(
        self,
        obs: torch.Tensor,
        dones: torch.Tensor | None = None,
        deterministic: bool = False,
    ) -> torch.Tensor:
        """Env actions, the state carried from the previous call: zeroed where ``dones [B]``
        marks an episode's first observation, and for every env when the batch changes size
        (a new run of episodes)."""
        shape = self.core.state_shape(len(obs))
        state = self.explore_state
        if state is None or tuple(state.shape) != shape or state.device != obs.device:
            state = self.core.initial_state(len(obs), obs.device)
        elif dones is not None:
            state = self.core.reset(state, dones.to(torch.bool))
        features, self.explore_state = self.core.step(obs, state)
        return self._env_action(self.mean_network(features), deterministic)

    def as_export_module(self) -> nn.Module:
        return RecurrentClipExport(self.core, self.mean_network, self.action_low, self.action_high)


class RecurrentClipExport(nn.Module):
    """``(obs, state) -> (clip(mean), state after the step)``: the deterministic recurrent
    policy as deployed; the client feeds the state back and zeroes it at an episode's start."""

    def __init__(
        self, core: RecurrentCore, mean_network: nn.Module, low: torch.Tensor, high: torch.Tensor
    ) -> None:
        super().__init__()
        self.core, self.mean_network = core, mean_network
        self.register_buffer("low", low.clone())
        self.register_buffer("high", high.clone())

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features, after = self.core.step(obs, state)
        return torch.clamp(self.mean_network(features), self.low, self.high), after


@passes_keywords_to(RecurrentGaussianPolicyActor)
def build_recurrent_gaussian_actor(
    obs_dim: int, action_dim: int, device: Any = "cpu", **kwargs: Any
) -> RecurrentGaussianPolicyActor:
    """Builder of the built-in recurrent PPO actor
    (``drlcli.actors.recurrent:build_recurrent_gaussian_actor``); ``kwargs``:
    ``RecurrentGaussianPolicyActor``'s."""
    return RecurrentGaussianPolicyActor(obs_dim, action_dim, **kwargs).to(device)

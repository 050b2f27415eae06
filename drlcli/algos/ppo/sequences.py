"""Recurrent PPO's sequences (issue "Robots that remember"): a recurrent core that carries a
hidden state from step to step, and a round's rollout cut into chunks that the core reads in one
fused call. Pure torch and numpy: no Ray, no I/O.

A rollout of ``T`` steps of ``N`` environments is stored time-major (flat index ``t * N + n``,
as ``MuJoCoActor.sample`` writes it). Training re-reads it as whole sequences: each
environment's steps are cut where an episode starts (the state is zero there) and every
``max_length`` steps (truncated back-propagation through time), so no chunk holds a reset and
``nn.LSTM`` / ``nn.GRU`` read each chunk in one call (cuDNN's or oneDNN's fused kernel, not a
Python loop over time). Chunks are padded to the longest; a mask keeps the padding out of the
losses and statistics. Each chunk starts from the hidden state the rollout's step read at its
first step (after ``RecurrentCore.reset``: zeros where an episode began), so the loss at every
step is that of the policy the rollout ran, up to the parameters' change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

CELLS = ("lstm", "gru")


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
        shape = (self.layers, batch, self.size)
        return (2, *shape) if self.cell == "lstm" else shape

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


@dataclass(frozen=True)
class Chunks:
    """A rollout cut into sequences.

    Attributes:
        index: ``[C, L]`` flat time-major step indices of each chunk's steps, padded with the
            chunk's first index (``mask`` says which are real).
        mask: ``[C, L]`` bool, True on real steps.
        first: ``[C]`` the flat index of each chunk's first step: where the stored state
            (the state before that step) is read.
    """

    index: np.ndarray
    mask: np.ndarray
    first: np.ndarray

    def __len__(self) -> int:
        return len(self.first)


def cut_into_chunks(episode_starts: np.ndarray, max_length: int) -> Chunks:
    """Cut a rollout of ``episode_starts [T, N]`` (bool: an episode begins at step t of env
    n; the rollout's first step of each env need not be one) into chunks of at most
    ``max_length`` steps, each within one env and one episode, in order of (env, time).

    Raises:
        ValueError: a shape other than ``[T, N]`` with T, N >= 1, or ``max_length < 1``.
    """
    starts = np.asarray(episode_starts, dtype=bool)
    if starts.ndim != 2 or starts.shape[0] < 1 or starts.shape[1] < 1:
        raise ValueError(f"episode_starts must be [T, N] with T, N >= 1, got {starts.shape}")
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    steps, envs = starts.shape
    pieces: list[np.ndarray] = []
    for env in range(envs):
        cuts = np.flatnonzero(starts[:, env])
        bounds = np.unique(np.concatenate([[0], cuts, [steps]]))
        for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
            for chunk_begin in range(begin, end, max_length):
                times = np.arange(chunk_begin, min(chunk_begin + max_length, end))
                pieces.append(times * envs + env)
    length = max(len(piece) for piece in pieces)
    index = np.empty((len(pieces), length), dtype=np.int64)
    mask = np.zeros((len(pieces), length), dtype=bool)
    for row, piece in enumerate(pieces):
        index[row, : len(piece)] = piece
        index[row, len(piece) :] = piece[0]
        mask[row, : len(piece)] = True
    return Chunks(index, mask, index[:, 0].copy())


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` over the real steps (``mask`` True), any equal shapes."""
    weights = mask.to(values.dtype)
    return (values * weights).sum() / weights.sum()


def standardize_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(x - mean) / (std + 1e-8)`` over the real steps (the unbiased std, as
    ``standardize_advantages`` of an MLP's round); padding comes out 0."""
    real = values[mask]
    standardized = (values - real.mean()) / (real.std() + 1e-8)
    return torch.where(mask, standardized, torch.zeros_like(values))

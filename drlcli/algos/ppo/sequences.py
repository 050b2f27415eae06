"""Recurrent PPO's sequences (ADR 0018): a round's rollout cut into chunks that a recurrent core
(``drlcli/actors/recurrent.py``) reads in one fused call, and read back time-major. Pure torch
and numpy: no Ray, no I/O; the masked means and standardisation are ``maths.py``'s.

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


@dataclass(frozen=True)
class Chunks:
    """A rollout cut into sequences.

    Attributes:
        index: ``[C, L]`` flat time-major step indices of each chunk's steps, padded with the
            chunk's first index (``mask`` says which are real); ``L = min(T, max_length)``.
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
    length = min(steps, max_length)  # one width for every rollout of T steps
    index = np.empty((len(pieces), length), dtype=np.int64)
    mask = np.zeros((len(pieces), length), dtype=bool)
    for row, piece in enumerate(pieces):
        index[row, : len(piece)] = piece
        index[row, len(piece) :] = piece[0]
        mask[row, : len(piece)] = True
    return Chunks(index, mask, index[:, 0].copy())


def chunk_trajectory(trajectory: dict[str, np.ndarray], max_length: int) -> dict[str, np.ndarray]:
    """One rollout actor's trajectory as the learner reads it: whole chunks.

    Args:
        trajectory: ``MuJoCoActor.sample``'s recurrent trajectory: time-major columns
            ``[N, ...]`` (``N = T * num_envs``), with ``episode_start [T, num_envs]`` and the
            state each step read, ``policy_state`` and ``value_state`` ``[N, *state]``.
        max_length: ``recurrent.sequence_length``.

    Returns:
        Every other column as ``[C, L, ...]`` (padding repeats the chunk's first step),
        ``mask [C, L]`` and each chunk's first step's states ``[C, *state]``.
    """
    chunks = cut_into_chunks(trajectory["episode_start"], max_length)
    chunked = {
        key: column[chunks.index]
        for key, column in trajectory.items()
        if key not in ("episode_start", "policy_state", "value_state")
    }
    chunked["mask"] = chunks.mask
    chunked["policy_state"] = trajectory["policy_state"][chunks.first]
    chunked["value_state"] = trajectory["value_state"][chunks.first]
    return chunked


def core_state(stored: torch.Tensor) -> torch.Tensor:
    """Stored per-sequence states ``[C, *state]`` (``*state``: ``[layers, size]``, an LSTM's
    ``[2, layers, size]``) in ``RecurrentCore``'s layout, the batch axis second to last."""
    return stored.movedim(0, -2).contiguous()


CHUNK_STATES = ("policy_state", "value_state")


def sequence_steps(chunks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Chunked columns ``[C, L, ...]`` as the cores read them: time-major ``[L', C, ...]``,
    cut after the longest chunk's last real step (padding that no chunk of these needs is not
    computed: short episodes leave most of a round's chunks short). The chunks' states
    ``[C, ...]`` are kept whole."""
    real = chunks["mask"].any(0)
    length = int(real.nonzero().max()) + 1 if bool(real.any()) else 1
    return {
        name: column if name in CHUNK_STATES else time_major(name, column[:, :length])
        for name, column in chunks.items()
    }


def time_major(name: str, column: torch.Tensor) -> torch.Tensor:
    """A chunked column ``[C, L, ...]`` as ``[L, C, ...]``; the chunks' states stay ``[C, ...]``."""
    return column if name in CHUNK_STATES else column.transpose(0, 1)

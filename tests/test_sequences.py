"""Recurrent PPO's sequences (``drlcli/algos/ppo/sequences.py``): the chunks a rollout is cut
into, the recurrent core read step by step (rollouts) and a chunk at a time (training), and the
masked statistics. The fused chunk read is checked against a hand-unrolled loop of steps with
resets, outputs and gradients alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drlcli.actors.recurrent import RecurrentCore
from drlcli.algos.ppo.maths import masked_mean, standardize_masked
from drlcli.algos.ppo.sequences import cut_into_chunks


def test_a_rollout_is_cut_per_env_at_episode_starts_and_every_max_length_steps():
    starts = np.zeros((7, 2), dtype=bool)
    starts[3, 0] = True  # env 0: an episode begins at step 3
    starts[5, 1] = True  # env 1: at step 5
    chunks = cut_into_chunks(starts, max_length=3)
    flat = lambda t, n: t * 2 + n  # noqa: E731  time-major, 2 envs
    real = [list(row[mask]) for row, mask in zip(chunks.index, chunks.mask, strict=True)]
    assert real == [
        [flat(0, 0), flat(1, 0), flat(2, 0)],
        [flat(3, 0), flat(4, 0), flat(5, 0)],
        [flat(6, 0)],
        [flat(0, 1), flat(1, 1), flat(2, 1)],
        [flat(3, 1), flat(4, 1)],
        [flat(5, 1), flat(6, 1)],
    ]
    assert chunks.index.shape == chunks.mask.shape == (6, 3)
    assert list(chunks.first) == [row[0] for row in real]
    assert list(chunks.index[2]) == [flat(6, 0)] * 3  # padded with the chunk's first step


@pytest.mark.parametrize("seed", range(5))
def test_chunks_hold_every_step_once_in_order_and_no_episode_start_after_their_first(seed):
    rng = np.random.default_rng(seed)
    steps, envs = int(rng.integers(1, 40)), int(rng.integers(1, 5))
    starts = rng.random((steps, envs)) < 0.15
    max_length = int(rng.integers(1, 9))
    chunks = cut_into_chunks(starts, max_length)
    real = np.concatenate([row[mask] for row, mask in zip(chunks.index, chunks.mask, strict=True)])
    assert sorted(real.tolist()) == list(range(steps * envs))
    flat_starts = starts.reshape(-1)
    for row, mask in zip(chunks.index, chunks.mask, strict=True):
        steps_of = row[mask]
        assert 1 <= len(steps_of) <= max_length
        assert np.all(np.diff(steps_of) == envs)  # one env, consecutive steps
        assert not flat_starts[steps_of[1:]].any()  # a reset only at a chunk's first step


@pytest.mark.parametrize(
    ("starts", "max_length", "message"),
    [
        (np.zeros((0, 2), dtype=bool), 4, r"must be \[T, N\]"),
        (np.zeros(5, dtype=bool), 4, r"must be \[T, N\]"),
        (np.zeros((5, 2), dtype=bool), 0, "max_length must be >= 1"),
    ],
)
def test_a_malformed_rollout_or_length_is_refused(starts, max_length, message):
    with pytest.raises(ValueError, match=message):
        cut_into_chunks(starts, max_length)


def test_an_unknown_cell_is_refused():
    with pytest.raises(ValueError, match="cell must be one of lstm, gru, got 'rnn'"):
        RecurrentCore("rnn", 3, 8)


def unrolled(core, features, starts, state):
    """The rollout's way: ``core.reset`` then ``core.step`` over ``T`` steps; every step's
    output and the state each step read, ``[T, ...]``."""
    outputs, before = [], []
    for t in range(len(features)):
        state = core.reset(state, starts[t])
        before.append(state)
        output, state = core.step(features[t], state)
        outputs.append(output)
    return torch.stack(outputs), torch.stack(before)


def chunked(core, features, chunks, before):
    """The training's way: each chunk read in one call from the stored state its first step
    read; outputs back at their flat steps ``[T * N, size]`` (padding left out)."""
    steps, envs = features.shape[:2]
    flat = features.reshape(steps * envs, -1)
    index = torch.as_tensor(chunks.index)
    mask = torch.as_tensor(chunks.mask)
    # The state each chunk's first step read: of time first // N, env first % N.
    state = torch.stack(
        [before[int(f) // envs][..., int(f) % envs, :] for f in chunks.first], dim=-2
    )
    outputs, _ = core.sequence(flat[index].transpose(0, 1), state)  # [L, C, size]
    result = torch.zeros(steps * envs, core.size)
    result = result.index_put((index[mask],), outputs.transpose(0, 1)[mask])
    return result, mask


@pytest.mark.parametrize(("cell", "layers"), [("lstm", 1), ("gru", 1), ("lstm", 2), ("gru", 2)])
def test_a_chunk_read_in_one_call_equals_the_rollouts_steps_with_resets(cell, layers):
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    steps, envs, size = 23, 3, 8
    core = RecurrentCore(cell, 5, size, layers)
    features = torch.randn(steps, envs, 5)
    starts_np = rng.random((steps, envs)) < 0.12
    starts = torch.as_tensor(starts_np)
    initial = torch.randn(core.state_shape(envs))  # the state carried in from the last round
    with torch.no_grad():
        expected, before = unrolled(core, features, starts, initial)
        chunks = cut_into_chunks(starts_np, max_length=6)
        got, _ = chunked(core, features, chunks, before)
    torch.testing.assert_close(got, expected.reshape(steps * envs, size), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_masked_chunk_loss_has_the_gradients_of_the_unrolled_loss(cell):
    """Truncated BPTT: gradients reach back to a chunk's first step, from the stored state
    (held fixed), the same as the loop of steps whose state is cut off at each chunk start."""
    torch.manual_seed(2)
    rng = np.random.default_rng(3)
    steps, envs, size = 17, 2, 6
    core = RecurrentCore(cell, 4, size)
    features = torch.randn(steps, envs, 4)
    starts_np = rng.random((steps, envs)) < 0.15
    starts_np[0] = True
    with torch.no_grad():
        _, before = unrolled(core, features, torch.as_tensor(starts_np), core.initial_state(envs))
    chunks = cut_into_chunks(starts_np, max_length=5)
    weights = torch.randn(steps * envs, size)

    got, mask = chunked(core, features, chunks, before)
    loss = (got * weights).sum() / (steps * envs)
    fused = torch.autograd.grad(loss, list(core.parameters()))

    # The same loss unrolled step by step: the state is the stored one at each chunk start
    # (detached, as training reads it) and carried on otherwise.
    chunk_start = np.zeros((steps, envs), dtype=bool)
    for first in chunks.first:
        chunk_start[first // envs, first % envs] = True
    outputs = []
    state = before[0]
    for t in range(steps):
        fresh = torch.as_tensor(chunk_start[t])
        keep = core.reset(torch.ones_like(state), fresh)  # 0 at a chunk's start, else 1
        state = state * keep + before[t] * (1 - keep)
        output, state = core.step(features[t], state)
        outputs.append(output)
    loss_unrolled = (torch.stack(outputs).reshape(steps * envs, size) * weights).sum() / (
        steps * envs
    )
    by_hand = torch.autograd.grad(loss_unrolled, list(core.parameters()))
    for mine, theirs in zip(fused, by_hand, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)
    assert mask.sum() == steps * envs


def test_masked_statistics_are_those_of_the_real_steps_alone():
    rng = np.random.default_rng(4)
    values = rng.normal(size=(5, 7))
    mask = rng.random((5, 7)) < 0.6
    mask[0, 0] = mask[1, 1] = True
    tensor, mask_t = torch.as_tensor(values), torch.as_tensor(mask)
    assert float(masked_mean(tensor, mask_t)) == pytest.approx(values[mask].mean())
    standardized = standardize_masked(tensor, mask_t).numpy()
    real = values[mask]
    np.testing.assert_allclose(
        standardized[mask], (real - real.mean()) / (real.std(ddof=1) + 1e-8), rtol=1e-12
    )
    assert np.all(standardized[~mask] == 0.0)

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from drlcli.normalization import (
    RewardScaler,
    RmsState,
    compute_batch_moments,
    merge_rms_states,
    normalize_observation,
)

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)


@st.composite
def chunked_batches(draw):
    dim = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 20), min_size=1, max_size=6))
    return [draw(arrays(np.float64, (size, dim), elements=finite)) for size in sizes]


@settings(max_examples=200, deadline=None)
@given(chunked_batches())
def test_merging_disjoint_chunks_equals_moments_of_concatenation(chunks):
    merged = merge_rms_states([compute_batch_moments(chunk) for chunk in chunks])
    whole = compute_batch_moments(np.concatenate(chunks))
    assert merged.count == whole.count
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(merged.var, whole.var, rtol=1e-9, atol=1e-7)


def test_merge_is_order_independent_and_skips_none():
    rng = np.random.default_rng(1)
    parts = [compute_batch_moments(rng.normal(size=(n, 3))) for n in (5, 9, 2)]
    forward = merge_rms_states([parts[0], None, parts[1], parts[2]])
    backward = merge_rms_states(parts[::-1])
    np.testing.assert_allclose(forward.mean, backward.mean, rtol=1e-12)
    np.testing.assert_allclose(forward.var, backward.var, rtol=1e-12)
    assert merge_rms_states([None, None]) is None


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (np.zeros((0, 3)), "empty batch"),
        (np.array([[1.0, np.nan]]), "NaN or infinite"),
        (np.array([[np.inf, 1.0]]), "NaN or infinite"),
        (np.zeros((2, 2, 2)), "expected \\[N, obs_dim\\]"),
    ],
)
def test_bad_batches_are_rejected(samples, message):
    with pytest.raises(ValueError, match=message):
        compute_batch_moments(samples)


def test_merge_rejects_mismatched_dims():
    with pytest.raises(ValueError, match="different shapes"):
        merge_rms_states(
            [compute_batch_moments(np.ones((2, 2))), compute_batch_moments(np.ones((2, 3)))]
        )


def test_normalize_observation_standardises_and_clips():
    state = RmsState(mean=np.array([1.0, -2.0]), var=np.array([4.0, 0.25]), count=10.0)
    out = normalize_observation(np.array([[3.0, 100.0]]), state, clip=5.0, epsilon=0.0)
    np.testing.assert_allclose(out, [[1.0, 5.0]])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(normalize_observation(np.array([2.0]), None, clip=5.0), [2.0])


def test_rms_state_dict_round_trip():
    state = RmsState(mean=np.arange(3.0), var=np.ones(3), count=4.0)
    back = RmsState.from_dict(state.to_dict())
    np.testing.assert_array_equal(back.mean, state.mean)
    assert back.count == 4.0


def test_reward_scaler_return_restarts_after_the_step_that_ends_an_episode():
    from drlcli.normalization import RewardScaler

    scaler = RewardScaler(num_envs=1, gamma=0.5)
    returns = []
    for reward, done in [(1.0, False), (2.0, True), (4.0, False)]:
        scaler.update(np.array([reward]), np.array([done]))
        returns.append(scaler.moments.mean[0] * scaler.moments.count)  # running sum of G
    # G: 1, then 0.5 * 1 + 2 = 2.5 on the terminal step (the whole episode), then 4 (fresh).
    np.testing.assert_allclose(np.diff([0.0, *returns]), [1.0, 2.5, 4.0])
    assert scaler.abs_max == 4.0
    np.testing.assert_allclose(scaler.divisor(), np.sqrt(np.var([1.0, 2.5, 4.0]) + 1e-8))


def test_reward_scaler_divisor_keeps_returns_within_return_max_and_round_trips():
    from drlcli.normalization import RewardScaler

    scaler = RewardScaler(num_envs=2, gamma=0.5, return_max=5.0)
    assert scaler.divisor() == 1.0 and scaler.state_dict() is None
    for _ in range(20):
        scaler.update(np.array([100.0, 1.0]), np.zeros(2, bool))
    # G of env 0 tends to 200: max|G| / divisor stays within 5 (here the std is larger).
    assert scaler.abs_max / scaler.divisor() <= 5.0
    tight = RewardScaler(num_envs=2, gamma=0.5, return_max=0.5)
    tight.load_state_dict(scaler.state_dict())
    assert tight.divisor() == scaler.abs_max / 0.5  # the max|G| term decides
    restored = RewardScaler(2, 0.5, 5.0)
    restored.load_state_dict(scaler.state_dict())
    assert restored.divisor() == scaler.divisor()
    unbounded = RewardScaler(2, 0.5)  # PPO: the return's std alone
    unbounded.load_state_dict(scaler.state_dict())
    assert unbounded.divisor() == pytest.approx(np.sqrt(scaler.moments.var[0] + 1e-8))


def test_reward_scaler_loads_the_scalar_moments_of_older_checkpoints():
    from drlcli.normalization import RewardScaler, reward_scaler_state_problem

    old_flash_sac = {
        "discounted_return": [1.0, 2.0],
        "abs_max": 3.0,
        "count": 4.0,
        "mean": 1.5,
        "var": 0.25,
    }
    assert reward_scaler_state_problem(old_flash_sac) is None
    scaler = RewardScaler(2, 0.9, return_max=1.0)
    scaler.load_state_dict(old_flash_sac)
    assert scaler.divisor() == 3.0  # max(sqrt(0.25), 3 / 1)
    assert reward_scaler_state_problem({"mean": [0.0, 1.0], "var": [1.0], "count": 2}) is not None
    assert reward_scaler_state_problem({"mean": [0.0], "var": [-1.0], "count": 2}) is not None


def test_reward_scaler_loading_no_state_or_an_empty_one_restarts_its_statistics():
    scaler = RewardScaler(2, 0.9)
    scaler.update(np.array([3.0, -1.0]), np.array([False, False]))
    for state in (None, {"mean": [0.0], "var": [1.0], "count": 0.0, "abs_max": 5.0}):
        scaler.load_state_dict(state)
        assert scaler.moments is None and scaler.abs_max == 0.0
        assert scaler.divisor() == 1.0


def test_reward_scaler_loads_stored_moments_as_float64_and_continues_like_the_original():
    original = RewardScaler(2, 0.9, return_max=5.0)
    generator = np.random.default_rng(0)
    original.update(generator.normal(size=2), np.array([False, False]))  # one return per env
    state = original.state_dict()
    assert state["count"] == 2.0
    stored = {
        "mean": torch.tensor(state["mean"], dtype=torch.float32),
        "var": torch.tensor(state["var"], dtype=torch.float32),
        "count": torch.tensor(1.0),  # the smallest count that is kept
    }
    loaded = RewardScaler(2, 0.9, return_max=5.0)
    loaded.load_state_dict(stored)  # an older checkpoint: float32 tensors, no abs_max
    assert loaded.moments.mean.dtype == loaded.moments.var.dtype == np.float64
    assert loaded.moments.count == 1.0 and loaded.abs_max == 0.0
    np.testing.assert_allclose(loaded.moments.mean, state["mean"], rtol=1e-6)
    copy = RewardScaler(2, 0.9, return_max=5.0)
    copy.load_state_dict(state)
    copy.discounted_return = original.discounted_return.copy()  # the rollout actor's to store
    assert copy.divisor() == original.divisor() and copy.abs_max == original.abs_max > 0
    rewards = generator.normal(size=(5, 2))
    for step in rewards:
        original.update(step, np.array([False, True]))
        copy.update(step, np.array([False, True]))
    assert copy.divisor() == original.divisor()


def test_scalar_reward_moments_of_older_checkpoints_load_as_one_element_arrays():
    scaler = RewardScaler(num_envs=1, gamma=0.5)
    scaler.load_state_dict({"mean": 2.0, "var": 3.0, "count": 5.0})
    state = scaler.state_dict()
    assert np.shape(state["mean"]) == np.shape(state["var"]) == (1,)  # the checkpoint form
    assert (float(state["mean"][0]), float(state["var"][0]), state["count"]) == (2.0, 3.0, 5.0)


def test_batch_moments_are_float64_of_a_one_dimensional_or_float32_batch():
    samples32 = np.array([[1e4 + 0.1, 1.0], [1e4 + 0.3, 3.0], [1e4 + 0.2, 5.0]], np.float32)
    moments = compute_batch_moments(samples32)
    assert moments.mean.dtype == moments.var.dtype == np.float64
    reference = samples32.astype(np.float64)
    np.testing.assert_array_equal(moments.mean, reference.mean(axis=0))
    np.testing.assert_array_equal(moments.var, reference.var(axis=0))
    flat = compute_batch_moments(np.array([1.0, 2.0, 6.0]))  # [N]: one feature
    assert flat.mean.shape == (1,) and flat.mean[0] == 3.0 and flat.count == 3.0


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (np.zeros((0, 2)), "compute_batch_moments: empty batch"),
        (np.array([[0.0, np.nan]]), "compute_batch_moments: batch contains NaN or infinite values"),
        (np.zeros((2, 2, 2)), "compute_batch_moments: expected [N, obs_dim], got shape (2, 2, 2)"),
    ],
)
def test_batch_moments_refuse_a_bad_batch_saying_what_it_was(samples, message):
    with pytest.raises(ValueError) as error:
        compute_batch_moments(samples)
    assert str(error.value) == message


def test_stored_moments_load_as_float64_from_float32_arrays_and_tensors():
    for stored in (
        {"mean": np.ones(2, np.float32) / 3, "var": np.ones(2, np.float32) / 7, "count": 3},
        {"mean": torch.ones(2) / 3, "var": torch.ones(2) / 7, "count": 3.0},
    ):
        state = RmsState.from_dict(stored)
        assert state.mean.dtype == state.var.dtype == np.float64
        np.testing.assert_array_equal(state.mean, np.asarray(stored["mean"], np.float64))
        np.testing.assert_array_equal(state.var, np.asarray(stored["var"], np.float64))


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        ({"mean": [0.0], "var": [0.0], "count": 0.0}, None),  # no variance, no count: fine
        ({"mean": [0.0], "var": [1.0], "count": 0.5}, None),
        ({"mean": ["x"], "var": [1.0], "count": 2}, "is not {mean, var, count}"),
        ({"mean": [0.0], "var": ["x"], "count": 2}, "is not {mean, var, count}"),
        ({"mean": [0.0], "var": [1.0, 1.0], "count": 2}, "has the wrong shape or a negative count"),
        ({"mean": [0.0], "var": [1.0], "count": -1}, "has the wrong shape or a negative count"),
        (
            {"mean": [np.inf], "var": [1.0], "count": 2},
            "has non-finite moments or a negative variance",
        ),
        (
            {"mean": [0.0], "var": [-1e-9], "count": 2},
            "has non-finite moments or a negative variance",
        ),
    ],
)
def test_a_stored_reward_scaler_state_is_checked_piece_by_piece(state, problem):
    from drlcli.normalization import reward_scaler_state_problem

    found = reward_scaler_state_problem(state)
    if problem is None or problem.startswith("has"):
        assert found == problem
    else:
        assert found.startswith(problem)


def test_reward_scaling_of_small_returns_is_bounded_by_their_own_magnitude():
    """max|G| starts at 0: returns far below return_max are divided by their spread or their
    own max|G| / return_max, never by a figure from nowhere."""
    scaler = RewardScaler(num_envs=1, gamma=0.0, return_max=1.0)
    for _ in range(3):
        scaler.update(np.array([0.01]), np.array([False]))
    assert scaler.abs_max == pytest.approx(0.01)
    assert scaler.divisor() == pytest.approx(0.01)  # max(sqrt(0 + 1e-8), 0.01 / 1)


def test_integer_done_flags_end_the_episodes_they_mark_and_no_other():
    scaler = RewardScaler(num_envs=3, gamma=1.0)
    scaler.update(np.array([1.0, 2.0, 3.0]), np.array([0, 1, 0]))  # 0/1 flags, not a mask
    np.testing.assert_array_equal(scaler.discounted_return, [1.0, 0.0, 3.0])


def test_standardising_a_constant_feature_is_finite_and_clipped_on_both_sides():
    state = RmsState(mean=np.array([0.0, 5.0]), var=np.array([1.0, 0.0]), count=10.0)
    observation = np.array([[-50.0, 5.0], [50.0, 5.0 + 1e-5]])
    scaled = normalize_observation(observation, state, clip=10.0)
    assert scaled.dtype == np.float32
    np.testing.assert_array_equal(scaled[:, 0], [-10.0, 10.0])  # both clips bind
    assert scaled[0, 1] == 0.0  # var 0: divided by sqrt(0 + 1e-8), not by a NaN
    assert scaled[1, 1] == pytest.approx(0.1)  # 1e-5 / 1e-4

"""Running observation statistics as pure functions on arrays (Method.md, "Observation statistics").

An ``RmsState`` holds the mean, (population) variance and count of the raw observations seen so
far. Rollout actors report ``compute_batch_moments`` of the raw observations of one round; the
driver merges the increments of all actors with ``merge_rms_states``, and the ParameterServer
merges that once into the global history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_OBSERVATION_CLIP = 10.0
"""Clip of standardised observations unless the config sets another."""
VARIANCE_EPSILON = 1e-8
"""Added to a variance before its square root, so a constant feature divides by ~1e-4."""


@dataclass(frozen=True)
class RmsState:
    """Moments of a set of observations: ``mean`` and ``var`` ``[obs_dim]`` float64, ``count``."""

    mean: np.ndarray
    var: np.ndarray
    count: float

    def to_dict(self) -> dict[str, Any]:
        """Plain form for Ray messages and checkpoints (lists would lose precision: arrays stay)."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": float(self.count)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> RmsState:
        """From ``to_dict`` output or a checkpoint's entry (numpy arrays or CPU tensors)."""
        mean = np.asarray(data["mean"], dtype=np.float64)
        var = np.asarray(data["var"], dtype=np.float64)
        return RmsState(mean=mean, var=var, count=float(data["count"]))

    def first(self, width: int) -> RmsState:
        """The moments of the first ``width`` features (the policy's part of a training
        observation, Method.md "Observation groups")."""
        return RmsState(self.mean[:width].copy(), self.var[:width].copy(), self.count)


def compute_batch_moments(samples: np.ndarray) -> RmsState:
    """Moments of one batch of observations.

    Args:
        samples: ``[N, obs_dim]`` (or ``[N]``), N > 0, all finite.

    Raises:
        ValueError: empty or non-finite input.
    """
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim == 1:
        samples = samples[:, None]
    if samples.ndim != 2:
        raise ValueError(f"compute_batch_moments: expected [N, obs_dim], got shape {samples.shape}")
    if samples.shape[0] == 0:
        raise ValueError("compute_batch_moments: empty batch")
    if not np.isfinite(samples).all():
        raise ValueError("compute_batch_moments: batch contains NaN or infinite values")
    return RmsState(mean=samples.mean(axis=0), var=samples.var(axis=0), count=float(len(samples)))


def merge_rms_states(states: Sequence[RmsState | None]) -> RmsState | None:
    """Merge moments of *disjoint* sets of observations (Chan et al. parallel algorithm).

    Merging the moments of k non-overlapping chunks equals the moments of their concatenation.
    Merging overlapping sets (for example a cumulative state with itself) double-counts; callers
    must only pass increments plus at most one history. ``None`` entries (no data) are skipped.
    """
    present = [state for state in states if state is not None]
    if not present:
        return None
    dims = {state.mean.shape for state in present}
    if len(dims) != 1:
        raise ValueError(f"merge_rms_states: states have different shapes {sorted(dims)}")
    mean, var, count = present[0].mean, present[0].var, present[0].count
    for state in present[1:]:
        total = count + state.count
        delta = state.mean - mean
        m2 = var * count + state.var * state.count + delta**2 * count * state.count / total
        mean = mean + delta * state.count / total
        var = m2 / total
        count = total
    return RmsState(mean=np.array(mean), var=np.array(var), count=float(count))


def normalize_observation(
    observation: np.ndarray,
    state: RmsState | None,
    clip: float,
    epsilon: float = VARIANCE_EPSILON,
) -> np.ndarray:
    """``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)`` as float32; identity when ``state``
    is None (no statistics yet)."""
    observation = np.asarray(observation)
    if state is None:
        return observation.astype(np.float32, copy=False)
    scaled = (observation - state.mean) / np.sqrt(state.var + epsilon)
    return np.clip(scaled, -clip, clip).astype(np.float32)


class RewardScaler:
    """Reward scaling by the statistics of the discounted return, one per environment.

    ``G <- gamma * G + r`` accumulates the current episode's rewards; after the step that ends
    an episode (terminated or truncated) G restarts at 0, so the terminal step's G still holds
    the whole episode and nothing of it leaks into the next one. The running moments of G over
    all environments (``merge_rms_states``) and its largest magnitude give the divisor

        divisor = max(sqrt(Var[G] + 1e-8), max|G| / return_max)

    (``return_max`` None: the first term alone). PPO divides each new reward by it and clips;
    FlashSAC divides replayed rewards by the current divisor so returns fit the critic's support.
    Reported episode returns are always the raw ones.
    """

    def __init__(self, num_envs: int, gamma: float, return_max: float | None = None) -> None:
        self.gamma, self.return_max = gamma, return_max
        self.discounted_return = np.zeros(num_envs)
        self.moments: RmsState | None = None
        self.abs_max = 0.0

    def update(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        """Add one step's rewards ``[num_envs]``; ``dones[i]``: env i's episode ended on it."""
        self.discounted_return = self.discounted_return * self.gamma + rewards
        self.moments = merge_rms_states(
            [self.moments, compute_batch_moments(self.discounted_return[:, None])]
        )
        self.abs_max = max(self.abs_max, float(np.abs(self.discounted_return).max()))
        self.discounted_return[np.asarray(dones, dtype=bool)] = 0.0

    def divisor(self) -> float:
        """What rewards are divided by now (1 before any update)."""
        if self.moments is None:
            return 1.0
        divisor = float(np.sqrt(self.moments.var[0] + VARIANCE_EPSILON))
        if self.return_max is not None:
            divisor = max(divisor, self.abs_max / self.return_max)
        return divisor

    def state_dict(self) -> dict[str, Any] | None:
        """``{mean, var: [1] arrays, count, abs_max}`` (checkpoint form), or None before any
        update. The per-env G are not part of it: they belong to the episodes in progress, stored
        with them (PPO: ``MuJoCoActor.state_dict``; FlashSAC: the collector's ``collection``)."""
        if self.moments is None:
            return None
        return {**self.moments.to_dict(), "abs_max": self.abs_max}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Load ``state_dict()`` output (also the scalar moments of checkpoints written before
        PPO and FlashSAC shared this scaler)."""
        if state is None or not float(state["count"]) > 0:
            self.moments, self.abs_max = None, 0.0
            return
        self.moments = RmsState(
            mean=np.asarray(state["mean"], dtype=np.float64).reshape(1),
            var=np.asarray(state["var"], dtype=np.float64).reshape(1),
            count=float(state["count"]),
        )
        self.abs_max = float(state.get("abs_max", 0.0))


def reward_scaler_state_problem(state: Any) -> str | None:
    """What is wrong with a stored ``RewardScaler.state_dict()`` (None is fine), or None."""
    if state is None:
        return None
    try:
        count = float(state["count"])
        mean = np.asarray(state["mean"], dtype=np.float64)
        var = np.asarray(state["var"], dtype=np.float64)
    except (TypeError, KeyError, ValueError) as error:
        return f"is not {{mean, var, count}} ({error!r})"
    if mean.size != 1 or var.size != 1 or not count >= 0:
        return "has the wrong shape or a negative count"
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all()):
        return "has non-finite moments or a negative variance"
    return None

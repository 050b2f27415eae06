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
    observation: np.ndarray, state: RmsState | None, clip: float, epsilon: float = 1e-8
) -> np.ndarray:
    """``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)`` as float32; identity when ``state``
    is None (no statistics yet)."""
    observation = np.asarray(observation)
    if state is None:
        return observation.astype(np.float32, copy=False)
    scaled = (observation - state.mean) / np.sqrt(state.var + epsilon)
    return np.clip(scaled, -clip, clip).astype(np.float32)

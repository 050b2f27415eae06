"""Statistics over the seeds of one config, as Agarwal et al. 2021 ("Deep Reinforcement Learning
at the Edge of the Statistical Precipice") recommend and rliable computes them: the
interquartile mean (IQM), percentile confidence intervals from a stratified bootstrap, and the
probability of improvement of one group of seeds over another. Pure functions of returns; the
resampling is scipy's (``scipy.stats.bootstrap``), seeded, so a report is the same each time.

A *stratum* is one task's runs: a stratified bootstrap resamples runs within each stratum and
never across, so every resample keeps each task's number of runs (with one task, it is the
ordinary bootstrap over seeds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

AGGREGATES = ("iqm", "mean", "median")
CONFIDENCE = 0.95
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # the resampling's stream: the same figures on every run of a report


def figure(value: float) -> str:
    """A return as reports print it: whole numbers from 1000, else 4 significant digits."""
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def interquartile_mean(values: Sequence[float] | np.ndarray, axis: int = -1) -> np.ndarray:
    """The mean of the middle half: ``scipy.stats.trim_mean(values, 0.25)``, rliable's IQM
    (``floor(n / 4)`` values cut at each end; below 4 values, the mean)."""
    from scipy.stats import trim_mean

    return trim_mean(np.asarray(values, dtype=np.float64), 0.25, axis=axis)


def aggregate(values: Sequence[float] | np.ndarray, how: str, axis: int = -1) -> np.ndarray:
    """``how`` (``iqm``, ``mean`` or ``median``) of ``values`` along ``axis``.

    Raises:
        ValueError: an unknown ``how``, or no values.
    """
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0 or array.shape[axis] == 0:
        raise ValueError("no values to aggregate")
    if how == "iqm":
        return interquartile_mean(array, axis=axis)
    if how == "mean":
        return np.mean(array, axis=axis)
    if how == "median":
        return np.median(array, axis=axis)
    raise ValueError(f"unknown aggregate {how!r}: one of {', '.join(AGGREGATES)}")


def default_aggregate(count: int) -> str:
    """The aggregate of ``count`` seeds when none is named: the IQM from 4 seeds (below, it cuts
    nothing and is the mean anyway), else the mean."""
    return "iqm" if count >= 4 else "mean"


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap confidence interval of ``statistic`` at ``confidence``."""

    low: float
    high: float
    statistic: str
    confidence: float = CONFIDENCE

    def __str__(self) -> str:
        return f"[{figure(self.low)}, {figure(self.high)}]"


def _bootstrap(
    samples: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    confidence: float,
    resamples: int,
) -> tuple[float, float]:
    """scipy's percentile bootstrap, each sample resampled on its own (stratified)."""
    from scipy.stats import bootstrap

    for sample in samples:
        if len(sample) < 2:
            raise ValueError("a bootstrap interval needs at least 2 values in every stratum")
    result = bootstrap(
        tuple(samples),
        statistic,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        paired=False,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    interval = result.confidence_interval
    return float(interval.low), float(interval.high)


def bootstrap_interval(
    strata: Sequence[Sequence[float]],
    statistic: str = "iqm",
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
) -> Interval:
    """The stratified-bootstrap confidence interval of ``statistic`` (an ``AGGREGATES`` name)
    over the runs of all ``strata`` together (each stratum: one task's final returns).

    Raises:
        ValueError: a stratum with fewer than 2 runs, or an unknown statistic.
    """
    aggregate([0.0], statistic)  # an unknown name fails here, before any resampling

    def pooled(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        return aggregate(np.concatenate(samples, axis=axis), statistic, axis=axis)

    samples = [np.asarray(stratum, dtype=np.float64) for stratum in strata]
    low, high = _bootstrap(samples, pooled, confidence, resamples)
    return Interval(low, high, statistic, confidence)


def probability_of_improvement(
    better: Sequence[float] | np.ndarray, worse: Sequence[float] | np.ndarray, axis: int = -1
) -> np.ndarray:
    """P(X > Y) for a run X of ``better``'s and a run Y of ``worse``'s drawn at random, ties
    counting half: the Mann-Whitney U statistic over ``len(better) * len(worse)`` (rliable's
    probability of improvement on one task)."""
    x = np.moveaxis(np.asarray(better, dtype=np.float64), axis, -1)[..., :, None]
    y = np.moveaxis(np.asarray(worse, dtype=np.float64), axis, -1)[..., None, :]
    return np.mean((x > y) + 0.5 * (x == y), axis=(-2, -1))


def improvement_interval(
    better: Sequence[float],
    worse: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
) -> Interval:
    """The bootstrap interval of ``probability_of_improvement(better, worse)``, each group's
    runs resampled on their own.

    Raises:
        ValueError: a group with fewer than 2 runs.
    """
    samples = [np.asarray(better, dtype=np.float64), np.asarray(worse, dtype=np.float64)]
    low, high = _bootstrap(samples, probability_of_improvement, confidence, resamples)
    return Interval(low, high, "probability of improvement", confidence)


def mean_intervals(
    points: Sequence[Sequence[float]],
    confidence: float = CONFIDENCE,
    resamples: int = 2_000,
) -> tuple[list[float | None], list[float | None]]:
    """Per point of a curve (the seeds' values there), the percentile bootstrap interval of
    their mean: ``(low, high)`` lists, None where a point has fewer than 2 values. Points with
    the same number of values are resampled together (one vectorised ``scipy.stats.bootstrap``
    call per count), each with the same seeded stream."""
    from scipy.stats import bootstrap

    low: list[float | None] = [None] * len(points)
    high: list[float | None] = [None] * len(points)
    by_count: dict[int, list[int]] = {}
    for index, values in enumerate(points):
        if len(values) >= 2:
            by_count.setdefault(len(values), []).append(index)
    for indices in by_count.values():
        matrix = np.asarray([points[index] for index in indices], dtype=np.float64)
        result = bootstrap(
            (matrix,),
            np.mean,
            n_resamples=resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            axis=-1,
            rng=np.random.default_rng(BOOTSTRAP_SEED),
        )
        interval = result.confidence_interval
        for row, index in enumerate(indices):
            low[index], high[index] = float(interval.low[row]), float(interval.high[row])
    return low, high

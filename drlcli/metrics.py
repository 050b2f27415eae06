"""The metric schema, cross-learner aggregation, and the canonical metrics CSV.

Every name written to the CSV is registered here (fail closed on unknown names), except the open
family ``Loss/aux_<name>`` of actor-provided auxiliary losses (ADR-0017).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from drlcli.errors import TrainingError

# name -> meaning; the CSV columns follow this order.
METRIC_SCHEMA: dict[str, str] = {
    "round": "training round, 1-based, counted across resumes",
    "env_steps": "environment steps collected so far, all rollout actors together",
    "wall_time_s": "seconds since training started (resumes add to the stored time)",
    "sps": "environment steps per second over this round, training included",
    "episodes": "episodes finished this round",
    "episode_return_mean": "mean undiscounted return of the episodes finished this round",
    "episode_return_min": "lowest such return",
    "episode_return_max": "highest such return",
    "episode_length_mean": "mean length of the episodes finished this round",
    # PPO
    "Loss/policy": "clipped surrogate loss (negated L^CLIP), minibatch mean",
    "Loss/value": "0.5 * squared value error, minibatch mean",
    "Loss/entropy": "policy entropy, minibatch mean",
    "approx_kl": "KL(old || updated policy) on the round's data, k3 estimator",
    "clip_fraction": "fraction of the round's samples whose final ratio is outside 1 +- clip",
    "grad_norm": "global gradient norm before clipping, minibatch mean",
    "explained_variance": "1 - Var(returns - V) / Var(returns) after the update",
    "learning_rate": "optimiser step size this round",
    "epochs": "epochs started this round (KL early stop may cut the last)",
    "buffer_size": "PPO: samples trained on this round; FlashSAC: replay size; all learners",
    # FlashSAC
    "Loss/critic": "cross-entropy of the critic against the projected target, update mean",
    "Loss/actor": "E[alpha log pi - min Q] (without aux losses), actor-update mean",
    "Loss/temperature": "alpha * (H(pi) - H_target), actor-update mean",
    "temperature": "entropy temperature alpha, actor-update mean",
    "entropy": "policy entropy estimate -E[log pi], actor-update mean",
    "q_mean": "mean predicted Q of replayed (s, a) in scaled-reward units",
    "updates": "gradient updates this round, per learner",
    "updates_per_second": "gradient updates per second of update time, per learner",
}
COMMON_COLUMNS: tuple[str, ...] = (
    "round",
    "env_steps",
    "wall_time_s",
    "sps",
    "episodes",
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_length_mean",
)
ALGORITHM_COLUMNS: dict[str, tuple[str, ...]] = {
    "ppo": (
        "Loss/policy",
        "Loss/value",
        "Loss/entropy",
        "approx_kl",
        "clip_fraction",
        "grad_norm",
        "explained_variance",
        "learning_rate",
        "epochs",
        "buffer_size",
    ),
    "flash_sac": (
        "Loss/critic",
        "Loss/actor",
        "Loss/temperature",
        "temperature",
        "entropy",
        "q_mean",
        "learning_rate",
        "updates",
        "updates_per_second",
        "buffer_size",
    ),
}
OPEN_FAMILIES: tuple[str, ...] = ("Loss/aux_",)
TIME_COLUMNS: frozenset[str] = frozenset({"wall_time_s", "sps"})
# Aggregated across learners by sum; every other learner metric is averaged.
SUMMED_ACROSS_LEARNERS: frozenset[str] = frozenset({"buffer_size"})


def metric_columns(algo: str, aux_loss_names: Sequence[str] = ()) -> list[str]:
    """The CSV columns of a run: common, the algorithm's, then ``Loss/aux_<name>``."""
    aux = [f"Loss/aux_{name}" for name in sorted(aux_loss_names)]
    columns = [*COMMON_COLUMNS, *ALGORITHM_COLUMNS[algo], *aux]
    check_metric_names(columns)
    return columns


def check_metric_names(names: Iterable[str]) -> None:
    """Raise TrainingError for a name neither registered nor in an open family."""
    for name in names:
        if name not in METRIC_SCHEMA and not name.startswith(OPEN_FAMILIES):
            raise TrainingError(f"metric {name!r} is not in the metric schema (drlcli/metrics.py)")


def average_metrics(per_learner: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Aggregate the metrics of all learners: mean per name (sum for ``buffer_size``).

    Every learner must report the same names: a differing set (for example an aux loss that
    appears on one learner only) is an error, not silently dropped.
    """
    if not per_learner:
        raise ValueError("average_metrics: no learner metrics")
    names = list(per_learner[0])
    for index, metrics in enumerate(per_learner[1:], start=1):
        if set(metrics) != set(names):
            raise TrainingError(
                f"learner {index} reported metrics {sorted(metrics)}, learner 0 {sorted(names)}"
            )
    aggregated = {}
    for name in names:
        values = [float(metrics[name]) for metrics in per_learner]
        total = math.fsum(values)
        aggregated[name] = total if name in SUMMED_ACROSS_LEARNERS else total / len(values)
    return aggregated


class MetricsWriter:
    """Appends one row per round to the CSV at ``path``.

    A fresh run truncates the file; a resumed run appends and keeps the existing header. Each
    row is flushed so a crash loses at most the round in progress.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], append: bool = False):
        self.path = Path(path)
        self.columns = list(columns)
        check_metric_names(self.columns)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if append and self.path.exists() and self.path.stat().st_size > 0:
            with self.path.open(newline="") as existing:
                header = next(csv.reader(existing), [])
            if header != self.columns:
                raise TrainingError(
                    f"{self.path}: existing metrics columns differ from this run's; move the "
                    "file away or set a new metrics_path to resume"
                )
            self._file = self.path.open("a", newline="")
            self._writer = csv.writer(self._file)
        else:
            self._file = self.path.open("w", newline="")
            self._writer = csv.writer(self._file)
            self._writer.writerow(self.columns)
            self._file.flush()

    def write(self, row: Mapping[str, float | int]) -> None:
        """Write one round; a name outside the columns is an error (fail closed)."""
        unknown = set(row) - set(self.columns)
        if unknown:
            check_metric_names(unknown)
            raise TrainingError(
                f"metrics {sorted(unknown)} appeared after training started; the set of "
                "metric names (aux losses included) must not change during training"
            )
        self._writer.writerow([_format(row.get(column)) for column in self.columns])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _format(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value) if not value.is_integer() else str(int(value))
    return str(value)


def read_metrics(path: str | Path) -> list[dict[str, str]]:
    """The CSV rows as dicts of strings (empty string where a value is missing)."""
    with Path(path).open(newline="") as handle:
        return list(csv.DictReader(handle))

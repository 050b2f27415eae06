"""The metric schema: every name a run's metrics CSV may hold, with its meaning, and how the
learners' metrics of one round combine into its row.

Every name written to the CSV is registered (fail closed on unknown names): the common columns
here, each algorithm's in its registry entry, and the open family ``Loss/aux_<name>`` of
actor-provided auxiliary losses (docs/adr/0017-custom-policy-actors.md). The columns are fixed
when a run starts (``metric_columns``); ``metrics/csv_file.py`` refuses a row with another name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from drlcli.algos.entry_types import Algorithm
from drlcli.errors import TrainingError

# name -> meaning of the columns every run writes, in CSV order; each algorithm's registry
# entry (Algorithm.metrics) declares the columns that follow.
COMMON_METRICS: dict[str, str] = {
    "round": "training round, 1-based, counted across resumes",
    "env_steps": "environment steps collected so far, all rollout actors together",
    "wall_time_s": "seconds since training started (resumes add to the stored time)",
    "sps": "environment steps per second over this round, training included",
    "episodes": "episodes finished this round",
    "episode_return_mean": "mean undiscounted return of the episodes finished this round",
    "episode_return_min": "lowest such return",
    "episode_return_max": "highest such return",
    "episode_length_mean": "mean length of the episodes finished this round",
    "rollout_actor_restarts": "rollout-actor processes that died this round and were restarted",
}
# Written when evaluation is periodic (config evaluation.interval_env_steps), on the rows of the
# rounds in which an evaluation finished.
EVALUATION_METRICS: dict[str, str] = {
    "eval_return_mean": "mean return of the deterministic evaluation episodes",
    "eval_return_std": "their standard deviation",
    "eval_episode_length_mean": "their mean length",
    "eval_env_steps": "the training env step of the evaluated weights",
}
# Written when the task reports success (drlcli/success.py); eval_success_rate also needs
# periodic evaluation.
SUCCESS_METRICS: dict[str, str] = {
    "success_rate": "fraction of the episodes finished this round that succeeded",
    "eval_success_rate": "fraction of the deterministic evaluation episodes that succeeded",
}
OPEN_FAMILIES: tuple[str, ...] = ("Loss/aux_",)
# Columns measured in wall-clock time: they differ between two runs of one seed.
TIME_COLUMNS: frozenset[str] = frozenset({"wall_time_s", "sps", "updates_per_second"})
# Aggregated across learners by sum; every other learner metric is averaged.
SUMMED_ACROSS_LEARNERS: frozenset[str] = frozenset({"buffer_size"})


def metric_schema(algorithm: Algorithm) -> dict[str, str]:
    """Every registered name of a run of ``algorithm`` with its meaning."""
    return {**COMMON_METRICS, **EVALUATION_METRICS, **SUCCESS_METRICS, **algorithm.metrics}


def metric_columns(
    algorithm: Algorithm,
    aux_loss_names: Sequence[str] = (),
    evaluation: bool = False,
    success: bool = False,
) -> list[str]:
    """The CSV columns of a run: common, ``success_rate`` (a task that reports success),
    evaluation's (when periodic, with ``eval_success_rate`` if success), the algorithm's, then
    ``Loss/aux_<name>`` sorted."""
    aux = [f"{OPEN_FAMILIES[0]}{name}" for name in sorted(aux_loss_names)]
    columns = [
        *COMMON_METRICS,
        *(["success_rate"] if success else ()),
        *(EVALUATION_METRICS if evaluation else ()),
        *(["eval_success_rate"] if evaluation and success else ()),
        *algorithm.metrics,
        *aux,
    ]
    check_metric_names(columns, algorithm)
    return columns


def check_metric_names(names: Iterable[str], algorithm: Algorithm) -> None:
    """Raise TrainingError for a name neither registered for ``algorithm`` nor in an open
    family."""
    schema = metric_schema(algorithm)
    for name in names:
        if name not in schema and not name.startswith(OPEN_FAMILIES):
            raise TrainingError(
                f"metric {name!r} is not in the {algorithm.name} metric schema "
                "(drlcli/metrics/schema.py and the algorithm's registry entry)"
            )


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

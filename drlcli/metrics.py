"""The metric schema, cross-learner aggregation, and the canonical metrics CSV.

Every name written to the CSV is registered (fail closed on unknown names): the common columns
here, each algorithm's in its registry entry, and the open family ``Loss/aux_<name>`` of
actor-provided auxiliary losses (docs/adr/0017-custom-policy-actors.md). The columns are fixed
when a run starts; a row with another name is refused.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from drlcli.algos.algorithm import Algorithm
from drlcli.atomic import atomic_output, storage_error
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
                f"metric {name!r} is not in the {algorithm.name} metric schema (drlcli/metrics.py "
                "and the algorithm's registry entry)"
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


class MetricsWriter:
    """Appends one row per round to the CSV at ``path``.

    A fresh run truncates the file. A resumed run (``append``) keeps the existing rows up to
    ``resume_round``, the round its checkpoint stored: rows of later rounds (written before a
    crash, their checkpoint never was) and a torn last line (a kill in the middle of a write)
    are dropped, so the resumed rounds are neither duplicated nor missing. A resumed run with
    more columns (evaluation turned on, say) rewrites the earlier rows under its header, their
    new cells empty. Every rewrite is atomic. Each row is flushed, so a crash loses at most the
    round in progress.

    Attributes:
        dropped_rounds: the rounds of the rows a resume dropped (empty otherwise).
    """

    def __init__(
        self,
        path: str | Path,
        columns: Sequence[str],
        append: bool = False,
        resume_round: int | None = None,
    ):
        self.path = Path(path)
        self.columns = list(columns)
        self.dropped_rounds: list[str] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if append and self.path.exists() and self.path.stat().st_size > 0:
            header, rows, torn = _read_complete_rows(self.path)
            if header != self.columns and not set(header) < set(self.columns):
                raise TrainingError(
                    f"{self.path}: existing metrics columns differ from this run's; move the "
                    "file away or set a new metrics_path to resume"
                )
            kept = [row for row in rows if _round_at_most(row, resume_round)]
            self.dropped_rounds = [
                row.get("round", "") for row in rows if not _round_at_most(row, resume_round)
            ]
            if header != self.columns or torn or len(kept) != len(rows):
                self._rewrite(kept)
            self._file = self.path.open("a", newline="")
            self._writer = csv.writer(self._file)
        else:
            try:
                self._file = self.path.open("w", newline="")
                self._writer = csv.writer(self._file)
                self._writer.writerow(self.columns)
                self._file.flush()
            except OSError as error:
                raise storage_error(self.path, error) from None

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        with atomic_output(self.path) as temp, Path(temp).open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(self.columns)
            for row in rows:
                writer.writerow([row.get(column, "") for column in self.columns])

    def write(self, row: Mapping[str, float | int]) -> None:
        """Write one round; a name outside the columns is an error (fail closed)."""
        unknown = sorted(set(row) - set(self.columns))
        if unknown:
            raise TrainingError(
                f"metrics {unknown} are not among this run's columns: the set of metric names "
                "(aux losses included) must not change during training"
            )
        try:
            self._writer.writerow([_format(row.get(column)) for column in self.columns])
            self._file.flush()
        except OSError as error:
            raise storage_error(self.path, error) from None

    def close(self) -> None:
        self._file.close()


def _format(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value) if not value.is_integer() else str(int(value))
    return str(value)


def _read_complete_rows(path: Path) -> tuple[list[str], list[dict[str, str]], bool]:
    """(header, rows, torn): the rows of complete lines; ``torn`` when the file ends inside a
    line (a write cut short), which is left out."""
    text = path.read_text()
    torn = not text.endswith("\n")
    if torn:
        text = text[: text.rfind("\n") + 1]
    reader = csv.reader(text.splitlines())
    header = next(reader, [])
    rows = [dict(zip(header, cells, strict=False)) for cells in reader if len(cells) == len(header)]
    return header, rows, torn


def _round_at_most(row: Mapping[str, str], last_round: int | None) -> bool:
    if last_round is None:
        return True
    try:
        return int(row.get("round", "")) <= last_round
    except ValueError:  # not a row drl wrote
        return False


def read_metrics(path: str | Path) -> list[dict[str, str]]:
    """The CSV rows as dicts of strings (empty string where a value is missing)."""
    with Path(path).open(newline="") as handle:
        return list(csv.DictReader(handle))

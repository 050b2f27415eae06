"""The runs of seed groups as ``drl compare`` and the dashboard read them: each run's final
deterministic evaluation (the one in its final checkpoint; without a checkpoint, the one of its
final-evaluation record beside the CSV; else the last periodic evaluation of its metrics CSV)
and its curve of periodic evaluations (``SeedRun``), and per seed group the IQM of the final
evaluations with its interval (``group_statistics``, the dashboard's runs table).

A final-evaluation record, ``final_evaluation_<name>.json`` beside ``metrics_<name>.csv``, is
what a study commits instead of a checkpoint (``final_evaluation_record``): a few numbers,
where the checkpoint is megabytes of weights.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drlcli.errors import CheckpointError, UsageError
from drlcli.metrics.runs import MalformedCsv, Run, find_runs, read_rows
from drlcli.seed_statistics import aggregate, bootstrap_interval

FINAL_EVALUATION = "final evaluation"
LAST_PERIODIC = "last periodic evaluation"
RECORD_FIELDS = ("env_id", "seed", "return_mean", "env_steps")


def final_evaluation_record(checkpoint_path: Path) -> dict[str, Any]:
    """The final-evaluation record of a finished run: its task, seed and the final
    evaluation its checkpoint holds (``return_mean``, ``env_steps`` and the rest).

    Raises:
        CheckpointError: the checkpoint is damaged.
        ValueError: it holds no final evaluation.
    """
    from drlcli.checkpoints.files import read_checkpoint

    checkpoint = read_checkpoint(checkpoint_path)
    if checkpoint.evaluation is None:
        raise ValueError(f"{checkpoint_path}: the checkpoint holds no final evaluation")
    seed = (checkpoint.config.get("env") or {}).get("seed")
    return {"env_id": checkpoint.env.id, "seed": seed, **checkpoint.evaluation}


def record_path(csv_path: Path) -> Path:
    """Where the final-evaluation record of the run of ``metrics_<name>.csv`` lies: beside
    it, ``final_evaluation_<name>.json``."""
    return csv_path.parent / f"final_evaluation_{csv_path.stem.removeprefix('metrics_')}.json"


def _read_record(path: Path) -> tuple[float, int, str, int | None]:
    """``(return_mean, env_steps, env_id, seed)`` of a final-evaluation record.

    Raises:
        UsageError: the file is not one.
    """
    try:
        record = json.loads(path.read_text())
        values = [record[field] for field in RECORD_FIELDS]
        final, steps = float(values[2]), int(values[3])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(
            f"{path}: not a final-evaluation record ({type(error).__name__}: {error}); it "
            f"holds {', '.join(RECORD_FIELDS)}"
        ) from None
    seed = values[1]
    return final, steps, str(values[0]), None if seed is None else int(seed)


@dataclass(frozen=True)
class SeedRun:
    """One run of a group: its final deterministic evaluation return (and where it comes
    from), its task and seed where its checkpoint records them, and its periodic evaluations
    (``curve_steps`` env steps ``[E]``, ``curve_returns`` ``[E]``)."""

    name: str
    group: str
    csv_path: Path
    final_return: float
    final_source: str
    final_env_steps: int
    task: str | None
    seed: int | None
    curve_steps: np.ndarray
    curve_returns: np.ndarray


def find_seed_runs(paths: Sequence[Path]) -> list[SeedRun]:
    """The runs that ``paths`` name: a folder (every run under it), a metrics CSV or a
    checkpoint (the run it belongs to). A search's trials of one seed each, which differ by
    more than a seed, are left out; a trial of several seeds is a group, and so is each
    re-trained candidate.

    Raises:
        UsageError: a path that does not exist or holds no run, or a run without any
            deterministic evaluation or with a damaged CSV or checkpoint.
    """
    chosen: dict[Path, Run] = {}
    for path in paths:
        for run in _runs_at(Path(path)):
            if run.group_kind == "seeds":
                chosen.setdefault(run.csv_path, run)
    return [_read_run(run) for run in chosen.values()]


def _runs_at(path: Path) -> list[Run]:
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if path.is_dir():
        runs = find_runs([path])
        if not runs:
            raise UsageError(
                f"{path}: no drl run under this folder (a run is a metrics CSV drl train wrote)"
            )
        return runs
    real = path.resolve()
    for run in find_runs([real.parent]):
        if real in (run.csv_path, run.checkpoint, run.best_checkpoint):
            return [run]
    raise UsageError(
        f"{path}: not a run's metrics CSV or checkpoint (give the CSV drl train wrote, its "
        "model_<name>.pt, or their folder)"
    )


def _read_run(run: Run) -> SeedRun:
    try:
        chunk = read_rows(run.csv_path)
    except (MalformedCsv, OSError) as error:
        raise UsageError(f"{run.csv_path}: not a readable metrics CSV: {error}") from None
    steps, returns = [], []
    if "eval_return_mean" in chunk.columns and "eval_env_steps" in chunk.columns:
        at_step = chunk.columns.index("eval_env_steps")
        at_return = chunk.columns.index("eval_return_mean")
        for row in chunk.rows:
            if row[at_return] is not None and row[at_step] is not None:
                steps.append(int(row[at_step]))
                returns.append(float(row[at_return]))
    final, source, final_steps, task, seed = None, LAST_PERIODIC, None, None, None
    if run.checkpoint is not None:
        from drlcli.checkpoints.files import read_checkpoint

        try:
            checkpoint = read_checkpoint(run.checkpoint)
        except CheckpointError as error:
            raise UsageError(f"{run.name}: {error}") from None
        task = checkpoint.env.id
        seed = (checkpoint.config.get("env") or {}).get("seed")
        if checkpoint.evaluation is not None:
            evaluation = checkpoint.evaluation
            final = float(evaluation["return_mean"])
            final_steps = int(evaluation["env_steps"])
            source = FINAL_EVALUATION
    elif record_path(run.csv_path).is_file():
        final, final_steps, task, seed = _read_record(record_path(run.csv_path))
        source = FINAL_EVALUATION
    if final is None and returns:
        final, final_steps = returns[-1], steps[-1]
    if final is not None and not math.isfinite(final):
        raise UsageError(
            f"{run.csv_path}: run {run.name}'s final evaluation return is {final} ({source}), "
            "which no statistic can use: its task's rewards were not finite, or its files are "
            "damaged; leave the run out"
        )
    if final is None:
        raise UsageError(
            f"{run.csv_path}: run {run.name} has no deterministic evaluation (none in its "
            "checkpoint, no eval_return_mean in its CSV): train it with an evaluation section"
        )
    if source == FINAL_EVALUATION and (not steps or final_steps > steps[-1]):
        steps.append(final_steps)
        returns.append(final)
    return SeedRun(
        name=run.name,
        group=run.group,
        csv_path=run.csv_path,
        final_return=final,
        final_source=source,
        final_env_steps=final_steps,
        task=task,
        seed=seed,
        curve_steps=np.asarray(steps, dtype=np.int64),
        curve_returns=np.asarray(returns, dtype=np.float64),
    )


def group_statistics(runs: Sequence[Run]) -> dict[str, dict[str, Any]]:
    """For the dashboard's runs table: per seed group of ``runs`` with at least 2 runs that
    have a deterministic evaluation, the IQM of their final evaluations and its 95% bootstrap
    interval (runs still training count their latest periodic evaluation; runs with none, or
    unreadable, are left out, as are a search's trials)."""
    by_group: dict[str, list[SeedRun]] = {}
    for run in runs:
        if run.group_kind != "seeds":
            continue
        try:
            seed_run = _read_run(run)
        except UsageError:
            continue
        by_group.setdefault(run.group, []).append(seed_run)
    statistics = {}
    for group, members in by_group.items():
        if len(members) < 2:
            continue
        finals = [member.final_return for member in members]
        interval = bootstrap_interval([finals], "iqm")
        statistics[group] = {
            "runs": len(members),
            "iqm": float(aggregate(finals, "iqm")),
            "low": interval.low,
            "high": interval.high,
            "final": all(member.final_source == FINAL_EVALUATION for member in members),
        }
    return statistics

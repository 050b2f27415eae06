"""``drl compare``: groups of seeds side by side, with the statistics of ``seed_statistics``.

A group is the runs of one config on several seeds, as the dashboard groups them (names that
differ only by a ``_seed<N>`` ending, or one re-trained candidate of a ``drl tune`` search).
Each run contributes its final deterministic evaluation (the one in its final checkpoint, or
the last periodic evaluation of its metrics CSV when the checkpoint has none) and its curve of
periodic evaluations.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drlcli.dashboard.runs import MalformedCsv, Run, find_runs, read_rows
from drlcli.errors import CheckpointError, UsageError
from drlcli.seed_statistics import (
    CONFIDENCE,
    RESAMPLES,
    Interval,
    aggregate,
    bootstrap_interval,
    improvement_interval,
    probability_of_improvement,
)

CURVE_RESAMPLES = 2_000  # per evaluation point of a curve: a band, not a headline figure
FINAL_EVALUATION = "final evaluation"
LAST_PERIODIC = "last periodic evaluation"


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


@dataclass(frozen=True)
class GroupReport:
    """A group's statistics over its runs' final returns; ``improvement``: the probability
    that a run of this group beats one of the reference group (the first), with its interval
    (None for the reference itself)."""

    group: str
    task: str | None
    runs: tuple[SeedRun, ...]
    median: float
    iqm: float
    iqm_interval: Interval
    mean: float
    mean_interval: Interval
    improvement: tuple[float, Interval] | None

    def to_json(self) -> dict[str, Any]:
        improvement = None
        if self.improvement is not None:
            value, interval = self.improvement
            improvement = {"value": value, "interval": [interval.low, interval.high]}
        return {
            "group": self.group,
            "task": self.task,
            "runs": [
                {
                    "name": run.name,
                    "seed": run.seed,
                    "final_return": run.final_return,
                    "final_source": run.final_source,
                    "env_steps": run.final_env_steps,
                    "metrics_csv": str(run.csv_path),
                }
                for run in self.runs
            ],
            "median": self.median,
            "iqm": self.iqm,
            "iqm_interval": [self.iqm_interval.low, self.iqm_interval.high],
            "mean": self.mean,
            "mean_interval": [self.mean_interval.low, self.mean_interval.high],
            "probability_of_improvement": improvement,
        }


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
    if final is None and returns:
        final, final_steps = returns[-1], steps[-1]
    if final is None or not math.isfinite(final):
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


def group_seed_runs(runs: Sequence[SeedRun]) -> dict[str, list[SeedRun]]:
    """Runs by group, groups in the order their first run came.

    Raises:
        UsageError: no run; a group of one run (no interval from one seed); a group whose runs
            trained different tasks (their returns are not on one scale).
    """
    if not runs:
        raise UsageError("no run to compare (a search's trials are not seed groups)")
    groups: dict[str, list[SeedRun]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    for group, members in groups.items():
        if len(members) < 2:
            raise UsageError(
                f"group {group!r} has one run ({members[0].csv_path}): an interval needs at "
                "least 2 seeds; train more seeds (names ending _seed<N>) or leave it out"
            )
        tasks = sorted({run.task for run in members if run.task is not None})
        if len(tasks) > 1:
            raise UsageError(
                f"group {group!r} mixes tasks {', '.join(tasks)}: their returns are not on one "
                "scale; compare each task's runs apart"
            )
    return groups


def compare_groups(
    groups: dict[str, list[SeedRun]], resamples: int = RESAMPLES
) -> list[GroupReport]:
    """Each group's median, IQM and mean of final returns with 95% bootstrap intervals, and
    (after the first) its probability of improvement over the first group."""
    reports = []
    reference: list[float] | None = None
    for group, members in groups.items():
        finals = [run.final_return for run in members]
        improvement = None
        if reference is not None:
            improvement = (
                float(probability_of_improvement(finals, reference)),
                improvement_interval(finals, reference, resamples=resamples),
            )
        else:
            reference = finals
        tasks = {run.task for run in members} - {None}
        reports.append(
            GroupReport(
                group=group,
                task=next(iter(tasks)) if tasks else None,
                runs=tuple(members),
                median=float(aggregate(finals, "median")),
                iqm=float(aggregate(finals, "iqm")),
                iqm_interval=bootstrap_interval([finals], "iqm", resamples=resamples),
                mean=float(aggregate(finals, "mean")),
                mean_interval=bootstrap_interval([finals], "mean", resamples=resamples),
                improvement=improvement,
            )
        )
    return reports


@dataclass(frozen=True)
class GroupCurve:
    """A group's evaluation curve: at each env step ``steps`` ``[P]`` the IQM over its runs and
    the bootstrap interval of it (``low``, ``high`` ``[P]``)."""

    steps: np.ndarray
    iqm: np.ndarray
    low: np.ndarray
    high: np.ndarray


def group_curve(members: Sequence[SeedRun], resamples: int = CURVE_RESAMPLES) -> GroupCurve:
    """The runs' evaluations on the env steps any of them evaluated at, inside the range all
    of them cover (each run's curve interpolated linearly between its own evaluations)."""
    start = max(int(run.curve_steps[0]) for run in members)
    end = min(int(run.curve_steps[-1]) for run in members)
    every = np.unique(np.concatenate([run.curve_steps for run in members]))
    steps = every[(every >= start) & (every <= end)]
    if steps.size == 0:  # no common range: each run's final evaluation
        steps = np.asarray([max(run.final_env_steps for run in members)])
        values = np.asarray([[run.final_return for run in members]])
    else:
        values = np.stack(
            [np.interp(steps, run.curve_steps, run.curve_returns) for run in members], axis=1
        )
    intervals = [bootstrap_interval([point], "iqm", resamples=resamples) for point in values]
    return GroupCurve(
        steps=steps,
        iqm=aggregate(values, "iqm", axis=1),
        low=np.asarray([interval.low for interval in intervals]),
        high=np.asarray([interval.high for interval in intervals]),
    )


def write_curves_png(groups: dict[str, list[SeedRun]], path: Path) -> None:
    """The groups' evaluation curves (IQM over seeds) with their 95% bootstrap bands, as a PNG.

    Raises:
        UsageError: the PNG cannot be written there.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), dpi=120, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for group, members in groups.items():
        curve = group_curve(members)
        label = f"{group} ({len(members)} seeds)"
        if curve.steps.size == 1:
            axes.errorbar(
                curve.steps,
                curve.iqm,
                yerr=[curve.iqm - curve.low, curve.high - curve.iqm],
                fmt="o",
                capsize=4,
                label=label,
            )
            continue
        (line,) = axes.plot(curve.steps, curve.iqm, label=label)
        axes.fill_between(curve.steps, curve.low, curve.high, color=line.get_color(), alpha=0.2)
    axes.set_xlabel("env steps")
    axes.set_ylabel("deterministic evaluation return")
    axes.set_title(
        f"IQM over seeds, {CONFIDENCE:.0%} stratified-bootstrap confidence band", fontsize=10
    )
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path)
    except OSError as error:
        raise UsageError(f"{path}: cannot write the plot: {error.strerror or error}") from None


def write_json(reports: Sequence[GroupReport], path: Path, resamples: int = RESAMPLES) -> None:
    """The reports as JSON (``-``: standard output).

    Raises:
        UsageError: the file cannot be written.
    """
    document = {
        "confidence": CONFIDENCE,
        "resamples": resamples,
        "reference_group": reports[0].group if reports else None,
        "groups": [report.to_json() for report in reports],
    }
    text = json.dumps(document, indent=2) + "\n"
    if str(path) == "-":
        import sys

        sys.stdout.write(text)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        raise UsageError(f"{path}: cannot write the JSON: {error.strerror or error}") from None


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

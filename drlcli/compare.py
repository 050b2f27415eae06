"""``drl compare``: groups of seeds side by side, with the statistics of ``seed_statistics``.

A group is the runs of one config on several seeds, as the dashboard groups them (names that
differ only by a ``_seed<N>`` ending, or one re-trained candidate of a ``drl tune`` search).
Each run contributes its final deterministic evaluation (the one in its final checkpoint, or
the last periodic evaluation of its metrics CSV when the checkpoint has none) and its curve of
periodic evaluations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drlcli.errors import UsageError
from drlcli.metrics.seed_runs import SeedRun
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


@dataclass(frozen=True)
class GroupReport:
    """A group's statistics over its runs' final returns; ``improvement``: the probability
    that a run of this group beats one of its ``reference`` group's, with its interval (both
    None for a reference itself: the first group, and the first of each other task)."""

    group: str
    task: str | None
    runs: tuple[SeedRun, ...]
    median: float
    iqm: float
    iqm_interval: Interval
    mean: float
    mean_interval: Interval
    improvement: tuple[float, Interval] | None
    reference: str | None = None

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
            "reference": self.reference,
        }


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
                "least 2 seeds; train more (drl train CONFIG --seed N) or leave it out"
            )
        tasks = sorted({run.task for run in members if run.task is not None})
        if len(tasks) > 1:
            raise UsageError(
                f"group {group!r} mixes tasks {', '.join(tasks)}: their returns are not on one "
                "scale; compare each task's runs apart"
            )
    return groups


def with_reference(groups: dict[str, list[SeedRun]], reference: str) -> dict[str, list[SeedRun]]:
    """``groups`` with ``reference`` first (the group the others' probability of improvement is
    measured against), the others in their order.

    Raises:
        UsageError: no group of that name (the message lists them).
    """
    if reference not in groups:
        raise UsageError(
            f"--reference {reference!r}: no such group; the groups are {', '.join(groups)}"
        )
    return {reference: groups[reference]} | {
        name: members for name, members in groups.items() if name != reference
    }


def group_task(members: Sequence[SeedRun]) -> str | None:
    """The task a group trained, where a run's checkpoint or record names it."""
    tasks = {run.task for run in members} - {None}
    return next(iter(tasks)) if tasks else None


def reference_groups(groups: dict[str, list[SeedRun]]) -> dict[str, str]:
    """Each group's reference: the first group (in order) that may be on its task. A return is
    on its task's scale, so a group of a known task is measured against the first group of that
    task (or of an unknown one), never against another task's; the first group is its own."""
    tasks = {group: group_task(members) for group, members in groups.items()}
    references = {}
    for group, task in tasks.items():
        references[group] = next(
            other
            for other, other_task in tasks.items()
            if task is None or other_task is None or other_task == task
        )
    return references


def compare_groups(
    groups: dict[str, list[SeedRun]], resamples: int = RESAMPLES
) -> list[GroupReport]:
    """Each group's median, IQM and mean of final returns with 95% bootstrap intervals, and its
    probability of improvement over its reference (``reference_groups``: the first group, or
    the first of the group's own task)."""
    references = reference_groups(groups)
    reports = []
    for group, members in groups.items():
        finals = [run.final_return for run in members]
        improvement, reference = None, references[group]
        if reference != group:
            baseline = [run.final_return for run in groups[reference]]
            improvement = (
                float(probability_of_improvement(finals, baseline)),
                improvement_interval(finals, baseline, resamples=resamples),
            )
        reports.append(
            GroupReport(
                group=group,
                task=group_task(members),
                runs=tuple(members),
                median=float(aggregate(finals, "median")),
                iqm=float(aggregate(finals, "iqm")),
                iqm_interval=bootstrap_interval([finals], "iqm", resamples=resamples),
                mean=float(aggregate(finals, "mean")),
                mean_interval=bootstrap_interval([finals], "mean", resamples=resamples),
                improvement=improvement,
                reference=None if reference == group else reference,
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

"""Terminal display of a training run: a rich progress bar, or plain lines with ``--quiet``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

# Diagnostics added to a --quiet log line when the algorithm reports them.
_LOG_EXTRAS = (
    "success_rate",
    "eval_return_mean",
    "eval_success_rate",
    "approx_kl",
    "Loss/value",
    "Loss/critic",
    "temperature",
    "updates_per_second",
)


def _fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


class TrainingProgress:
    """Shows env steps / total, SPS, ETA, the latest mean episode return and the latest
    deterministic evaluation return (with the env step it belongs to)."""

    def __init__(self, total_env_steps: int, completed: int, quiet: bool, console: Console):
        self.quiet = quiet
        self.console = console
        self.total = total_env_steps
        self.restarts = 0  # rollout-actor restarts shown so far
        self._bar: Progress | None = None
        if not quiet:
            self._bar = Progress(
                TextColumn("[bold]training"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("env steps"),
                TextColumn("{task.fields[sps]} sps"),
                TextColumn("return {task.fields[ret]}"),
                TextColumn("eval {task.fields[evaluation]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._task = self._bar.add_task(
                "train",
                total=total_env_steps,
                completed=completed,
                sps="-",
                ret="-",
                evaluation="-",
            )

    def __enter__(self) -> TrainingProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, row: dict[str, Any], total_rounds: int) -> None:
        restarts = row.get("rollout_actor_restarts") or 0
        if restarts:
            self.restarts += restarts
            self.console.print(
                f"round {row['round']}: {restarts} rollout-actor process(es) died and Ray "
                f"restarted them ({self.restarts} so far this run); the round went on",
                style="yellow",
                highlight=False,
            )
        if self._bar is not None:
            fields = {}
            if row.get("eval_return_mean") is not None:
                fields["evaluation"] = (
                    f"{row['eval_return_mean']:.1f} @{int(row['eval_env_steps'])}"
                )
            self._bar.update(
                self._task,
                completed=row["env_steps"],
                sps=_fmt(row["sps"], ".0f"),
                ret=_fmt(row["episode_return_mean"]),
                **fields,
            )
            return
        extras = " ".join(
            f"{name} {row[name]:.4g}" for name in _LOG_EXTRAS if row.get(name) is not None
        )
        self.console.print(
            f"round {row['round']}/{total_rounds} env_steps {row['env_steps']} "
            f"sps {row['sps']:.0f} return {_fmt(row['episode_return_mean'])} {extras}",
            highlight=False,
            soft_wrap=True,
        )

    def summary(self, summary: Any) -> None:
        table = Table(title="training finished", show_header=False)
        table.add_column("what", style="bold")
        table.add_column("value")
        table.add_row("rounds", str(summary.rounds))
        table.add_row("env steps", str(summary.env_steps))
        table.add_row("wall time", f"{summary.wall_time_s:.1f} s")
        table.add_row("last mean return", _fmt(summary.last_return))
        if self.restarts:
            table.add_row("rollout-actor restarts", str(self.restarts))
        final = summary.final_evaluation
        if final is not None:
            table.add_row(
                "final evaluation",
                f"{final.return_mean:.1f} ± {final.return_std:.1f} over "
                f"{len(final.returns)} deterministic episodes"
                + ("" if final.success_rate is None else f", {final.success_rate:.0%} succeeded"),
            )
        table.add_row(f"best ({summary.best_criterion})", _fmt(summary.best_return))
        table.add_row("checkpoint", escape(str(summary.checkpoint_path)))
        if summary.best_checkpoint_path is not None:
            best = escape(str(summary.best_checkpoint_path))
        elif summary.best_return is None:
            best = "not written: no episode finished"
        else:  # resumed under another name, and no round beat the stored best
            best = f"not written: no round beat the resumed best {_fmt(summary.best_return)}"
        table.add_row("best checkpoint", best)
        table.add_row("metrics", escape(str(summary.metrics_path)))
        self.console.print(table)

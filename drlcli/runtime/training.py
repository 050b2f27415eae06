"""``drl train``: one run of any algorithm on a Ray topology, from its first check to its final
evaluation (``TrainingRun``).

The run checks everything it can before anything starts (``preflight``: the algorithm, the
task, the policy actor built once, the checkpoint to resume from), then starts, in this order
and on one exit stack: the signal handling (``StopRequest``), Ray, the metrics sinks, the
evaluator and the algorithm's round loop with its processes. ``RoundsRun`` trains the rounds:
the round loop (``RoundLoop``: sampling, statistics, training, synchronisation), then each
round's metrics row (``MetricsSinks``: the CSV, then any other), checkpoints (``Checkpointing``:
latest, best, replay) and due evaluation (``EvaluationRunner``). At the end, the final policy's
evaluation. A failure or a signal at any point closes what was started, in reverse order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from drlcli.algos.entry_types import Algorithm, OffPolicy, PPORounds, RoundPlan
from drlcli.atomic import remove_leftovers
from drlcli.checkpoints.checks import non_finite_tensors
from drlcli.checkpoints.record import BEST_BY_TRAINING_RETURN, Checkpoint, RunProgress
from drlcli.checkpoints.replay_file import replay_path
from drlcli.config import Config
from drlcli.errors import DrlError, StorageError, TrainingError, TrainingStopped
from drlcli.evaluation import EvaluationResult
from drlcli.metrics.csv_file import MetricsWriter
from drlcli.metrics.schema import metric_columns
from drlcli.runtime.checkpointing import Checkpointing, best_criterion
from drlcli.runtime.evaluation_runner import EvaluationRunner, evaluator_has_own_process
from drlcli.runtime.nodes import check_every_node
from drlcli.runtime.preflight import check_learner_device, preflight, resume_ignored_changes
from drlcli.runtime.probe import ProbedActor
from drlcli.runtime.progress import TrainingProgress
from drlcli.runtime.ray_session import ray_session
from drlcli.runtime.resources import process_resources
from drlcli.runtime.run_context import HasEvaluationHost, ReplaySaving, RunContext, WarmsUp
from drlcli.runtime.stop import (
    HANG_TIMEOUT_FLOOR_S,
    Phase,
    StopRequest,
    StopRule,
    first_stop_reason,
)
from drlcli.sinks import open_sinks
from drlcli.sinks.dispatch import MetricsSink, MetricsSinks
from drlcli.success import success_rate
from drlcli.topology import AvailableDevices
from drlcli.topology import topology_for_config as resolve_for


@dataclass(frozen=True)
class TrainingSummary:
    rounds: int
    env_steps: int
    wall_time_s: float
    best_return: float | None
    last_return: float | None
    checkpoint_path: Path
    best_checkpoint_path: Path | None  # None: not written (no finished episode beat the best)
    metrics_path: Path
    best_criterion: str = BEST_BY_TRAINING_RETURN  # what best_return measures
    final_evaluation: EvaluationResult | None = None  # of the final policy
    stopped_early: str | None = None  # the reason a stop rule ended the run before its plan


@dataclass(frozen=True)
class TrainOptions:
    """How ``train`` runs a config.

    Attributes:
        address: Ray cluster address; None starts (and stops) a local Ray.
        resume: a checkpoint to continue from (its actor semantics must match the config).
        resume_replay: also refill an off-policy run's replay buffer from
            ``<resume stem>_replay.npz`` (written with ``algo_params.save_replay_buffer: true``).
        quiet: one plain log line per round instead of the progress bar.
        console: where the progress and notes go.
        devices: override hardware detection (tests).
        metrics_sinks: where every metrics row also goes, after the CSV (``MetricsSink``): one
            that fails warns once in one line and is left out; the run goes on.
        stop_rules: judge each round's row once it is written (``StopRule``); the first that
            gives a reason ends the run there, with its final evaluation, as a finished run
            (``TrainingSummary.stopped_early``) that ``resume`` can continue.
        concurrent_runs: runs training side by side in this process's placement group (the
            seeds of a ``drl tune`` trial), each taking an equal share of it.
        evaluations_in_next_row: each periodic evaluation's result is waited for at the end
            of the round after the one whose weights it evaluates, so that the row that
            carries it, and the checkpoint written after that row, do not depend on the
            machine's load (a ``drl tune`` trial reports that checkpoint with the evaluation);
            otherwise a result is picked up by the first round end after it came back.
    """

    address: str | None = None
    resume: str | Path | None = None
    resume_replay: bool = False
    quiet: bool = False
    console: Console | None = None
    devices: AvailableDevices | None = None
    metrics_sinks: Sequence[MetricsSink] = ()
    stop_rules: Sequence[StopRule] = ()
    concurrent_runs: int = 1
    evaluations_in_next_row: bool = False


def train(config: Config, **options: Any) -> TrainingSummary:
    """Train ``config`` end to end (the keyword arguments are ``TrainOptions``'); returns what
    was written."""
    return TrainingRun(config, TrainOptions(**options)).run()


class TrainingRun:
    """One run, from its first check to its final evaluation. It owns everything it starts: one
    exit stack holds, in order, the signal handling, Ray, the metrics sinks, the evaluator and
    the round loop's processes, so that a failure or a signal at any point closes what was
    started (in reverse order) and the error says where to continue from.
    """

    def __init__(self, config: Config, options: TrainOptions) -> None:
        self.config, self.options = config, options
        self.console = options.console or Console()
        self.progress = RunProgress()
        self.stored: Checkpoint | None = None  # the checkpoint resumed from
        self.checkpointing: Checkpointing | None = None  # once the rounds can start
        self.reports_success = False  # the run has success columns (Preflight.reports_success)
        self.slowest_round_s = 0.0  # of this process's rounds, for the derived hang bound

    def run(self) -> TrainingSummary:
        """Train, from the first check to the final evaluation; every process it started is
        stopped however it ends.

        Raises:
            TrainingStopped: a signal stopped it (``StopRequest.error`` words how).
            TrainingError: a round failed, or a phase outlived ``hang_timeout_s``.
        """
        stop = StopRequest(self.console, self.config.stop_grace_s)
        ended_by: BaseException | None = None
        try:
            with stop, contextlib.ExitStack() as stack:
                stop.enter(Phase.STARTING, bound_s=self.hang_bound_s())
                try:
                    return self._train(stack, stop)
                except BaseException as error:
                    ended_by = error
                    stop.disarm()
                    raise
        except KeyboardInterrupt:
            if ended_by is not None and not isinstance(ended_by, KeyboardInterrupt):
                raise ended_by from None  # a Ctrl-C while closing: the error stays the one said
            checkpoint, checkpoint_round = self.last_good()
            latest = self.checkpointing.latest if self.checkpointing is not None else None
            complete = stop.phase is Phase.ENDING and latest is not None and bool(latest.evaluation)
            error = stop.error(checkpoint, checkpoint_round, complete)
            if error is None:
                raise
            if isinstance(error, TrainingStopped):
                raise error from None
            raise self.failed(error, None) from None

    def last_good(self) -> tuple[Path | None, int]:
        """The checkpoint a stopped or failed run continues from, and its round: this run's
        latest once written, else the one it resumed from (a file at config.checkpoint_path
        may be an older run's)."""
        if self.checkpointing is not None and self.checkpointing.latest_path is not None:
            latest = self.checkpointing.latest
            assert latest is not None
            return self.checkpointing.latest_path, latest.progress.round
        if self.stored is not None:
            return Path(str(self.options.resume)), self.stored.progress.round
        return None, 0

    def hang_bound_s(self) -> float:
        """How long one phase may last (config ``hang_timeout_s``; null: 10 times the slowest
        round so far, at least ``HANG_TIMEOUT_FLOOR_S``)."""
        if self.config.hang_timeout_s is not None:
            return self.config.hang_timeout_s
        return max(HANG_TIMEOUT_FLOOR_S, 10 * self.slowest_round_s)

    def _train(self, stack: contextlib.ExitStack, stop: StopRequest) -> TrainingSummary:
        config, options = self.config, self.options
        stop_bound = self.hang_bound_s()
        checked = preflight(
            config, options.resume, options.resume_replay, options.devices, bool(options.address)
        )
        algorithm, topology, actor, stored = (
            checked.algorithm,
            checked.topology,
            checked.actor,
            checked.stored,
        )
        self.reports_success = checked.reports_success
        if stored is not None:
            self.progress = dataclasses.replace(stored.progress)
            self.stored = stored
            for line in resume_ignored_changes(algorithm, config, stored.config):
                self.warn(line)
        # Enough logical CPUs for every rollout actor, learner and the evaluator.
        num_cpus = max(os.cpu_count() or 1, topology.num_actors + topology.num_learners + 1)
        runtime_env = config.runtime_env.to_ray()
        stack.enter_context(
            ray_session(options.address, num_cpus, runtime_env, start_timeout_s=stop_bound)
        )
        if options.address or runtime_env:  # this process's checks cover a local Ray
            check_every_node(config, actor.spec.builder)
        if options.address and options.devices is None:  # the cluster's GPUs, not the driver's
            topology = resolve_for(config, _cluster_devices())
            check_learner_device(algorithm, config, actor, topology)
        evaluator_process = evaluator_has_own_process(config, round_loop_class(algorithm))
        resources = process_resources(
            topology, evaluator_process, concurrent_runs=options.concurrent_runs
        )
        if resources.cpu_share < 1.0:
            self.warn(
                f"note: {resources.cluster_cpus:g} CPUs in the Ray cluster for "
                f"{resources.cpu_processes} rollout actors, CPU learners"
                f"{' and the evaluator' if evaluator_process else ''}: each gets "
                f"{resources.cpu_share:g} of a CPU"
            )
        plan = self._plan(topology.num_actors * config.env.num_envs * config.rollout_length)
        sinks = stack.enter_context(self._open_sinks(algorithm, actor, stored))
        evaluator = EvaluationRunner(
            config, actor.spec, resources.rollout_actor, self.progress.env_steps
        )
        stack.callback(evaluator.close)
        loop = round_loop_class(algorithm)(
            RunContext(
                config, topology, actor.spec, checked.facts, plan, stored, options.concurrent_runs
            )
        )
        stack.callback(loop.close)  # closed before the evaluator: it may host the evaluations
        if isinstance(loop, WarmsUp):
            stop.enter(Phase.WARM_UP, bound_s=stop_bound)
            loop.warm_up()
            stop.enter(Phase.STARTING, bound_s=stop_bound)
        # After the round loop's processes: a process of its own starts while the rounds train.
        evaluator.start(loop.evaluation_host() if isinstance(loop, HasEvaluationHost) else None)
        saves_replay = algorithm.replay_saving is not None and algorithm.replay_saving(
            config.algo_params
        )
        replaying = saves_replay or checked.replay_file is not None
        if replaying and not isinstance(loop, ReplaySaving):
            raise TypeError(f"{type(loop).__name__} declares replay saving but cannot save replays")
        if checked.replay_file is not None:
            loop.load_replay(checked.replay_file)
        checkpointing = Checkpointing(
            algorithm,
            config,
            actor,
            checked.facts,
            self.progress,
            loop.save_replay if saves_replay else None,  # type: ignore[attr-defined]
            stored,
            None if stored is None else Path(str(options.resume)),
        )
        self.checkpointing = checkpointing
        if (
            stored is not None
            and stored.evaluation is None
            and evaluator.was_submitted_at(stored.progress.env_steps, plan.steps_per_round)
        ):  # in flight when the run stopped: the next round's row shows it, as if never stopped
            evaluator.submit(stored)
        rounds = RoundsRun(self, loop, sinks, evaluator, checkpointing)
        stopped_early = rounds.train(plan, stop)
        stop.enter(Phase.FINAL_EVALUATION, self.progress.round, self.hang_bound_s())
        final_evaluation = None
        if checkpointing.latest is not None:
            final_evaluation = evaluator.final_evaluation(checkpointing.latest)
        stop.enter(Phase.ENDING, self.progress.round, self.hang_bound_s())
        if final_evaluation is not None:
            checkpointing.run_ended(final_evaluation)
            sinks.final_evaluation(final_evaluation, self.progress.env_steps)
        summary = self._summary(rounds.last_return, final_evaluation, stopped_early)
        rounds.display.summary(summary)
        return summary

    def _plan(self, steps_per_round: int) -> RoundPlan:
        """The rounds left, counted in env steps (a resume may change the round size: more
        rollout actors); the best measures what this run's criterion measures."""
        config, progress = self.config, self.progress
        criterion = best_criterion(config)
        if progress.best_criterion != criterion:  # the stored best measured something else
            progress.best_return, progress.best_criterion = None, criterion
            progress.best_tiebreak = None
        rounds_left = max(
            0, math.ceil((config.total_env_steps - progress.env_steps) / steps_per_round)
        )
        return RoundPlan(
            progress.round + rounds_left, steps_per_round, progress.round, progress.env_steps
        )

    @contextlib.contextmanager
    def _open_sinks(
        self, algorithm: Algorithm, actor: ProbedActor, stored: Checkpoint | None
    ) -> Iterator[MetricsSinks]:
        """The metrics CSV (continued where a resumed checkpoint left it) and the other sinks,
        closed when the run ends however it ends."""
        config, progress = self.config, self.progress
        columns = metric_columns(
            algorithm,
            actor.aux_loss_names,
            evaluation=config.evaluation.interval_env_steps is not None,
            success=self.reports_success,
        )
        for output in (
            config.checkpoint_path,
            config.best_checkpoint_path,
            replay_path(config.checkpoint_path),
            Path(config.metrics_path),
        ):
            remove_leftovers(output)  # of writes a killed run left unfinished
        writer = MetricsWriter(
            config.metrics_path,
            columns,
            append=stored is not None,
            resume_round=progress.round if stored is not None else None,
        )
        if writer.dropped_rounds:
            self.warn(
                f"note: {writer.path}: dropped the rows of rounds "
                f"{', '.join(writer.dropped_rounds)}, after the resumed checkpoint's round "
                f"{progress.round}; they are trained again"
            )
        opened = open_sinks(config, self.warn, resumed=stored is not None)
        sinks = MetricsSinks(writer, [*opened, *self.options.metrics_sinks], warn=self.warn)
        try:
            yield sinks
        except (TrainingStopped, KeyboardInterrupt):
            sinks.close("stopped")
            raise
        except BaseException:
            sinks.close("failed")
            raise
        sinks.close()

    def _summary(
        self,
        last_return: float | None,
        final_evaluation: EvaluationResult | None,
        stopped_early: str | None,
    ) -> TrainingSummary:
        config, progress = self.config, self.progress
        return TrainingSummary(
            rounds=progress.round,
            env_steps=progress.env_steps,
            wall_time_s=progress.wall_time_s,
            best_return=progress.best_return,
            last_return=last_return,
            checkpoint_path=config.checkpoint_path,
            best_checkpoint_path=(
                config.best_checkpoint_path
                if progress.best_return is not None and config.best_checkpoint_path.exists()
                else None
            ),
            metrics_path=Path(config.metrics_path),
            best_criterion=progress.best_criterion,
            final_evaluation=final_evaluation,
            stopped_early=stopped_early,
        )

    def warn(self, line: str) -> None:
        self.console.print(line, style="yellow", highlight=False, soft_wrap=True)

    def failed(self, error: DrlError, round_number: int | None) -> TrainingError:
        """The error of a round (None: of no round), with its number and the checkpoint left to
        resume from."""
        checkpoint, _ = self.last_good()
        where = f"; the last good checkpoint is {checkpoint}" if checkpoint else ""
        what = f"round {round_number}: " if round_number is not None else ""
        return TrainingError(f"{what}{error}{where}")


class RoundsRun:
    """The rounds of a run: the algorithm's round loop, then each round's metrics row
    (``sinks``), checkpoints (``checkpointing``) and due evaluation (``evaluator``), until the
    plan is done, a stop is requested (``StopRequest``) or a stop rule ends the run."""

    def __init__(
        self,
        owner: TrainingRun,
        loop: Any,
        sinks: MetricsSinks,
        evaluator: EvaluationRunner,
        checkpointing: Checkpointing,
    ) -> None:
        self.owner, self.loop, self.sinks = owner, loop, sinks
        self.evaluator, self.checkpointing = evaluator, checkpointing
        self.last_return: float | None = None
        self.success_key_checked = False
        self.display = TrainingProgress(
            total_env_steps=0, completed=0, quiet=True, console=owner.console
        )

    def train(self, plan: RoundPlan, stop: StopRequest) -> str | None:
        """Train the plan's remaining rounds, each in ``Phase.ROUND`` then ``Phase.CHECKPOINT``
        (a first signal lets both finish); returns the reason a stop rule gave, where one ended
        the run early. Raises ``TrainingStopped`` after the round a signal came in (a signal
        wins over a stop rule: the run stops without its final evaluation)."""
        owner, progress, evaluator = self.owner, self.owner.progress, self.evaluator
        self.display = TrainingProgress(
            total_env_steps=plan.planned_env_steps,
            completed=progress.env_steps,
            quiet=owner.options.quiet,
            console=owner.console,
        )
        started = time.perf_counter() - progress.wall_time_s
        with self.display:
            for round_index in range(progress.round, plan.total_rounds):
                stop.enter(Phase.ROUND, round_index + 1, owner.hang_bound_s())
                round_started = time.perf_counter()
                last = round_index + 1 == plan.total_rounds
                try:
                    stats, learner_metrics = self.loop.run_round(round_index)
                    obs_rms_state, learner_states = self.loop.checkpoint_parts()
                    # Waits where the next evaluation is due with one still in flight, and in
                    # the last round: every evaluation that counts is in a row of the CSV.
                    due = evaluator.due(progress.env_steps + plan.steps_per_round)
                    evaluated = evaluator.collect(
                        wait=due or last or owner.options.evaluations_in_next_row
                    )
                except TrainingError as error:
                    raise owner.failed(error, round_index + 1) from None
                _check_finite(learner_states, round_index + 1, owner)
                stop.enter(Phase.CHECKPOINT, round_index + 1, owner.hang_bound_s())
                progress.round = round_index + 1
                progress.env_steps += plan.steps_per_round
                now = time.perf_counter()
                progress.wall_time_s = now - started
                row = _metrics_row(
                    progress, stats, learner_metrics, plan.steps_per_round / (now - round_started)
                )
                if owner.reports_success:
                    row["success_rate"] = success_rate(
                        [outcome for s in stats for outcome in s["episode_successes"]]
                    )
                    self._warn_if_no_success_reported(row, round_index)
                if evaluated is not None:
                    row.update(evaluated[0].metrics(success=owner.reports_success))
                try:  # a full disk, a learner lost while it saves its replay buffer
                    self.sinks.write(row)
                    if row["episode_return_mean"] is not None:
                        self.last_return = row["episode_return_mean"]
                    checkpoint = self.checkpointing.round_ended(
                        obs_rms_state,
                        learner_states,
                        row["episode_return_mean"],
                        evaluated,
                        row.get("success_rate"),
                    )
                    if evaluator.due(progress.env_steps):
                        evaluator.submit(checkpoint)
                except (StorageError, TrainingError) as error:
                    raise owner.failed(error, progress.round) from None
                owner.slowest_round_s = max(
                    owner.slowest_round_s, time.perf_counter() - round_started
                )
                self.display.update(row, plan.total_rounds)
                reason = first_stop_reason(owner.options.stop_rules, row)
                self._stop_if_requested(stop)
                if reason is not None:
                    owner.console.print(
                        f"stopping after round {progress.round}: {reason}",
                        style="yellow",
                        highlight=False,
                    )
                    return reason
        return None

    def _stop_if_requested(self, stop: StopRequest) -> None:
        """Raise ``TrainingStopped`` where a signal came in during the round just written."""
        if stop.requested:
            error = stop.error(*self.owner.last_good())
            assert error is not None
            raise error

    def _warn_if_no_success_reported(self, row: dict[str, Any], round_index: int) -> None:
        """Once, after the first round with finished episodes: a configured ``env.success_key``
        that none of them reported (a misspelt key writes an empty column otherwise)."""
        key = self.owner.config.env.success_key
        if key is None or self.success_key_checked or not row["episodes"]:
            return
        self.success_key_checked = True
        if row["success_rate"] is None:
            self.owner.warn(
                f"warning: env.success_key {key!r}: none of the {row['episodes']} episodes of "
                f"round {round_index + 1} reported it in info; success_rate stays empty"
            )


def round_loop_class(algorithm: Algorithm) -> type:
    """The ``RoundLoop`` of ``algorithm``, chosen by the type of its ``training`` part (imports
    Ray)."""
    if isinstance(algorithm.training, OffPolicy):
        from drlcli.runtime.off_policy_loop import OffPolicyRoundLoop

        return OffPolicyRoundLoop
    if isinstance(algorithm.training, PPORounds):
        from drlcli.runtime.ppo_loop import PPORoundLoop

        return PPORoundLoop
    raise TypeError(f"{algorithm.name}: no round loop trains {type(algorithm.training).__name__}")


def _cluster_devices() -> AvailableDevices:
    """GPUs of the whole Ray cluster (learners may run on any node)."""
    import ray

    return AvailableDevices(cuda_devices=int(ray.cluster_resources().get("GPU", 0)), mps=False)


def _check_finite(
    learner_states: list[dict[str, Any]], round_number: int, owner: TrainingRun
) -> None:
    """Refuse a round whose learner states (networks, optimiser moments) hold a NaN or an
    infinity, before it is written."""
    for index, state in enumerate(learner_states):
        if names := non_finite_tensors(state):
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            error = TrainingError(f"learner {index}'s {names[0]}{more} became non-finite")
            raise owner.failed(error, round_number)


def _metrics_row(
    progress: RunProgress, stats: list[dict], learner_metrics: dict[str, float], sps: float
) -> dict[str, Any]:
    returns = [r for s in stats for r in s["episode_returns"]]
    episodes = sum(s["episodes"] for s in stats)
    return {
        "round": progress.round,
        "env_steps": progress.env_steps,
        "wall_time_s": progress.wall_time_s,
        "sps": sps,
        "episodes": episodes,
        "episode_return_mean": float(np.mean(returns)) if returns else None,
        "episode_return_min": float(np.min(returns)) if returns else None,
        "episode_return_max": float(np.max(returns)) if returns else None,
        "episode_length_mean": (
            sum(s["episode_len_sum"] for s in stats) / episodes if episodes else None
        ),
        "rollout_actor_restarts": sum(s.get("rollout_actor_restarts", 0) for s in stats),
        **learner_metrics,
    }

"""``drl train``: the run loop of every algorithm on a Ray topology.

``train`` looks the config's algorithm up in the registry, builds its policy actor once
(``probe_actor``: a broken custom actor fails before anything starts), checks a resumed
checkpoint with ``check_fits``, then starts Ray and the run loop (``_run``): the algorithm's
round loop (``RoundLoop``: sampling, statistics, training, synchronisation), and after each round
the parts, each with its own small interface: the metrics row to the sinks (``MetricsSinks``:
the CSV, then any other), the checkpoints (``Checkpointing``: latest, best, replay), the due
evaluation (``EvaluationRunner``) and the stop requests (``StopRequest``: Ctrl-C finishes the
round in progress). At the end, the final policy's evaluation.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from drlcli.algos.algorithm import (
    Algorithm,
    EvaluationHosting,
    ReplaySaving,
    RoundPlan,
    RunContext,
    RunShape,
)
from drlcli.algos.registry import ALGORITHMS, get_algorithm
from drlcli.atomic import check_writable, remove_leftovers
from drlcli.audit import read_verified_checkpoint
from drlcli.checkpoint import (
    BEST_BY_EVALUATION,
    BEST_BY_TRAINING_RETURN,
    Checkpoint,
    RunProgress,
    check_fits,
    non_finite_tensors,
    state_dict_problem,
    validate_actor_semantics,
    validate_learner_states,
)
from drlcli.config import Config
from drlcli.envs import EnvFacts, env_facts, make_env
from drlcli.errors import (
    CheckpointError,
    ConfigError,
    DrlError,
    StorageError,
    TrainingError,
    UsageError,
)
from drlcli.evaluation import EvaluationResult
from drlcli.metrics import MetricsWriter, metric_columns
from drlcli.runtime.checkpointing import Checkpointing, replay_path
from drlcli.runtime.evaluation import EvaluationRunner, evaluator_has_own_process
from drlcli.runtime.memory_budget import available_memory_bytes, check_memory, run_memory_needs
from drlcli.runtime.nodes import check_every_node, check_runtime_env, import_py_modules_here
from drlcli.runtime.probe import ProbedActor, probe_actor
from drlcli.runtime.progress import TrainingProgress
from drlcli.runtime.ray_session import process_resources, ray_session
from drlcli.runtime.sinks import MetricsSink, MetricsSinks
from drlcli.runtime.stop import StopRequest, StopRule, first_stop_reason
from drlcli.sinks import check_sinks, open_sinks
from drlcli.topology import AvailableDevices, detect_available_devices
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


def train(
    config: Config,
    *,
    address: str | None = None,
    resume: str | Path | None = None,
    resume_replay: bool = False,
    quiet: bool = False,
    console: Console | None = None,
    devices: AvailableDevices | None = None,
    metrics_sinks: Sequence[MetricsSink] = (),
    stop_rules: Sequence[StopRule] = (),
) -> TrainingSummary:
    """Train ``config`` end to end; returns what was written.

    Args:
        address: Ray cluster address; None starts (and stops) a local Ray.
        resume: a checkpoint to continue from (its actor semantics must match ``config``).
        resume_replay: also refill an off-policy run's replay buffer from
            ``<resume stem>_replay.npz`` (written with ``algo_params.save_replay_buffer: true``).
        quiet: one plain log line per round instead of the progress bar.
        devices: override hardware detection (tests).
        metrics_sinks: where every metrics row also goes, after the CSV (``MetricsSink``): one
            that fails warns once in one line and is left out; the run goes on.
        stop_rules: judge each round's row once it is written (``StopRule``); the first that
            gives a reason ends the run there, with its final evaluation, as a finished run
            (``TrainingSummary.stopped_early``) that ``resume`` can continue.
    """
    console = console or Console()
    algorithm = get_algorithm(config.algo)
    # Counts are checked before anything starts; the hardware may still change the learner
    # count once a cluster is joined.
    topology = resolve_for(config, devices or detect_available_devices())
    check_runtime_env(config.runtime_env)
    import_py_modules_here(config.runtime_env)
    env = make_env(
        config.env.id, max_episode_steps=config.env.max_episode_steps, **config.env.kwargs
    )
    facts = env_facts(env)
    env.close()
    actor = probe_actor(algorithm, config, facts)
    # Rules that need the learner device (a CUDA graph, say), before any worker starts.
    algorithm.check_learner_device(
        config.algo_params, actor.spec, topology.learner_device, topology.num_learners
    )
    stored = (
        None
        if resume is None
        else _load_for_resume(Path(resume), config, actor.semantics, facts, actor.tensor_shapes)
    )
    replay_file = _replay_file(algorithm, config, resume, resume_replay)

    if address is None:  # a cluster's learners and rollout actors may run on other machines
        shape = RunShape(
            facts.obs_dim,
            facts.action_dim,
            config.env.num_envs,
            config.rollout_length,
            topology.num_actors,
            topology.num_learners,
        )
        needs = run_memory_needs(algorithm, config.algo_params, shape, actor.parameter_bytes)
        check_memory(needs, available_memory_bytes())
    check_sinks(config)  # an extra the logging section needs and lacks: refused here
    check_writable(config.output_dir, "output_dir")
    check_writable(Path(config.metrics_path).parent, "metrics_path")
    # Enough logical CPUs for every rollout actor, learner and the evaluator.
    num_cpus = max(os.cpu_count() or 1, topology.num_actors + topology.num_learners + 1)
    with ray_session(address, num_cpus=num_cpus, runtime_env=config.runtime_env.to_ray()):
        if address or not config.runtime_env.is_empty():  # this process's checks cover a local Ray
            check_every_node(config, actor.spec.builder)
        if address and devices is None:
            topology = resolve_for(config, _cluster_devices())
        evaluator_process = evaluator_has_own_process(config, algorithm.load_round_loop())
        resources = process_resources(topology, evaluator_process)
        if resources.cpu_share < 1.0:
            console.print(
                f"note: {resources.cluster_cpus:g} CPUs in the Ray cluster for "
                f"{resources.cpu_processes} rollout actors, CPU learners"
                f"{' and the evaluator' if evaluator_process else ''}: each gets "
                f"{resources.cpu_share:g} of a CPU",
                style="yellow",
                highlight=False,
            )
        steps_per_round = topology.num_actors * config.env.num_envs * config.rollout_length
        progress = dataclasses.replace(stored.progress) if stored is not None else RunProgress()
        criterion = (
            BEST_BY_EVALUATION
            if config.evaluation.interval_env_steps is not None
            else BEST_BY_TRAINING_RETURN
        )
        if progress.best_criterion != criterion:  # the stored best measured something else
            progress.best_return, progress.best_criterion = None, criterion
        # Counted in env steps, so a resume may change the round size (more rollout actors).
        rounds_left = math.ceil((config.total_env_steps - progress.env_steps) / steps_per_round)
        total_rounds = progress.round + rounds_left
        columns = metric_columns(
            algorithm,
            actor.aux_loss_names,
            evaluation=config.evaluation.interval_env_steps is not None,
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
            console.print(
                f"note: {writer.path}: dropped the rows of rounds "
                f"{', '.join(writer.dropped_rounds)}, after the resumed checkpoint's round "
                f"{progress.round}; they are trained again",
                style="yellow",
                highlight=False,
            )

        def warn(line: str) -> None:
            console.print(line, style="yellow", highlight=False, soft_wrap=True)

        opened = open_sinks(config, warn, resumed=stored is not None)
        sinks = MetricsSinks(writer, [*opened, *metrics_sinks], warn=warn)
        evaluator = None
        try:
            evaluator = EvaluationRunner(
                config, actor.spec, resources.rollout_actor, progress.env_steps
            )
            plan = RoundPlan(total_rounds, steps_per_round, progress.round, progress.env_steps)
            run = RunContext(config, topology, actor.spec, facts, plan, stored)
            return _run(
                algorithm,
                run,
                actor,
                progress,
                sinks=sinks,
                stop_rules=stop_rules,
                evaluator=evaluator,
                replay_file=replay_file,
                quiet=quiet,
                console=console,
            )
        finally:
            sinks.close()
            if evaluator is not None:
                evaluator.close()


def _replay_file(
    algorithm: Algorithm, config: Config, resume: str | Path | None, resume_replay: bool
) -> Path | None:
    if not resume_replay:
        return None
    if resume is None:
        raise UsageError("--resume-replay needs --resume CKPT")
    if algorithm.replay_saving is None:
        able = ", ".join(a.name for a in ALGORITHMS.values() if a.replay_saving is not None)
        raise UsageError(f"--resume-replay applies to {able}; this config trains {config.algo}")
    path = replay_path(Path(resume))
    if not path.is_file():
        raise CheckpointError(
            f"{path}: no replay buffer beside the checkpoint; it is written only when the run "
            "had algo_params.save_replay_buffer: true"
        )
    return path


def _cluster_devices() -> AvailableDevices:
    """GPUs of the whole Ray cluster (learners may run on any node)."""
    import ray

    return AvailableDevices(cuda_devices=int(ray.cluster_resources().get("GPU", 0)), mps=False)


def _load_for_resume(
    path: Path,
    config: Config,
    semantics: dict[str, Any],
    facts: EnvFacts,
    actor_shapes: dict[str, tuple[int, ...]] | None = None,
) -> Checkpoint:
    """The checkpoint to resume from, refused before anything starts unless it fits: also each
    learner's policy actor against ``actor_shapes``, the tensors of this run's actor (a learner
    would otherwise fail to load it only once its process started)."""
    checkpoint = read_verified_checkpoint(path)
    validate_actor_semantics(checkpoint.actor_semantics, semantics, source=str(path))
    check_fits(checkpoint, facts, str(path), config=config)
    validate_learner_states(checkpoint.learner_states, checkpoint.algorithm, source=str(path))
    for index, state in enumerate(checkpoint.learner_states):
        problem = None
        if actor_shapes is not None:
            actor_problem = state_dict_problem(state["actor"], actor_shapes)
            if actor_problem is not None:
                problem = f"its policy actor {actor_problem}; the file is damaged"
        problem = problem or checkpoint.algorithm.check_resume(
            config.algo_params, state, facts.obs_dim, facts.action_dim
        )
        if problem is not None:
            raise ConfigError(f"{path}: cannot resume: learner_states[{index}]: {problem}")
    if checkpoint.progress.env_steps >= config.total_env_steps:
        raise UsageError(
            f"{path}: already trained {checkpoint.progress.env_steps} of total_env_steps="
            f"{config.total_env_steps}; raise total_env_steps in the config to continue"
        )
    return checkpoint


def _run(
    algorithm: Algorithm,
    run: RunContext,
    actor: ProbedActor,
    progress: RunProgress,
    *,
    sinks: MetricsSinks,
    stop_rules: Sequence[StopRule],
    evaluator: EvaluationRunner,
    replay_file: Path | None,
    quiet: bool,
    console: Console,
) -> TrainingSummary:
    """The run loop: the algorithm's round loop, then each round's metrics row (``sinks``),
    checkpoints (``Checkpointing``) and due evaluation (``evaluator``), until the plan is done
    or a stop is requested (``StopRequest``) or a stop rule ends it (``stop_rules``); then the
    final evaluation."""
    config, plan = run.config, run.plan
    loop = algorithm.load_round_loop()(run)
    # After the round loop's processes: a process of its own starts while the rounds train.
    evaluator.start(loop.evaluation_host() if isinstance(loop, EvaluationHosting) else None)
    stored = run.stored
    if (
        stored is not None
        and stored.evaluation is None
        and evaluator.was_submitted_at(stored.progress.env_steps, plan.steps_per_round)
    ):  # in flight when the run stopped: the next round's row shows it, as if never stopped
        evaluator.submit(stored)
    saves_replay = algorithm.replay_saving is not None and algorithm.replay_saving(
        config.algo_params
    )
    if (saves_replay or replay_file is not None) and not isinstance(loop, ReplaySaving):
        raise TypeError(f"{type(loop).__name__} declares replay saving but cannot save replays")
    if replay_file is not None:
        loop.load_replay(replay_file)
    checkpointing = Checkpointing(
        algorithm, config, actor, run.facts, progress, loop.save_replay if saves_replay else None
    )
    started = time.perf_counter() - progress.wall_time_s
    last_return: float | None = None
    display = TrainingProgress(
        total_env_steps=plan.planned_env_steps,
        completed=progress.env_steps,
        quiet=quiet,
        console=console,
    )
    final_evaluation = None
    stopped_early = None
    try:
        with display, StopRequest(console) as stop:
            for round_index in range(progress.round, plan.total_rounds):
                if stop.requested:
                    raise stop.stopped(_written(config.checkpoint_path), progress.round)
                round_started = time.perf_counter()
                try:
                    stats, learner_metrics = loop.run_round(round_index)
                    obs_rms_state, learner_states = loop.checkpoint_parts()
                    # Waits only where the next evaluation is due with one still in flight.
                    evaluated = evaluator.collect(
                        wait=evaluator.due(progress.env_steps + plan.steps_per_round)
                    )
                except TrainingError as error:
                    raise _failed_round(error, round_index + 1, config) from None
                _check_finite(learner_states, round_index + 1, config)
                progress.round = round_index + 1
                progress.env_steps += plan.steps_per_round
                now = time.perf_counter()
                progress.wall_time_s = now - started
                row = _metrics_row(
                    progress, stats, learner_metrics, plan.steps_per_round / (now - round_started)
                )
                if evaluated is not None:
                    row.update(evaluated[0].metrics())
                try:  # a full disk, say: the previous checkpoint stays intact
                    sinks.write(row)
                    if row["episode_return_mean"] is not None:
                        last_return = row["episode_return_mean"]
                    checkpoint = checkpointing.round_ended(
                        obs_rms_state, learner_states, row["episode_return_mean"], evaluated
                    )
                    if evaluator.due(progress.env_steps):
                        evaluator.submit(checkpoint)
                except StorageError as error:
                    raise _failed_round(error, progress.round, config) from None
                display.update(row, plan.total_rounds)
                stopped_early = first_stop_reason(stop_rules, row)
                if stopped_early is not None:
                    console.print(
                        f"stopping after round {progress.round}: {stopped_early}",
                        style="yellow",
                        highlight=False,
                    )
                    break
            if stop.requested:  # the last round finished; skip the final evaluation
                raise stop.stopped(_written(config.checkpoint_path), progress.round)
        latest = checkpointing.latest
        if latest is not None:  # before the loop closes: one of its processes may host it
            final_evaluation = evaluator.final_evaluation(latest, checkpointing.offer_evaluated)
            checkpointing.run_ended(final_evaluation)
            sinks.final_evaluation(final_evaluation, progress.env_steps)
    finally:
        loop.close()

    summary = TrainingSummary(
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
    display.summary(summary)
    return summary


def _check_finite(learner_states: list[dict[str, Any]], round_number: int, config: Config) -> None:
    """Refuse a round whose learner states (networks, optimiser moments) hold a NaN or an
    infinity, before it is written."""
    for index, state in enumerate(learner_states):
        if names := non_finite_tensors(state):
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            error = TrainingError(f"learner {index}'s {names[0]}{more} became non-finite")
            raise _failed_round(error, round_number, config)


def _failed_round(error: DrlError, round_number: int, config: Config) -> TrainingError:
    """The error of a round, with its number and the checkpoint left intact to resume from."""
    last = _written(config.checkpoint_path)
    where = f"; the last good checkpoint is {last}" if last is not None else ""
    return TrainingError(f"round {round_number}: {error}{where}")


def _written(path: Path) -> Path | None:
    return path if path.exists() else None


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

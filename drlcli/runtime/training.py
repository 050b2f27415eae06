"""``drl train``: the driver of every algorithm's round loop on a Ray topology.

``train`` looks the config's algorithm up in the registry, builds its policy actor once (a broken
custom actor fails before anything starts), checks a resumed checkpoint with ``check_fits``, then
starts Ray and the algorithm's ``RoundLoop``. Each round: ``run_round`` (sampling, statistics,
training, synchronisation: the algorithm's), then one metrics row, the latest checkpoint, and the
best checkpoint when the mean training return improved. Ctrl-C finishes the round in progress.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from drlcli.actors.contract import declared_inference_memory
from drlcli.actors.memory import module_memory_bytes
from drlcli.actors.spec import ActorSpec, actor_semantics, build_policy_actor
from drlcli.algos.algorithm import Algorithm, EvaluationHosting, ReplaySaving, RunShape
from drlcli.algos.registry import ALGORITHMS, get_algorithm
from drlcli.atomic import check_writable, remove_leftovers
from drlcli.audit import read_verified_checkpoint
from drlcli.checkpoint import (
    BEST_BY_EVALUATION,
    BEST_BY_TRAINING_RETURN,
    Checkpoint,
    EnvRecord,
    RunProgress,
    check_fits,
    non_finite_tensors,
    read_checkpoint,
    state_dict_problem,
    validate_actor_semantics,
    validate_learner_states,
    write_checkpoint,
)
from drlcli.config import Config
from drlcli.envs import EnvFacts, env_facts, make_env
from drlcli.errors import (
    CheckpointError,
    ConfigError,
    DrlError,
    StorageError,
    TrainingError,
    TrainingStopped,
    UsageError,
)
from drlcli.evaluation import EvaluationResult
from drlcli.metrics import MetricsWriter, metric_columns
from drlcli.normalization import DEFAULT_OBSERVATION_CLIP
from drlcli.runtime.evaluation import EvaluationRunner, evaluator_has_own_process
from drlcli.runtime.memory_budget import available_memory_bytes, check_memory, run_memory_needs
from drlcli.runtime.nodes import check_every_node, check_runtime_env, import_py_modules_here
from drlcli.runtime.progress import TrainingProgress
from drlcli.runtime.ray_session import process_resources, ray_session
from drlcli.topology import AvailableDevices, TrainingTopology, detect_available_devices
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


def train(
    config: Config,
    *,
    address: str | None = None,
    resume: str | Path | None = None,
    resume_replay: bool = False,
    quiet: bool = False,
    console: Console | None = None,
    devices: AvailableDevices | None = None,
) -> TrainingSummary:
    """Train ``config`` end to end; returns what was written.

    Args:
        address: Ray cluster address; None starts (and stops) a local Ray.
        resume: a checkpoint to continue from (its actor semantics must match ``config``).
        resume_replay: also refill FlashSAC's replay buffer from ``<resume stem>_replay.npz``
            (written with ``algo_params.save_replay_buffer: true``).
        quiet: one plain log line per round instead of the progress bar.
        devices: override hardware detection (tests).
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
        if stored is not None:
            progress.best_return = _best_return_on_disk(config, stored, progress, steps_per_round)
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
        evaluator = None
        try:
            evaluator = EvaluationRunner(
                config, actor.spec, resources.rollout_actor, progress.env_steps
            )
            return _run(
                algorithm,
                config,
                topology,
                actor,
                facts,
                stored,
                replay_file,
                progress,
                total_rounds,
                steps_per_round,
                writer,
                evaluator,
                quiet,
                console,
            )
        finally:
            writer.close()
            if evaluator is not None:
                evaluator.close()


@dataclass(frozen=True)
class ProbedActor:
    """What the driver learns by building the run's policy actor once, before anything starts
    (a broken custom actor fails here): its spec, its checkpoint semantics, the names of its
    auxiliary losses (CSV columns) and the inference memory it declares."""

    spec: ActorSpec
    semantics: dict[str, Any]
    aux_loss_names: list[str]
    inference_memory: dict[str, int]
    parameter_bytes: int  # of its parameters and buffers
    tensor_shapes: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)


def probe_actor(algorithm: Algorithm, config: Config, facts: EnvFacts) -> ProbedActor:
    """Build and check the run's policy actor (the contract with the env's bounds, and the
    algorithm's own requirements), then describe it."""
    spec = algorithm.actor_spec(config.algo_params, facts.action_low, facts.action_high)
    probe = build_policy_actor(
        spec,
        facts.obs_dim,
        facts.action_dim,
        action_low=facts.action_low,
        action_high=facts.action_high,
    )
    algorithm.check_actor(probe, facts.obs_dim, facts.action_dim)
    return ProbedActor(
        spec=spec,
        semantics=actor_semantics(spec, facts.obs_dim, facts.action_dim, probe.action_transform_id),
        aux_loss_names=_aux_loss_names(probe, facts.obs_dim),
        inference_memory=declared_inference_memory(probe),
        parameter_bytes=sum(module_memory_bytes(probe).values()),
        tensor_shapes={name: tuple(t.shape) for name, t in probe.state_dict().items()},
    )


def _aux_loss_names(actor: Any, obs_dim: int) -> list[str]:
    """The actor's auxiliary-loss names, from one training-mode forward on a copy."""
    import copy

    probe = copy.deepcopy(actor)
    rng = torch.get_rng_state()
    try:
        _, info = probe(torch.zeros(2, obs_dim), training=True)
    finally:
        torch.set_rng_state(rng)
    return sorted(info.get("aux_losses") or {})


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


def replay_path(checkpoint_path: Path) -> Path:
    """Where FlashSAC's replay buffer is saved beside a checkpoint: ``<stem>_replay.npz``."""
    return checkpoint_path.with_name(f"{checkpoint_path.stem}_replay.npz")


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


def _best_return_on_disk(
    config: Config, stored: Checkpoint, progress: RunProgress, steps_per_round: int
) -> float | None:
    """The best a resumed run must beat: the higher of the resumed checkpoint's record and the
    best file's own (files of an older drl wrote the best before recording it in the latest
    checkpoint). A best file of another run (other actor, task or criterion, or trained further
    than one round past the checkpoint) is not counted, nor one that cannot be read."""
    path = config.best_checkpoint_path
    if not path.is_file():
        return progress.best_return
    try:
        best = read_checkpoint(path)
    except DrlError:
        return progress.best_return
    same_run = (
        best.actor_semantics == stored.actor_semantics
        and best.env.id == stored.env.id
        and best.progress.best_criterion == progress.best_criterion
        and best.progress.env_steps <= stored.progress.env_steps + steps_per_round
    )
    if not same_run or best.progress.best_return is None:
        return progress.best_return
    if progress.best_return is None:
        return best.progress.best_return
    return max(progress.best_return, best.progress.best_return)


class StopRequest:
    """Ctrl-C or SIGTERM (what Slurm and Kubernetes send before killing) during training: the
    first finishes the round in progress (its metrics row and checkpoint are written), then
    training stops with ``TrainingStopped``; a second signal aborts at once. Outside the main
    thread it does nothing.

    The handler only records the signal. Python runs a handler between any two bytecodes of
    the main thread, in the middle of an import included, so printing from it can re-enter a
    half-imported module (rich imports its emoji table lazily) and fail; a short-lived thread
    prints the notice instead, waiting on the import lock like any other thread.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, console: Console) -> None:
        self.console = console
        self.signal: signal.Signals | None = None
        self._previous: dict[int, Any] = {}
        self._notice: threading.Thread | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def stopped(self, checkpoint: Path | None, rounds: int) -> TrainingStopped:
        assert self.signal is not None
        return TrainingStopped(self.signal.name, int(self.signal), checkpoint, rounds)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum)
        self._notice = threading.Thread(
            target=self.console.print,
            args=(f"{self.signal.name}: stopping after this round (send it again to abort now)",),
            kwargs={"style": "yellow"},
            name="drl-stop-notice",
            daemon=True,
        )
        self._notice.start()

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        if self._notice is not None:  # the notice comes before whatever the caller prints next
            self._notice.join(timeout=5)


def _run(
    algorithm: Algorithm,
    config: Config,
    topology: TrainingTopology,
    actor: ProbedActor,
    facts: Any,
    stored: Checkpoint | None,
    replay_file: Path | None,
    progress: RunProgress,
    total_rounds: int,
    steps_per_round: int,
    writer: MetricsWriter,
    evaluator: EvaluationRunner,
    quiet: bool,
    console: Console,
) -> TrainingSummary:
    loop = algorithm.load_round_loop()(config, topology, actor.spec, facts, stored)
    # After the round loop's processes: a process of its own starts while the rounds train.
    evaluator.start(loop.evaluation_host() if isinstance(loop, EvaluationHosting) else None)
    saves_replay = algorithm.replay_saving is not None and algorithm.replay_saving(
        config.algo_params
    )
    if (saves_replay or replay_file is not None) and not isinstance(loop, ReplaySaving):
        raise TypeError(f"{type(loop).__name__} declares replay saving but cannot save replays")
    if replay_file is not None:
        loop.load_replay(replay_file)
    started = time.perf_counter() - progress.wall_time_s
    last_return: float | None = None
    planned_env_steps = progress.env_steps + (total_rounds - progress.round) * steps_per_round
    display = TrainingProgress(
        total_env_steps=planned_env_steps,
        completed=progress.env_steps,
        quiet=quiet,
        console=console,
    )
    best = BestCheckpoint(config, progress)
    checkpoint: Checkpoint | None = None
    try:
        with display, StopRequest(console) as stop:
            for round_index in range(progress.round, total_rounds):
                if stop.requested:
                    raise stop.stopped(_written(config.checkpoint_path), progress.round)
                round_started = time.perf_counter()
                fraction_done = progress.env_steps / planned_env_steps
                try:
                    stats, learner_metrics = loop.run_round(round_index, fraction_done)
                    obs_rms_state, learner_states = loop.checkpoint_parts()
                    evaluated = evaluator.collect() if evaluator.periodic else None
                except TrainingError as error:
                    raise _failed_round(error, round_index + 1, config) from None
                _check_finite(learner_states, round_index + 1, config)
                progress.round = round_index + 1
                progress.env_steps += steps_per_round
                now = time.perf_counter()
                progress.wall_time_s = now - started
                row = _metrics_row(
                    progress, stats, learner_metrics, steps_per_round / (now - round_started)
                )
                if evaluated is not None:
                    row.update(evaluated[0].metrics())
                try:  # a full disk, say: the previous checkpoint stays intact
                    writer.write(row)
                    if row["episode_return_mean"] is not None:
                        last_return = row["episode_return_mean"]
                    checkpoint = build_checkpoint(
                        algorithm, config, actor, facts, progress, obs_rms_state, learner_states
                    )
                    # The offers first: the latest checkpoint records the best as it is after
                    # this round's offer (a resume reads it from there); then the best file.
                    if evaluator.periodic:
                        if evaluated is not None:
                            best.offer_evaluated(*evaluated)
                    else:
                        best.offer_training_return(row["episode_return_mean"], checkpoint)
                    checkpoint = _with_progress(checkpoint, progress)
                    write_checkpoint(config.checkpoint_path, checkpoint)
                    best.write_pending()
                    if saves_replay:
                        loop.save_replay(replay_path(config.checkpoint_path))
                    if evaluator.periodic and evaluator.due(progress.env_steps):
                        evaluator.submit(checkpoint)
                except StorageError as error:
                    raise _failed_round(error, progress.round, config) from None
                display.update(row, total_rounds)
            if stop.requested:  # the last round finished; skip the final evaluation
                raise stop.stopped(_written(config.checkpoint_path), progress.round)
        final_evaluation = None
        if checkpoint is not None:  # before the loop closes: one of its processes may host it
            if evaluator.periodic and (evaluated := evaluator.collect(wait=True)) is not None:
                best.offer_evaluated(*evaluated)
                if evaluated[1].progress.env_steps == checkpoint.progress.env_steps:
                    final_evaluation = evaluated[0]  # the final weights were just evaluated
            # The final policy is always evaluated; the latest checkpoint records the result.
            final_evaluation = final_evaluation or evaluator.evaluate_now(checkpoint)
            checkpoint = dataclasses.replace(checkpoint, evaluation=final_evaluation.to_dict())
            if evaluator.periodic:
                best.offer_evaluated(final_evaluation, checkpoint)
            write_checkpoint(config.checkpoint_path, _with_progress(checkpoint, progress))
            best.write_pending()
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
    )
    display.summary(summary)
    return summary


def _with_progress(checkpoint: Checkpoint, progress: RunProgress) -> Checkpoint:
    """``checkpoint`` with the run's counters as they stand now (the best after an offer)."""
    return dataclasses.replace(checkpoint, progress=dataclasses.replace(progress))


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


class BestCheckpoint:
    """Keeps ``model_<name>_best.pt``: the best deterministic evaluation when evaluation is
    periodic, else the best mean training return of a round. ``progress.best_return`` (which the
    checkpoints store) follows it.

    An offer that wins raises ``progress.best_return`` at once and holds the candidate until
    ``write_pending``: the latest checkpoint, which records the new best, is written first. A run
    killed between the two writes then has a best file no newer than its latest checkpoint, whose
    record a resume must beat: the best file is never replaced by a worse policy.
    """

    def __init__(self, config: Config, progress: RunProgress) -> None:
        self.path = config.best_checkpoint_path
        self.progress = progress
        self.pending: list[Checkpoint] = []

    def _beats(self, value: float | None) -> bool:
        return value is not None and (
            self.progress.best_return is None or value > self.progress.best_return
        )

    def offer_training_return(self, value: float | None, checkpoint: Checkpoint) -> None:
        if self._beats(value):
            self.progress.best_return = value
            self._hold(checkpoint)

    def offer_evaluated(self, result: EvaluationResult, checkpoint: Checkpoint) -> None:
        """The weights ``checkpoint`` holds were evaluated: keep them if they are the best."""
        if self._beats(result.return_mean):
            self.progress.best_return = result.return_mean
            self._hold(dataclasses.replace(checkpoint, evaluation=result.to_dict()))

    def _hold(self, checkpoint: Checkpoint) -> None:
        counters = dataclasses.replace(
            checkpoint.progress,
            best_return=self.progress.best_return,
            best_criterion=self.progress.best_criterion,
        )
        self.pending.append(dataclasses.replace(checkpoint, progress=counters))

    def write_pending(self) -> None:
        """Write the winning candidates held since the last call (the best one last)."""
        for checkpoint in self.pending:
            write_checkpoint(self.path, checkpoint)
        self.pending.clear()


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


def build_checkpoint(
    algorithm: Algorithm,
    config: Config,
    actor: ProbedActor,
    facts: EnvFacts,
    progress: RunProgress,
    obs_rms_state: dict[str, Any] | None,
    learner_states: list[dict[str, Any]],
) -> Checkpoint:
    """The checkpoint of a run as it stands: the round loop's parts and the driver's counters."""
    clip = algorithm.observation_clip(config.algo_params)
    return Checkpoint(
        algo=algorithm.name,
        actor=learner_states[0]["actor"],
        actor_semantics=actor.semantics,
        env=EnvRecord.of(config.env, facts),
        progress=dataclasses.replace(progress),
        config=config.to_dict(),
        learner_states=learner_states,
        obs_rms_state=obs_rms_state if clip is not None else None,
        observation_clip=clip if clip is not None else DEFAULT_OBSERVATION_CLIP,
        inference_memory=actor.inference_memory,
    )

"""The checks of a run before anything starts (no Ray, no process): the algorithm and its
topology, the task's spaces, the policy actor built once (``probe_actor``: a broken custom actor
fails here), the checkpoint to resume from (``load_for_resume``: refused unless it fits), the
replay file, memory, the sinks' extras and the output folders. Each failure is one line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drlcli.algos.entry_types import Algorithm, RunShape
from drlcli.algos.registry import ALGORITHMS, get_algorithm
from drlcli.atomic import check_writable
from drlcli.checkpoints.checks import (
    check_fits,
    state_dict_problem,
    validate_actor_semantics,
    validate_learner_states,
)
from drlcli.checkpoints.record import Checkpoint
from drlcli.checkpoints.replay_file import check_replay_belongs, replay_path
from drlcli.checkpoints.verified import read_verified_checkpoint
from drlcli.config import Config
from drlcli.env_facts import EnvFacts
from drlcli.envs import env_facts, make_task_env
from drlcli.errors import CheckpointError, ConfigError, UsageError
from drlcli.runtime.memory_budget import available_memory_bytes, check_memory, run_memory_needs
from drlcli.runtime.nodes import check_runtime_env, import_py_modules_here
from drlcli.runtime.probe import ProbedActor, probe_actor
from drlcli.sinks import check_sinks
from drlcli.success import first_step_reports
from drlcli.topology import AvailableDevices, TrainingTopology, detect_available_devices
from drlcli.topology import topology_for_config as resolve_for


@dataclass(frozen=True)
class Preflight:
    """What the checks found, for the run to start from.

    Attributes:
        topology: as this machine's hardware resolves it (a cluster's GPUs may change the
            learner count once it is joined: ``check_learner_device`` is then run again).
        stored: the checkpoint resumed from, or None.
        replay_file: the replay buffer to refill (``--resume-replay``), or None.
        reports_success: the run has success columns: ``env.success_key`` is set, or the
            task's first step reports ``success`` or ``is_success`` (``drlcli.success``).
    """

    algorithm: Algorithm
    topology: TrainingTopology
    facts: EnvFacts
    actor: ProbedActor
    stored: Checkpoint | None
    replay_file: Path | None
    reports_success: bool


def preflight(
    config: Config,
    resume: str | Path | None,
    resume_replay: bool,
    devices: AvailableDevices | None,
    on_cluster: bool,
) -> Preflight:
    """Every check a run can make before it starts anything.

    Args:
        devices: the learners' hardware; None detects this machine's.
        on_cluster: the run joins a Ray cluster whose hardware is not this machine's: the rules
            that need the learner device, and the memory check, wait for the cluster.
    """
    algorithm = get_algorithm(config.algo)
    # Counts are checked before anything starts; the hardware may still change the learner
    # count once a cluster is joined.
    topology = resolve_for(config, devices or detect_available_devices())
    check_runtime_env(config.runtime_env)
    import_py_modules_here(config.runtime_env)
    env = make_task_env(config.env)
    try:
        facts = env_facts(env)
        reports_success = config.env.success_key is not None or first_step_reports(
            env, config.env.seed
        )
    finally:
        env.close()
    if config.evaluation.best_by == "success_rate" and not reports_success:
        raise ConfigError(
            f"evaluation.best_by: success_rate needs a task that reports success; the first "
            f"step of {config.env.id} has neither info['success'] nor info['is_success'] (name "
            "its key with env.success_key, or use best_by: return)"
        )
    actor = probe_actor(algorithm, config, facts)
    if not on_cluster or devices is not None:
        check_learner_device(algorithm, config, actor, topology)
    stored = (
        None
        if resume is None
        else load_for_resume(Path(resume), config, actor.semantics, facts, actor.tensor_shapes)
    )
    replay_file = _replay_file(algorithm, config, resume, resume_replay, stored)
    shape = RunShape.of(config, topology, obs_dim=facts.obs_dim, action_dim=facts.action_dim)
    algorithm.check_round(config.algo_params, shape)
    if not on_cluster:  # a cluster's learners and rollout actors may run on other machines
        needs = run_memory_needs(algorithm, config.algo_params, shape, actor.parameter_bytes)
        check_memory(needs, available_memory_bytes())
    check_sinks(config)  # an extra the logging section needs and lacks: refused here
    check_writable(config.output_dir, "output_dir")
    check_writable(Path(config.metrics_path).parent, "metrics_path")
    return Preflight(algorithm, topology, facts, actor, stored, replay_file, reports_success)


def resume_ignored_changes(
    algorithm: Algorithm, config: Config, stored_config: dict[str, Any]
) -> list[str]:
    """The warnings for params this config changes from the checkpoint's config but a resumed
    run does not read (``Algorithm.resume_ignored_params``: ``learning_rate`` under
    ``adaptive_kl``, whose step size is the optimiser's checkpointed state); empty if none."""
    stored_params = stored_config.get("algo_params") or {}
    warnings = []
    for name in algorithm.resume_ignored_params(config.algo_params):
        edited, stored = getattr(config.algo_params, name), stored_params.get(name)
        if stored is not None and edited != stored:
            warnings.append(
                f"warning: algo_params.{name} {edited} is not read on resume (the checkpoint's "
                f"run had {stored}): the run goes on from the value its checkpointed learner "
                "state holds"
            )
    return warnings


def check_learner_device(
    algorithm: Algorithm, config: Config, actor: ProbedActor, topology: TrainingTopology
) -> None:
    """The algorithm's rules that need the learner device and count (a CUDA graph, say), before
    any learner starts."""
    algorithm.check_learner_device(
        config.algo_params, actor.spec, topology.learner_device, topology.num_learners
    )


def _replay_file(
    algorithm: Algorithm,
    config: Config,
    resume: str | Path | None,
    resume_replay: bool,
    stored: Checkpoint | None,
) -> Path | None:
    """The replay file ``--resume-replay`` refills from: beside the resumed checkpoint, and
    stamped with it (``check_replay_belongs``)."""
    if not resume_replay:
        return None
    if resume is None or stored is None:
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
    check_replay_belongs(path, stored, Path(resume))
    return path


def load_for_resume(
    path: Path,
    config: Config,
    semantics: dict[str, Any],
    facts: EnvFacts,
    actor_shapes: dict[str, tuple[int, ...]] | None = None,
) -> Checkpoint:
    """The checkpoint to resume from, refused before anything starts unless it fits: also each
    learner's policy actor against ``actor_shapes``, the tensors of this run's actor (a learner
    would otherwise fail to load it only once its process started).

    A checkpoint that trained all of ``total_env_steps`` resumes only when its final evaluation
    is missing (the run was stopped during it): the resumed run evaluates it and ends.
    """
    checkpoint = read_verified_checkpoint(path)
    problem = checkpoint.algorithm.check_resume_actor(
        config.algo_params, checkpoint.actor_semantics
    )
    if problem is not None:
        raise ConfigError(f"{path}: cannot resume: {problem}")
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
            config.algo_params, state, facts.critic_dim, facts.action_dim
        )
        if problem is not None:
            raise ConfigError(f"{path}: cannot resume: learner_states[{index}]: {problem}")
    if checkpoint.progress.env_steps >= config.total_env_steps and checkpoint.evaluation:
        raise UsageError(
            f"{path}: already trained {checkpoint.progress.env_steps} of total_env_steps="
            f"{config.total_env_steps}; raise total_env_steps in the config to continue"
        )
    return checkpoint

"""``drl train``: the round loop of Method.md on a Ray topology.

Each round: every rollout actor samples with its learner's parameters and the global observation
statistics; the driver merges the rounds' observation increments and the ParameterServer merges
them once into the history; each learner trains on its own rollout actors' trajectories; on a
sync round the ParameterServer averages all learners' parameters and every learner loads them.
Then one metrics row, the latest checkpoint, and the best checkpoint when the return improved.
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

from drlcli import __version__
from drlcli.actors.spec import ActorSpec, actor_semantics, build_policy_actor
from drlcli.algos.flash_sac.learner import flash_sac_actor_spec, resolve_cuda_graph
from drlcli.algos.ppo.learner import gaussian_actor_spec
from drlcli.checkpoint import (
    FORMAT_NAME,
    FORMAT_VERSION,
    load_checkpoint,
    save_checkpoint,
    validate_actor_semantics,
    validate_learner_states,
)
from drlcli.config import Config
from drlcli.envs import env_facts, make_env
from drlcli.errors import CheckpointError, UsageError
from drlcli.metrics import MetricsWriter, metric_columns
from drlcli.runtime.progress import TrainingProgress
from drlcli.runtime.ray_session import ray_session
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


@dataclass
class RunProgress:
    """The counters a checkpoint stores and resume continues from."""

    round: int = 0
    env_steps: int = 0
    wall_time_s: float = 0.0
    best_return: float | None = None


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
    # Counts are checked before anything starts; the hardware may still change the learner
    # count once a cluster is joined.
    topology = resolve_for(config, devices or detect_available_devices())
    env = make_env(
        config.env.id, max_episode_steps=config.env.max_episode_steps, **config.env.kwargs
    )
    facts = env_facts(env)
    env.close()
    spec = actor_spec_for(config, facts)
    # Build the policy actor once here: a broken custom actor fails before anything starts, and
    # its action transform and aux-loss names are known for the semantics and the CSV header.
    probe = build_policy_actor(spec, facts.obs_dim, facts.action_dim)
    semantics = actor_semantics(spec, facts.obs_dim, facts.action_dim, probe.action_transform_id)
    aux_names = _aux_loss_names(probe, facts.obs_dim)
    del probe
    if config.algo == "flash_sac":  # ADR-0017's CUDA-graph rules, before any worker starts
        resolve_cuda_graph(config.algo_params, spec, torch.device(topology.learner_device))
    stored = None if resume is None else _load_for_resume(Path(resume), config, semantics)
    replay_file = _replay_file(config, resume, resume_replay)

    num_cpus = max(os.cpu_count() or 1, topology.num_actors + topology.num_learners)
    with ray_session(address, num_cpus=num_cpus):
        if address and devices is None:
            topology = resolve_for(config, _cluster_devices())
        steps_per_round = topology.num_actors * config.env.num_envs * config.rollout_length
        progress = _stored_progress(stored, resume) if stored is not None else RunProgress()
        # Counted in env steps, so a resume may change the round size (more rollout actors).
        rounds_left = math.ceil((config.total_env_steps - progress.env_steps) / steps_per_round)
        total_rounds = progress.round + rounds_left
        if rounds_left <= 0:
            raise UsageError(
                f"{resume}: already trained {progress.env_steps} of total_env_steps="
                f"{config.total_env_steps}; raise total_env_steps in the config to continue"
            )
        columns = metric_columns(config.algo, aux_names)
        writer = MetricsWriter(config.metrics_path, columns, append=stored is not None)
        try:
            return _run(
                config,
                topology,
                spec,
                semantics,
                facts,
                stored,
                replay_file,
                progress,
                total_rounds,
                steps_per_round,
                writer,
                quiet,
                console,
            )
        finally:
            writer.close()


def actor_spec_for(config: Config, facts: Any) -> ActorSpec:
    """The policy actor of a run: the algorithm's built-in one, or FlashSAC's actor_config."""
    if config.algo == "flash_sac":
        return flash_sac_actor_spec(config.algo_params, facts.action_low, facts.action_high)
    return gaussian_actor_spec(config.algo_params, facts.action_low, facts.action_high)


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


def _stored_progress(stored: dict[str, Any], resume: Any) -> RunProgress:
    counters = stored.get("progress")
    try:
        return RunProgress(**{f.name: counters[f.name] for f in dataclasses.fields(RunProgress)})
    except (KeyError, TypeError) as error:
        raise CheckpointError(
            f"{resume}: checkpoint progress counters are malformed ({error})"
        ) from None


def _replay_file(config: Config, resume: str | Path | None, resume_replay: bool) -> Path | None:
    if not resume_replay:
        return None
    if resume is None:
        raise UsageError("--resume-replay needs --resume CKPT")
    if config.algo != "flash_sac":
        raise UsageError(f"--resume-replay applies to flash_sac; this config trains {config.algo}")
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


def _load_for_resume(path: Path, config: Config, semantics: dict[str, Any]) -> dict[str, Any]:
    payload = load_checkpoint(path)
    validate_actor_semantics(payload.get("actor_semantics"), semantics, source=str(path))
    if payload.get("algo") != config.algo:
        raise CheckpointError(
            f"{path}: checkpoint of algo {payload.get('algo')!r}, config trains {config.algo!r}"
        )
    stored_env = payload.get("env", {}).get("id")
    if stored_env != config.env.id:
        raise CheckpointError(
            f"{path}: checkpoint trained {stored_env!r}, config has {config.env.id!r}"
        )
    stored_kwargs = payload.get("env", {}).get("kwargs", {})
    if stored_kwargs != config.env.kwargs:
        raise CheckpointError(
            f"{path}: checkpoint trained {stored_env} with env.kwargs {stored_kwargs}, the config "
            f"has {config.env.kwargs}; the task would change under the policy"
        )
    validate_learner_states(payload.get("learner_states"), config.algo, source=str(path))
    return payload


class StopRequest:
    """Ctrl-C during training: the first finishes the round in progress (its metrics row and
    checkpoint are written), the second aborts at once. Outside the main thread it does nothing.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.console.print("stopping after this round (Ctrl-C again to abort now)", style="yellow")

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _run(
    config: Config,
    topology: TrainingTopology,
    spec: Any,
    semantics: dict[str, Any],
    facts: Any,
    stored: dict[str, Any] | None,
    replay_file: Path | None,
    progress: RunProgress,
    total_rounds: int,
    steps_per_round: int,
    writer: MetricsWriter,
    quiet: bool,
    console: Console,
) -> TrainingSummary:
    from drlcli.runtime.flash_sac_loop import FlashSACRoundLoop
    from drlcli.runtime.ppo_loop import PPORoundLoop

    loop_type = FlashSACRoundLoop if config.algo == "flash_sac" else PPORoundLoop
    loop = loop_type(config, topology, spec, facts, stored)
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
    try:
        with display, StopRequest(console) as stop:
            for round_index in range(progress.round, total_rounds):
                if stop.requested:
                    raise KeyboardInterrupt
                round_started = time.perf_counter()
                fraction_done = progress.env_steps / planned_env_steps
                stats, learner_metrics = loop.run_round(round_index, fraction_done)
                progress.round = round_index + 1
                progress.env_steps += steps_per_round
                now = time.perf_counter()
                progress.wall_time_s = now - started
                row = _metrics_row(
                    progress, stats, learner_metrics, steps_per_round / (now - round_started)
                )
                writer.write(row)
                returned = row["episode_return_mean"]
                improved = returned is not None and (
                    progress.best_return is None or returned > progress.best_return
                )
                if returned is not None:
                    last_return = returned
                if improved:
                    progress.best_return = returned
                obs_rms_state, learner_states = loop.checkpoint_parts()
                payload = build_checkpoint_payload(
                    config, semantics, facts, progress, obs_rms_state, learner_states
                )
                save_checkpoint(config.checkpoint_path, payload)
                if getattr(config.algo_params, "save_replay_buffer", False):
                    loop.save_replay(replay_path(config.checkpoint_path))
                if improved:
                    save_checkpoint(config.best_checkpoint_path, payload)
                display.update(row, total_rounds)
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
    )
    display.summary(summary)
    return summary


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
        **learner_metrics,
    }


def _to_tensors(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, dict):
        return {k: _to_tensors(v) for k, v in value.items()}
    return value


def build_checkpoint_payload(
    config: Config,
    semantics: dict[str, Any],
    facts: Any,
    progress: RunProgress,
    obs_rms_state: dict[str, Any] | None,
    learner_states: list[dict[str, Any]],
) -> dict[str, Any]:
    import gymnasium
    import mujoco

    params = config.algo_params
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "algo": config.algo,
        "actor": learner_states[0]["actor"],
        # PPO with normalisation off and FlashSAC (input BatchNorm inside the actor): none.
        "obs_rms_state": (
            _to_tensors(obs_rms_state)
            if obs_rms_state is not None and getattr(params, "normalize_observations", False)
            else None
        ),
        "observation_clip": getattr(params, "observation_clip", 10.0),
        "actor_semantics": semantics,
        "env": {
            **facts.to_dict(),
            "max_episode_steps": config.env.max_episode_steps,
            "kwargs": dict(config.env.kwargs),
        },
        "progress": {
            "round": progress.round,
            "env_steps": progress.env_steps,
            "wall_time_s": progress.wall_time_s,
            "best_return": progress.best_return,
        },
        "config": config.to_dict(),
        "learner_states": learner_states,
        "versions": {
            "drl": __version__,
            "torch": str(torch.__version__),
            "gymnasium": str(gymnasium.__version__),
            "mujoco": str(mujoco.__version__),
        },
    }

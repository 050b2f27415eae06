"""Deterministic evaluation of a policy: ``transform(mean)`` with frozen observation statistics,
on an environment seeded apart from training's.

``FrozenPolicy`` and ``run_episodes`` run a policy's episodes (training's evaluator here,
``drl play`` and the learning benchmark with a checkpoint's ``play.PlayPolicy``).

``PolicyEvaluator`` is a plain class; the runtime runs it in its own Ray actor so that an
evaluation overlaps the next training round.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.config import EnvConfig
from drlcli.envs import env_facts, make_task_env
from drlcli.normalization import RmsState, normalize_observation
from drlcli.success import ANY_STEP, EpisodeSuccess, success_rate

# Episode i of an evaluation is reset with env.seed + EVALUATION_SEED_OFFSET + i: far from the
# training seeds (env.seed + 10000 * rollout actor + env index) of any topology drl runs.
EVALUATION_SEED_OFFSET = 1_000_000_007


@dataclass(frozen=True)
class EvaluationResult:
    """The episodes of one evaluation of the weights of training step ``env_steps``;
    ``successes``: the outcome of each episode the task reported success in (``drlcli.success``).
    """

    env_steps: int
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    successes: tuple[bool, ...] = ()

    @property
    def return_mean(self) -> float:
        return statistics.fmean(self.returns)

    @property
    def return_std(self) -> float:
        return statistics.pstdev(self.returns) if len(self.returns) > 1 else 0.0

    @property
    def episode_length_mean(self) -> float:
        return statistics.fmean(self.lengths)

    @property
    def success_rate(self) -> float | None:
        return success_rate(self.successes)

    def metrics(self, success: bool | None = None) -> dict[str, float | None]:
        """The metrics-CSV columns of this evaluation, with ``eval_success_rate`` where
        ``success`` (the run has the column; None: where an episode reported success)."""
        columns: dict[str, float | None] = {
            "eval_return_mean": self.return_mean,
            "eval_return_std": self.return_std,
            "eval_episode_length_mean": self.episode_length_mean,
            "eval_env_steps": self.env_steps,
        }
        if success or (success is None and self.successes):
            columns["eval_success_rate"] = self.success_rate
        return columns

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's ``evaluation`` entry (plain data)."""
        return {
            "env_steps": self.env_steps,
            "episodes": len(self.returns),
            "return_mean": self.return_mean,
            "return_std": self.return_std,
            "episode_length_mean": self.episode_length_mean,
            "success_rate": self.success_rate,
        }


@dataclass
class FrozenPolicy:
    """A policy actor with frozen observation statistics: what play and evaluation run.

    Attributes:
        actor: the policy actor, weights loaded, in eval mode.
        obs_rms: frozen observation statistics (None: observations are used raw).
        observation_clip: clip of normalised observations.
    """

    actor: torch.nn.Module
    obs_rms: RmsState | None
    observation_clip: float

    def act(self, obs: np.ndarray, deterministic: bool = True, dones: Any = None) -> np.ndarray:
        """Env actions ``[B, action_dim]`` float32 for raw observations ``[B, obs_dim]``."""
        normalized = normalize_observation(obs, self.obs_rms, self.observation_clip)
        with torch.no_grad():
            actions = self.actor.explore(
                torch.from_numpy(normalized), dones=dones, deterministic=deterministic
            )
        return actions.numpy().astype(np.float32)


@dataclass(frozen=True)
class EpisodeResult:
    episode_return: float
    length: int
    success: bool | None = None  # None: the task did not report success (drlcli.success)


def run_episodes(
    policy: FrozenPolicy,
    episodes: int,
    seed: int,
    deterministic: bool = True,
    env: Any = None,
    on_frame: Callable[[Any], None] | None = None,
    success: tuple[str | None, str] | None = None,
) -> list[EpisodeResult]:
    """Run ``episodes`` full episodes; episode ``i`` is reset with ``seed + i``.

    Args:
        env: an environment to use (e.g. with a render mode); default: a fresh one from the
            policy's ``make_env()`` (``play.PlayPolicy`` has one; a bare ``FrozenPolicy`` needs
            ``env``).
        on_frame: called with the env after every reset and step (rendering, recording).
        success: ``(env.success_key, env.success_when)`` that judge each episode's success;
            default: the policy's ``success`` (``play.PlayPolicy``: its training config's), else
            the defaults.
    """
    own_env = env is None
    if env is None:
        env = policy.make_env()
    if success is None:
        success = getattr(policy, "success", (None, ANY_STEP))
    outcome = EpisodeSuccess(1, *success)
    results = []
    try:
        for index in range(episodes):
            obs, _ = env.reset(seed=seed + index)
            done = np.ones(1, dtype=bool)
            if on_frame is not None:
                on_frame(env)
            episode_return, length = 0.0, 0
            while True:
                action = policy.act(obs[None], deterministic, dones=torch.from_numpy(done))[0]
                obs, reward, terminated, truncated, info = env.step(action)
                outcome.step(0, info)
                done[:] = False
                episode_return += float(reward)
                length += 1
                if on_frame is not None:
                    on_frame(env)
                if terminated or truncated:
                    break
            results.append(EpisodeResult(episode_return, length, outcome.finish(0)))
    finally:
        if own_env:
            env.close()
    return results


class PolicyEvaluator:
    """Runs ``episodes`` deterministic episodes of given weights on its own environment.

    Args:
        env_config: the training task (id, kwargs, time limit; its seed is offset).
        actor_spec: rebuilds the run's policy actor in this process.
        episodes: episodes per evaluation.
    """

    def __init__(self, env_config: EnvConfig, actor_spec: ActorSpec, episodes: int) -> None:
        torch.set_num_threads(1)  # inference on small batches: one thread, no contention
        self.env = make_task_env(env_config.policy_view())  # what the policy alone reads
        facts = env_facts(self.env)
        self.actor = build_policy_actor(
            actor_spec, facts.obs_dim, facts.action_dim, "cpu", facts.action_low, facts.action_high
        )
        self.seed = env_config.seed + EVALUATION_SEED_OFFSET
        self.episodes = episodes
        self.success = (env_config.success_key, env_config.success_when)

    def evaluate(
        self,
        actor_state: dict[str, Any],
        obs_rms_state: dict[str, Any] | None,
        observation_clip: float,
        env_steps: int,
    ) -> EvaluationResult:
        """Load the weights (and frozen statistics) and run the episodes."""
        self.actor.load_state_dict(actor_state)
        self.actor.eval()
        obs_rms = None if obs_rms_state is None else RmsState.from_dict(obs_rms_state)
        policy = FrozenPolicy(self.actor, obs_rms, observation_clip)
        results = run_episodes(
            policy, self.episodes, self.seed, deterministic=True, env=self.env, success=self.success
        )
        returns = tuple(r.episode_return for r in results)
        if not all(math.isfinite(value) for value in returns):
            raise ValueError("evaluation returned a non-finite episode return")
        successes = tuple(r.success for r in results if r.success is not None)
        return EvaluationResult(env_steps, returns, tuple(r.length for r in results), successes)

    def close(self) -> None:
        self.env.close()


class EvaluationHost:
    """Mixin of a training process class (PPO's rollout actor, the off-policy learner worker) that
    can also evaluate, in its own process: a round loop offers one such process to the driver
    (``HasEvaluationHost``), and a run without periodic evaluation evaluates its final policy
    there instead of starting an evaluator process (seconds of CPU, torch's import, for one
    evaluation). The ``PolicyEvaluator`` is built by the first call, with its own environment
    and policy copy: the process's own environments and generators are not touched."""

    _hosted_evaluator: PolicyEvaluator | None = None

    def evaluate_policy(
        self,
        env_config: EnvConfig,
        actor_spec: ActorSpec,
        episodes: int,
        actor_state: dict[str, Any],
        obs_rms_state: dict[str, Any] | None,
        observation_clip: float,
        env_steps: int,
    ) -> EvaluationResult:
        """``PolicyEvaluator(env_config, actor_spec, episodes).evaluate(...)`` in this process."""
        if self._hosted_evaluator is None:
            self._hosted_evaluator = PolicyEvaluator(env_config, actor_spec, episodes)
        return self._hosted_evaluator.evaluate(
            actor_state, obs_rms_state, observation_clip, env_steps
        )

    def close_hosted_evaluator(self) -> None:
        if self._hosted_evaluator is not None:
            self._hosted_evaluator.close()

"""Deterministic evaluation of a policy: ``transform(mean)`` with frozen observation statistics,
on an environment seeded apart from training's.

``FrozenPolicy`` and ``run_episodes`` run a policy's episodes (training's evaluator,
``runtime/policy_evaluator.py``; ``drl play`` and the learning benchmark with a checkpoint's
``checkpoints.policy.PlayPolicy``); ``EvaluationResult`` is what an evaluation reports.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

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
            policy's ``make_env()`` (``checkpoints.policy.PlayPolicy`` has one; a bare
            ``FrozenPolicy`` needs ``env``).
        on_frame: called with the env after every reset and step (rendering, recording).
        success: ``(env.success_key, env.success_when)`` that judge each episode's success;
            default: the policy's ``success`` (``checkpoints.policy.PlayPolicy``: its training
            config's), else the defaults.
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

"""The evaluator's process class: ``PolicyEvaluator``, a run's deterministic evaluation on an
environment of its own, built from one ``EvaluatorContext``; and ``EvaluationHost``, the mixin of
the training process classes that can run that evaluation in their own process instead.

``runtime/evaluation_runner.py`` decides where it runs (its own Ray actor, so that an evaluation
overlaps the next training round, or a host) and when.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from drlcli.actors.spec import build_policy_actor
from drlcli.envs import env_facts, make_task_env
from drlcli.evaluation import (
    EVALUATION_SEED_OFFSET,
    EvaluationResult,
    FrozenPolicy,
    run_episodes,
)
from drlcli.normalization import RmsState
from drlcli.runtime.run_context import EvaluatorContext


class PolicyEvaluator:
    """Runs ``context.episodes`` deterministic episodes of given weights on its own environment
    (the task as the policy reads it, seeded ``EVALUATION_SEED_OFFSET`` past training's), with its
    own copy of the run's policy actor."""

    def __init__(self, context: EvaluatorContext) -> None:
        torch.set_num_threads(1)  # inference on small batches: one thread, no contention
        env_config = context.env
        self.env = make_task_env(env_config.policy_view())  # what the policy alone reads
        facts = env_facts(self.env)
        self.actor = build_policy_actor(
            context.spec,
            facts.obs_dim,
            facts.action_dim,
            "cpu",
            facts.action_low,
            facts.action_high,
        )
        self.seed = env_config.seed + EVALUATION_SEED_OFFSET
        self.episodes = context.episodes
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
        context: EvaluatorContext,
        actor_state: dict[str, Any],
        obs_rms_state: dict[str, Any] | None,
        observation_clip: float,
        env_steps: int,
    ) -> EvaluationResult:
        """``PolicyEvaluator(context).evaluate(...)`` in this process."""
        if self._hosted_evaluator is None:
            self._hosted_evaluator = PolicyEvaluator(context)
        return self._hosted_evaluator.evaluate(
            actor_state, obs_rms_state, observation_clip, env_steps
        )

    def close_hosted_evaluator(self) -> None:
        if self._hosted_evaluator is not None:
            self._hosted_evaluator.close()

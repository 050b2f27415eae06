"""The record an off-policy learner is built from (``LearnerContext``), for tests that build
one directly."""

from __future__ import annotations

import math
from typing import Any

from drlcli.actors.spec import ActorSpec
from drlcli.algos.entry_types import LearnerContext, RoundPlan
from drlcli.env_facts import EnvFacts


def learner_context(
    spec: ActorSpec,
    facts: EnvFacts,
    params: Any,
    gamma: float = 0.99,
    *,
    updates: int = 100,
    learners: int = 1,
    device: str = "cpu",
    seed: int = 0,
) -> LearnerContext:
    """A context whose run plans ``updates`` updates per learner (FlashSAC's schedules): the
    env steps that, shared by ``learners`` at ``params.updates_per_env_step``, give them."""
    per_step = getattr(params, "updates_per_env_step", 1.0)
    env_steps = math.ceil(updates * learners / per_step)
    plan = RoundPlan(1, max(env_steps, 1))
    return LearnerContext(spec, facts, params, gamma, env_steps, learners, device, seed, plan)

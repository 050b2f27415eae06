"""MuJoCoActor: PPO's rollout actor, the Ray shell around ``algos/ppo/sampler.py``'s
``RolloutSampler`` (the sampling maths, Ray-free). It builds the environments and the generator
in its own process, adds its identity to what it returns (``actor_id``, and the ``process_id``
that tells the driver a restarted process), and, as an ``EvaluationHost``, evaluates a run's
final policy when the run has no evaluator.

A plain class: the runtime wraps it with ``ray.remote``; tests use it in-process.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from drlcli.algos.ppo.params import PPOParams
from drlcli.algos.ppo.sampler import RolloutSampler
from drlcli.envs import EnvBatch, rollout_actor_seed
from drlcli.errors import CheckpointError
from drlcli.runtime.policy_evaluator import EvaluationHost
from drlcli.runtime.run_context import RolloutActorContext


def rollout_actor_states(state: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The stored states of a learner's rollout actors (``MuJoCoActor.state_dict()`` each, in
    the order of ``Topology.actors_of_learner``), or None where the checkpoint has none.

    Checkpoints of format version 1 kept each actor's reward-scaler moments apart, under the
    learner (``reward_scalers``); they are put back into the actor's state, and an actor with
    moments but no stored episodes becomes ``{"reward_scaler": moments}`` alone.
    """
    actors = state.get("rollout_actors")
    scalers = state.get("reward_scalers")  # format version 1
    if scalers is None:
        return actors
    if actors is None or len(actors) != len(scalers):
        return [{"reward_scaler": moments} for moments in scalers]
    pairs = zip(actors, scalers, strict=True)
    return [{**actor, "reward_scaler": moments} for actor, moments in pairs]


class MuJoCoActor(RolloutSampler, EvaluationHost):
    """Rollout actor ``actor_id``: collects on-policy trajectories for its learner.

    Args:
        context: its id (seeds its environments and sampling noise), the task and how many
            environments it steps together, the policy actor it rebuilds in this process
            (spawn-safe), PPO's parameters (network shape, normalisation switches) and the
            discount (reward scaling).
    """

    def __init__(self, context: RolloutActorContext) -> None:
        params: PPOParams = context.params
        torch.set_num_threads(1)  # small networks: one thread is fastest and deterministic
        self.actor_id = context.actor_id
        seed = rollout_actor_seed(context.env, context.actor_id)
        torch.manual_seed(seed)  # before the networks are built: their initialisation too
        envs = EnvBatch.for_rollout_actor(context.env, context.actor_id)
        super().__init__(envs, context.spec, params, context.gamma, seed)

    def identity(self) -> dict[str, Any]:
        """``actor_id``, and the ``process_id`` that tells the driver a restarted process (a
        checkpoint does not store it)."""
        return {"actor_id": self.actor_id, "process_id": os.getpid()}

    def load_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Continue where ``state_dict`` was taken. Returns ``{actor_id, process_id}``.

        Raises:
            CheckpointError: the state does not fit this rollout actor.
        """
        try:
            super().load_state_dict(state)
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise CheckpointError(
                f"rollout actor {self.actor_id}'s stored state does not fit it ({error})"
            ) from None
        return self.identity()

    def close(self) -> None:
        super().close()
        self.close_hosted_evaluator()

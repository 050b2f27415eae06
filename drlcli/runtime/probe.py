"""What the driver learns by building a run's policy actor once, before any process starts: a
broken custom actor fails here, in the driver, in one line."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from drlcli.actors.contract import declared_inference_memory, on_a_copy
from drlcli.actors.memory import module_memory_bytes
from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.entry_types import Algorithm
from drlcli.checkpoints.semantics import actor_semantics
from drlcli.config import Config
from drlcli.env_facts import EnvFacts


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
    algorithm's own requirements), then describe it. It reads the policy's observation (with a
    privileged critic, the policy group)."""
    facts = facts.policy_facts()
    spec = algorithm.actor_spec(config.algo_params, facts.action_low, facts.action_high)
    probe = build_policy_actor(
        spec,
        facts.obs_dim,
        facts.action_dim,
        action_low=facts.action_low,
        action_high=facts.action_high,
    )
    algorithm.check_actor(probe, config.algo_params, facts.obs_dim, facts.action_dim)
    return ProbedActor(
        spec=spec,
        semantics=actor_semantics(spec, facts.obs_dim, facts.action_dim, probe.action_transform_id),
        aux_loss_names=_aux_loss_names(probe, facts.obs_dim),
        inference_memory=declared_inference_memory(probe),
        parameter_bytes=sum(module_memory_bytes(probe).values()),
        tensor_shapes={name: tuple(t.shape) for name, t in probe.state_dict().items()},
    )


def _aux_loss_names(actor: Any, obs_dim: int) -> list[str]:
    """The actor's auxiliary-loss names, from one training-mode forward on a copy (or on the
    actor itself, restored afterwards, when it cannot be copied: ``on_a_copy``)."""
    with on_a_copy(actor) as probe:
        _, info = probe(torch.zeros(2, obs_dim), training=True)
    return sorted(info.get("aux_losses") or {})

"""What follows from whether a policy actor's builder is drl's own (``actor_kind``, the
registry's built-in builders): a checkpoint's ``actor_semantics`` entry, and the tensor shapes
of a built-in actor without running its builder for real.

Above the registry: ``ActorSpec`` (``spec.py``) stays plain data that the registry's entries
build, with no import back.
"""

from __future__ import annotations

import json

from drlcli.actors.spec import SEMANTICS_SCHEMA_VERSION, ActorSpec, resolve_builder
from drlcli.algos.registry import actor_kind


def builtin_tensor_shapes(spec: ActorSpec, obs_dim: int, action_dim: int) -> dict[str, tuple]:
    """The shape of every tensor of the state dict ``spec``'s builder makes, built on the meta
    device: no memory for the weights and no initialisation run, whatever size the kwargs ask
    for (those of an untrusted file). For drl's own builders (``kind == "builtin"``): a custom
    builder is not imported here."""
    import torch

    if actor_kind(spec.builder) != "builtin":
        raise ValueError(f"builtin_tensor_shapes: {spec.builder} is not a built-in builder")
    builder = resolve_builder(spec)
    with torch.device("meta"):
        module = builder(obs_dim=obs_dim, action_dim=action_dim, device="meta", **spec.kwargs)
    return {name: tuple(tensor.shape) for name, tensor in module.state_dict().items()}


def actor_semantics(spec: ActorSpec, obs_dim: int, action_dim: int, action_transform: str) -> dict:
    """The ``actor_semantics`` entry of a checkpoint (plain JSON-compatible data)."""
    return {
        "schema_version": SEMANTICS_SCHEMA_VERSION,
        "kind": actor_kind(spec.builder),
        "builder": spec.builder,
        "kwargs": json.loads(json.dumps(spec.kwargs)),
        "obs_dim": int(obs_dim),
        "action_dim": int(action_dim),
        "action_transform": action_transform,
    }

"""The policy-actor contract (docs/adr/0017-custom-policy-actors.md) and its fail-closed
validation.

A *policy actor* is the ``nn.Module`` that maps (normalised) observations to actions; it is the
one instance a learner optimises (``learner.actor``) and the one exploration and export use.
Every built-in actor and every custom actor passes ``validate_policy_actor`` at construction.

Required surface (``B`` = batch, ``O`` = obs_dim, ``A`` = action_dim):

- ``forward(obs [B, O], training: bool) -> (actions [B, A], info)``; ``info["log_prob"]`` ``[B]``
  is the log-prob of the returned (transformed) action, including log|det J| of the action
  transform. With ``training=True``, ``info["aux_losses"]`` may hold ``dict[str, 0-dim Tensor]``
  (already weighted) that the learner adds to the actor objective.
- ``get_mean_and_std(obs) -> (mean [B, A], std [B, A])`` of the pre-transform distribution.
- ``explore(obs, dones=None, deterministic=False) -> env actions [B, A]``; deterministic gives
  ``transform(mean)``.
- ``as_export_module() -> nn.Module``: ``obs [B, O] -> transform(mean) [B, A]``.
- ``normalize_parameters() -> None`` (a no-op where the architecture needs none); it updates
  parameters in place (``p.copy_(...)``), never replaces them (``p.data = ...``): learners may
  keep parameters as views of one flat tensor (``drlcli.flat_parameters``).
- ``inference_startup_memory_categories() -> dict[str, int]``: bytes per memory category
  (parameters, buffers) needed to start inference.
- ``action_transform_id: str``, non-empty: names the action transform in ``actor_semantics``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from drlcli.errors import PolicyActorContractError

REQUIRED_METHODS = (
    "forward",
    "get_mean_and_std",
    "explore",
    "as_export_module",
    "normalize_parameters",
    "inference_startup_memory_categories",
)

SMOKE_BATCH = 3


def module_memory_bytes(module: nn.Module) -> dict[str, int]:
    """Bytes of a module's parameters and buffers: the usual answer of
    ``inference_startup_memory_categories()`` for an actor that needs nothing else."""
    return {
        "parameters": sum(p.numel() * p.element_size() for p in module.parameters()),
        "buffers": sum(b.numel() * b.element_size() for b in module.buffers()),
    }


def validate_policy_actor(actor: Any, obs_dim: int, action_dim: int) -> None:
    """Check an actor against the contract with a smoke forward/explore/export.

    The smoke test runs on a deep copy (or, for an actor that cannot be copied, in place with
    parameters, buffers and training flag restored), and torch's global RNG state is restored,
    so validating changes nothing a later run could observe.

    Raises:
        PolicyActorContractError: naming the first missing or wrong piece.
    """
    name = type(actor).__name__
    if not isinstance(actor, nn.Module):
        raise PolicyActorContractError(f"policy actor {name} must be a torch.nn.Module")
    for method in REQUIRED_METHODS:
        if not callable(getattr(actor, method, None)):
            raise PolicyActorContractError(f"policy actor {name} lacks required method {method}()")
    transform_id = getattr(actor, "action_transform_id", None)
    if not isinstance(transform_id, str) or not transform_id:
        raise PolicyActorContractError(
            f"policy actor {name}: action_transform_id must be a non-empty string, "
            f"got {transform_id!r}"
        )

    saved_rng = torch.get_rng_state()
    try:
        # Smoke-test a copy: the actor itself (parameters, buffers, exploration state) is left
        # exactly as it was. Actors that cannot be copied are tested in place and restored.
        probe = copy.deepcopy(actor)
    except Exception:
        probe = None
    try:
        if probe is not None:
            _smoke(probe, name, obs_dim, action_dim)
        else:
            saved_state = copy.deepcopy(actor.state_dict())
            saved_training = actor.training
            try:
                _smoke(actor, name, obs_dim, action_dim)
            finally:
                actor.load_state_dict(saved_state)
                actor.train(saved_training)
    finally:
        torch.set_rng_state(saved_rng)


def _smoke(actor: Any, name: str, obs_dim: int, action_dim: int) -> None:
    device = next((p.device for p in actor.parameters()), torch.device("cpu"))
    obs = torch.zeros(SMOKE_BATCH, obs_dim, device=device)
    expected = (SMOKE_BATCH, action_dim)

    for training in (False, True):
        with torch.set_grad_enabled(training):
            result = actor(obs, training=training)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
            raise PolicyActorContractError(
                f"policy actor {name}: forward(obs, training) must return (actions, info dict)"
            )
        actions, info = result
        _check_shape(name, f"forward(training={training}) actions", actions, expected)
        log_prob = info.get("log_prob")
        if not isinstance(log_prob, torch.Tensor) or tuple(log_prob.shape) != (SMOKE_BATCH,):
            raise PolicyActorContractError(
                f"policy actor {name}: forward info['log_prob'] must be a Tensor of shape "
                f"[batch]={SMOKE_BATCH}, got {_shape_of(log_prob)}"
            )
        aux = info.get("aux_losses", {})
        if not isinstance(aux, dict) or not all(
            isinstance(key, str) and isinstance(value, torch.Tensor) and value.dim() == 0
            for key, value in aux.items()
        ):
            raise PolicyActorContractError(
                f"policy actor {name}: info['aux_losses'] must be dict[str, 0-dim Tensor]"
            )

    with torch.no_grad():
        mean_std = actor.get_mean_and_std(obs)
        if not (isinstance(mean_std, tuple) and len(mean_std) == 2):
            raise PolicyActorContractError(
                f"policy actor {name}: get_mean_and_std(obs) must return (mean, std)"
            )
        _check_shape(name, "get_mean_and_std mean", mean_std[0], expected)
        _check_shape(name, "get_mean_and_std std", mean_std[1], expected)
        dones = torch.zeros(SMOKE_BATCH, dtype=torch.bool, device=device)
        deterministic = actor.explore(obs, dones=dones, deterministic=True)
        _check_shape(name, "explore(deterministic=True)", deterministic, expected)
        _check_shape(
            name, "explore(deterministic=False)", actor.explore(obs, dones=dones), expected
        )
        export_module = actor.as_export_module()
        if not isinstance(export_module, nn.Module):
            raise PolicyActorContractError(
                f"policy actor {name}: as_export_module() must return an nn.Module"
            )
        exported = export_module(obs)
        _check_shape(name, "as_export_module()(obs)", exported, expected)
        if not torch.allclose(exported, deterministic, atol=1e-6):
            raise PolicyActorContractError(
                f"policy actor {name}: as_export_module() and explore(deterministic=True) must "
                "both return transform(mean); they differ"
            )
    actor.normalize_parameters()
    memory = actor.inference_startup_memory_categories()
    if not isinstance(memory, dict) or not all(
        isinstance(key, str) and isinstance(value, int) for key, value in memory.items()
    ):
        raise PolicyActorContractError(
            f"policy actor {name}: inference_startup_memory_categories() must return "
            "dict[str, int] (bytes per category)"
        )


def _shape_of(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return str(list(value.shape))
    return type(value).__name__


def _check_shape(name: str, what: str, value: Any, expected: tuple[int, int]) -> None:
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != expected:
        raise PolicyActorContractError(
            f"policy actor {name}: {what} must be a Tensor of shape {list(expected)}, "
            f"got {_shape_of(value)}"
        )
    if not torch.isfinite(value).all():
        raise PolicyActorContractError(f"policy actor {name}: {what} is not finite")

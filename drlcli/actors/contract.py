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
- ``as_export_module() -> nn.Module``: ``obs [B, O] -> transform(mean) [B, A]``. A recurrent
  actor (ADR 0018: it has ``recurrent_state_shape(B)``) exports ``(obs, state) -> (actions,
  state after the step)``, and its ``explore`` zeroes its state where ``dones`` is true.
- ``normalize_parameters() -> None`` (a no-op where the architecture needs none); it updates
  parameters in place (``p.copy_(...)``), never replaces them (``p.data = ...``): learners may
  keep parameters as views of one flat tensor (``drlcli.flat_parameters``).
- ``inference_startup_memory_categories() -> dict[str, int]``: bytes per memory category
  (parameters, buffers) needed to start inference.
- ``action_transform_id: str``, non-empty: names the action transform in ``actor_semantics``.

Given the environment's action bounds, the smoke test also requires ``explore`` (both modes),
the export module and ``forward`` to return actions inside them, except ``forward`` under a
transform the runtime applies to its samples (``ENV_SIDE_TRANSFORMS``: PPO's ``clip``).

An on-policy learner (PPO) needs one more method, checked by ``validate_on_policy_actor``:

- ``log_prob_and_entropy(obs [B, O], actions [B, A]) -> (log_prob [B], entropy [B])`` of
  actions ``forward`` returned, equal to forward's ``info["log_prob"]`` (so the first PPO ratio
  of a round is exactly 1).
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np
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
# Transforms the runtime applies to forward()'s samples before env.step (prepare_action): the
# actor's forward() returns pre-transform samples, explore() and export return env actions.
ENV_SIDE_TRANSFORMS = frozenset({"clip"})
# Relative slack of the bounds check (float32 rounding of bias + range * tanh(u), say).
BOUNDS_TOLERANCE = 1e-5


class OnPolicyActor(Protocol):
    """What an on-policy learner (PPO) calls beyond the contract."""

    def log_prob_and_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-prob ``[B]`` of stored ``forward`` actions and the policy entropy ``[B]``."""
        ...


def validate_policy_actor(
    actor: Any,
    obs_dim: int,
    action_dim: int,
    action_low: Sequence[float] | None = None,
    action_high: Sequence[float] | None = None,
) -> None:
    """Check an actor against the contract with a smoke forward/explore/export.

    The smoke test runs on a deep copy (or, for an actor that cannot be copied, in place with
    parameters, buffers and training flag restored), and every global random stream (torch's
    CPU and CUDA generators, numpy's, Python's) is restored, so validating changes nothing a
    later run could observe.

    Args:
        action_low, action_high: the environment's bounds ``[action_dim]``; when both are
            given, the actions of explore (both modes), the export module and forward (unless
            its transform is applied by the runtime) must lie inside them.

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
    bounds = None
    if action_low is not None and action_high is not None:
        bounds = (
            torch.as_tensor(action_low, dtype=torch.float32).reshape(-1),
            torch.as_tensor(action_high, dtype=torch.float32).reshape(-1),
        )
    with on_a_copy(actor) as probe:
        _smoke(probe, name, obs_dim, action_dim, bounds)


def validate_on_policy_actor(actor: Any, obs_dim: int) -> None:
    """Check what an on-policy learner (PPO) needs beyond the contract (``OnPolicyActor``):
    ``log_prob_and_entropy`` exists, returns ``[B]`` tensors, and gives forward's own log-prob
    for forward's actions. Leaves no trace, as ``validate_policy_actor``.

    Raises:
        PolicyActorContractError: naming the missing or wrong piece.
    """
    name = type(actor).__name__
    if not callable(getattr(actor, "log_prob_and_entropy", None)):
        raise PolicyActorContractError(
            f"policy actor {name} lacks log_prob_and_entropy(obs, actions), which PPO needs "
            "(drlcli/actors/contract.py, OnPolicyActor)"
        )
    with on_a_copy(actor) as probe, torch.no_grad():
        obs = _smoke_observations(probe, obs_dim)
        actions, info = probe(obs, training=False)
        result = probe.log_prob_and_entropy(obs, actions)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise PolicyActorContractError(
                f"policy actor {name}: log_prob_and_entropy must return (log_prob, entropy)"
            )
        for what, value in zip(("log_prob", "entropy"), result, strict=True):
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != (SMOKE_BATCH,):
                raise PolicyActorContractError(
                    f"policy actor {name}: log_prob_and_entropy {what} must be a Tensor of "
                    f"shape [batch]={SMOKE_BATCH}, got {_shape_of(value)}"
                )
        if not torch.allclose(result[0], info["log_prob"], rtol=1e-4, atol=1e-5):
            raise PolicyActorContractError(
                f"policy actor {name}: log_prob_and_entropy(obs, a) must equal forward's "
                "info['log_prob'] for forward's own actions a (else the first PPO ratio is not 1)"
            )


@contextlib.contextmanager
def on_a_copy(actor: Any) -> Iterator[Any]:
    """A deep copy to smoke-test (the actor, its parameters, buffers and exploration state stay
    as they were), or the actor itself, restored afterwards, when it cannot be copied; every
    global random stream is restored either way."""
    with _random_streams_restored():
        try:
            probe = copy.deepcopy(actor)
        except Exception:
            probe = None
        if probe is not None:
            yield probe
            return
        saved_state = copy.deepcopy(actor.state_dict())
        saved_training = actor.training
        try:
            yield actor
        finally:
            actor.load_state_dict(saved_state)
            actor.train(saved_training)


@contextlib.contextmanager
def _random_streams_restored() -> Iterator[None]:
    numpy_state = np.random.get_state()
    python_state = random.getstate()
    cuda_devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=cuda_devices):  # CPU and CUDA generators
            yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def _smoke_observations(actor: Any, obs_dim: int) -> torch.Tensor:
    """Zeros and two spread-out observations (a private generator: no global stream moves),
    so a transform that overshoots the bounds away from zero is met."""
    device = next((p.device for p in actor.parameters()), torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    spread = torch.randn(SMOKE_BATCH - 1, obs_dim, generator=generator) * 3.0
    return torch.cat([torch.zeros(1, obs_dim), spread]).to(device)


def _smoke(
    actor: Any,
    name: str,
    obs_dim: int,
    action_dim: int,
    bounds: tuple[torch.Tensor, torch.Tensor] | None,
) -> None:
    obs = _smoke_observations(actor, obs_dim)
    device = obs.device
    expected = (SMOKE_BATCH, action_dim)
    if bounds is not None:
        bounds = (bounds[0].to(device), bounds[1].to(device))

    for training in (False, True):
        with torch.set_grad_enabled(training):
            result = actor(obs, training=training)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
            raise PolicyActorContractError(
                f"policy actor {name}: forward(obs, training) must return (actions, info dict)"
            )
        actions, info = result
        _check_shape(name, f"forward(training={training}) actions", actions, expected)
        if actor.action_transform_id not in ENV_SIDE_TRANSFORMS:
            _check_bounds(name, f"forward(training={training})", actions, bounds)
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
        # Each observation starts an episode, then goes on: a recurrent actor's explore
        # reads a zero state first, as its export module is fed below.
        starts = torch.ones(SMOKE_BATCH, dtype=torch.bool, device=device)
        deterministic = actor.explore(obs, dones=starts, deterministic=True)
        _check_shape(name, "explore(deterministic=True)", deterministic, expected)
        _check_bounds(name, "explore(deterministic=True)", deterministic, bounds)
        stochastic = actor.explore(obs, dones=torch.zeros_like(starts))
        _check_shape(name, "explore(deterministic=False)", stochastic, expected)
        _check_bounds(name, "explore(deterministic=False)", stochastic, bounds)
        export_module = actor.as_export_module()
        if not isinstance(export_module, nn.Module):
            raise PolicyActorContractError(
                f"policy actor {name}: as_export_module() must return an nn.Module"
            )
        exported = export_actions(actor, export_module, obs)
        _check_shape(name, "as_export_module()(obs)", exported, expected)
        _check_bounds(name, "as_export_module()(obs)", exported, bounds)
        if not torch.allclose(exported, deterministic, atol=1e-6):
            raise PolicyActorContractError(
                f"policy actor {name}: as_export_module() and explore(deterministic=True) must "
                "both return transform(mean); they differ"
            )
    actor.normalize_parameters()
    declared_inference_memory(actor)


def export_actions(actor: Any, export_module: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """The export module's actions for ``obs`` as each episode's first observation: a
    recurrent actor's (``recurrent_state_shape``, ADR 0018) is fed a zero state and returns
    the state after the step too."""
    if not hasattr(actor, "recurrent_state_shape"):
        return export_module(obs)
    state = torch.zeros(actor.recurrent_state_shape(len(obs)), device=obs.device)
    result = export_module(obs, state)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise PolicyActorContractError(
            f"policy actor {type(actor).__name__}: a recurrent actor's as_export_module() must "
            "return (actions, state after the step)"
        )
    return result[0]


def declared_inference_memory(actor: Any) -> dict[str, int]:
    """``actor.inference_startup_memory_categories()``, checked: ``dict[str, int]`` of
    non-negative bytes per category.

    Raises:
        PolicyActorContractError: another shape of answer.
    """
    memory = actor.inference_startup_memory_categories()
    if not isinstance(memory, dict) or not all(
        isinstance(key, str)
        and isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 0
        for key, value in memory.items()
    ):
        raise PolicyActorContractError(
            f"policy actor {type(actor).__name__}: inference_startup_memory_categories() must "
            "return dict[str, int] (non-negative bytes per category)"
        )
    return dict(memory)


def _check_bounds(
    name: str, what: str, actions: torch.Tensor, bounds: tuple[torch.Tensor, torch.Tensor] | None
) -> None:
    if bounds is None:
        return
    low, high = bounds
    slack = BOUNDS_TOLERANCE * (1.0 + torch.maximum(low.abs(), high.abs()))
    below = (actions < low - slack).any(dim=0)
    above = (actions > high + slack).any(dim=0)
    for index in range(actions.shape[-1]):
        if below[index] or above[index]:
            side, bound = ("low", low) if below[index] else ("high", high)
            column = actions[:, index].detach()
            worst = column.min() if below[index] else column.max()
            raise PolicyActorContractError(
                f"policy actor {name}: {what} returned action {float(worst):.4g} in dimension "
                f"{index}, outside the environment's action_{side} {float(bound[index]):.4g}; "
                "its action transform must map into the bounds"
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

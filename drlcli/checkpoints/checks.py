"""The checks a checkpoint passes before it is used, shared by ``--resume``, ``drl play``,
``drl export`` and ``drl verify``: its ``actor_semantics`` before any weight is loaded, its
learner states before a run resumes, and ``check_fits``, the one "does this checkpoint fit this
environment (and config)" check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from drlcli.actors.spec import SEMANTICS_FIELDS, SUPPORTED_SEMANTICS_VERSIONS
from drlcli.algos.entry_types import Algorithm
from drlcli.checkpoints.record import Checkpoint
from drlcli.env_facts import EnvFacts
from drlcli.env_wrappers import wrapper_records
from drlcli.errors import CheckpointError, SemanticsError
from drlcli.observations import ObservationGroups, describe_layout, layout_from_record

if TYPE_CHECKING:
    from drlcli.config import Config


def tensors_in(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in nested dicts and lists, with its dotted path (``actor.log_std``)."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from tensors_in(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from tensors_in(item, f"{prefix}[{index}]")


def state_dict_problem(state: Any, shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """What keeps ``state`` from loading into a module whose ``state_dict()`` has tensors of
    ``shapes`` (``{name: shape}``), or None."""
    if not isinstance(state, Mapping):
        return f"is a {type(state).__name__}, not a state dict"
    missing = [name for name in shapes if name not in state]
    unexpected = [str(name) for name in state if name not in shapes]
    if missing or unexpected:
        parts = [f"lacks {', '.join(missing)}" if missing else ""]
        parts.append(f"has {', '.join(unexpected)} the actor does not" if unexpected else "")
        return " and ".join(part for part in parts if part)
    for name, shape in shapes.items():
        value = state[name]
        if not isinstance(value, torch.Tensor):
            return f"{name} is a {type(value).__name__}, not a tensor"
        if tuple(value.shape) != tuple(shape):
            return f"{name} has shape {list(value.shape)} where the actor's is {list(shape)}"
    return None


def non_finite_tensors(value: Any) -> list[str]:
    """The paths of the floating tensors in ``value`` that hold a NaN or an infinity."""
    return [
        name
        for name, tensor in tensors_in(value)
        if tensor.is_floating_point() and not torch.isfinite(tensor).all()
    ]


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "schema_version": int,
    "kind": str,
    "builder": str,
    "kwargs": dict,
    "obs_dim": int,
    "action_dim": int,
    "action_transform": str,
}


def validate_actor_semantics(
    semantics: Any, expected: Mapping[str, Any] | None = None, source: str = "checkpoint"
) -> dict[str, Any]:
    """Check a checkpoint's ``actor_semantics`` before any weight is loaded.

    Shared by training resume and play. There is no inference fallback: a checkpoint without
    semantics, with null, or with an unsupported schema version is refused for every actor.

    Args:
        semantics: the stored entry.
        expected: the semantics of the actor about to be built; every field must be equal.
        source: names the checkpoint in messages.

    Returns:
        The validated entry.

    Raises:
        SemanticsError: naming each missing, wrong or differing field (with both values).
    """
    retrain = "; retraining is the only remedy"
    if semantics is None:
        raise SemanticsError(f"{source}: actor_semantics is missing or null{retrain}")
    if not isinstance(semantics, dict):
        raise SemanticsError(f"{source}: actor_semantics must be a mapping{retrain}")
    missing = [name for name in SEMANTICS_FIELDS if name not in semantics]
    if missing:
        raise SemanticsError(f"{source}: actor_semantics lacks {', '.join(missing)}{retrain}")
    version = semantics["schema_version"]
    if isinstance(version, bool) or version not in SUPPORTED_SEMANTICS_VERSIONS:
        raise SemanticsError(
            f"{source}: actor_semantics schema_version {version!r} is not supported "
            f"(supported: {list(SUPPORTED_SEMANTICS_VERSIONS)}){retrain}"
        )
    for name, kind in _FIELD_TYPES.items():
        value = semantics[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise SemanticsError(
                f"{source}: actor_semantics.{name} must be {kind.__name__}, got {value!r}"
            )
    if semantics["kind"] not in ("builtin", "custom"):
        raise SemanticsError(
            f"{source}: actor_semantics.kind must be 'builtin' or 'custom', got "
            f"{semantics['kind']!r}"
        )
    if expected is not None:
        differences = [
            f"{name}: checkpoint {semantics[name]!r} != expected {expected[name]!r}"
            for name in SEMANTICS_FIELDS
            if semantics[name] != expected[name]
        ]
        if differences:
            raise SemanticsError(
                f"{source}: actor_semantics do not match the actor to build: "
                + "; ".join(differences)
            )
    return semantics


def validate_learner_states(states: Any, algorithm: Algorithm, source: str = "checkpoint") -> str:
    """Check that ``learner_states`` can be resumed by ``algorithm``: a non-empty list of
    mappings with the algorithm's ``learner_state_keys``, each passing its
    ``check_learner_state``.

    Shared by training resume (before Ray starts) and ``drl verify``.

    Returns:
        A one-line description for ``drl verify``.

    Raises:
        CheckpointError: naming the first entry that is wrong.
    """
    if not isinstance(states, list) or not states:
        raise CheckpointError(f"{source}: checkpoint has no learner state to resume from")
    for index, state in enumerate(states):
        keys = state if isinstance(state, dict) else {}
        missing = [key for key in algorithm.learner_state_keys if key not in keys]
        if missing:
            raise CheckpointError(
                f"{source}: learner_states[{index}] lacks {', '.join(missing)}; the file is "
                "damaged or not from drl train: resume from another checkpoint"
            )
        problem = algorithm.check_learner_state(state)
        if problem is not None:
            raise CheckpointError(
                f"{source}: learner_states[{index}]: {problem}; the file is damaged"
            )
    return f"{len(states)} learner state(s) complete for resume"


def _describe_groups(groups: ObservationGroups | None) -> str:
    if groups is None:
        return "none (the critic reads what the policy reads)"
    return f"critic {', '.join(groups.critic_keys)}"


def check_fits(
    checkpoint: Checkpoint,
    facts: EnvFacts,
    source: str,
    *,
    config: Config | None = None,
) -> None:
    """The one check that a checkpoint fits an environment (and, for ``--resume``, a config).

    Shared by ``--resume`` (the config's environment and the config), ``drl play`` (the
    environment it will run in) and ``drl verify`` (the checkpoint's own environment record,
    so its parts must agree with each other).

    Raises:
        SemanticsError: listing every difference: the actor semantics' dimensions against the
            environment's, the recorded action bounds against the environment's; with
            ``config``: the algorithm, the env id and the env kwargs.
    """
    semantics = validate_actor_semantics(checkpoint.actor_semantics, source=source)
    problems = []
    training = facts
    facts = facts.policy_facts()
    if config is not None:
        if checkpoint.algo != config.algo:
            problems.append(f"algo: checkpoint {checkpoint.algo!r} != config {config.algo!r}")
        if checkpoint.env.id != config.env.id:
            problems.append(f"env.id: checkpoint {checkpoint.env.id!r} != config {config.env.id!r}")
        if checkpoint.env.wrappers != wrapper_records(config.env.wrappers):
            problems.append(
                f"env.wrappers: checkpoint {checkpoint.env.wrappers} != config "
                f"{wrapper_records(config.env.wrappers)}"
            )
        if checkpoint.env.kwargs != config.env.kwargs:
            problems.append(
                f"env.kwargs: checkpoint {checkpoint.env.kwargs} != config {config.env.kwargs} "
                "(the task would change under the policy)"
            )
    if semantics["obs_dim"] != facts.obs_dim:
        problems.append(f"obs_dim: checkpoint {semantics['obs_dim']} != env {facts.obs_dim}")
    if semantics["action_dim"] != facts.action_dim:
        problems.append(
            f"action_dim: checkpoint {semantics['action_dim']} != env {facts.action_dim}"
        )
    stored_layout = layout_from_record(checkpoint.env.observation_layout)
    if stored_layout != facts.observation_layout:
        problems.append(
            f"observation: checkpoint {describe_layout(stored_layout)} != env "
            f"{describe_layout(facts.observation_layout)} (the policy's inputs would change)"
        )
    if config is not None:
        stored_groups = checkpoint.env.training_groups()
        if stored_groups != training.observation_groups:
            problems.append(
                f"env.observation_groups: checkpoint {_describe_groups(stored_groups)} != "
                f"config {_describe_groups(training.observation_groups)} (the critic's inputs "
                "would change)"
            )
    for bound in ("action_low", "action_high"):
        stored = np.asarray(getattr(checkpoint.env, bound), dtype=np.float64)
        actual = getattr(facts, bound)
        if stored.shape != actual.shape or not np.array_equal(stored, actual):
            problems.append(f"{bound}: checkpoint {stored.tolist()} != env {actual.tolist()}")
    if problems:
        raise SemanticsError(
            f"{source}: checkpoint does not fit environment {facts.env_id}: " + "; ".join(problems)
        )

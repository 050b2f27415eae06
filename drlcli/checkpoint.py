"""The drl checkpoint format: atomic saving, safe loading, actor_semantics validation.

A checkpoint is data, not code: a dict of plain containers (dict, list, str, int, float, bool,
None) and tensors, written with ``torch.save`` and read back with ``weights_only=True`` only.
The fields are documented in Method.md ("Checkpoints").
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from drlcli.actors.spec import SEMANTICS_FIELDS, SUPPORTED_SEMANTICS_VERSIONS
from drlcli.atomic import atomic_output
from drlcli.errors import CheckpointError, SemanticsError
from drlcli.normalization import RmsState

FORMAT_NAME = "drl-checkpoint"
FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = (1,)


def save_checkpoint(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` atomically (``drlcli.atomic``): the old or the new file, never a part."""
    path = Path(path)
    with atomic_output(path) as temp:
        torch.save(dict(payload), temp)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint without running any code from it.

    Raises:
        CheckpointError: missing path, directory, empty/truncated/non-torch file, a pickle that
            would run code, or a file that is not a drl checkpoint of a supported version.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: checkpoint not found")
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory, expected a checkpoint file (.pt)")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: checkpoint file is empty")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "Unsupported global" not in str(error):  # garbage bytes, not a code-running object
            raise CheckpointError(
                f"{path}: not a readable torch checkpoint (truncated or corrupt?): "
                f"UnpicklingError: {_unpickler_reason(str(error))}"
            ) from error
        raise CheckpointError(
            f"{path}: refused to load: the file holds objects that would run code when "
            f"unpickled; drl checkpoints hold only tensors and plain data "
            f"({_unpickler_reason(str(error))})"
        ) from error
    except Exception as error:  # torch raises many types for garbage input; all mean the same
        reason = f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
        raise CheckpointError(
            f"{path}: not a readable torch checkpoint (truncated or corrupt?): {reason}"
        ) from error
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{path}: not a drl checkpoint (no format '{FORMAT_NAME}')")
    version = payload.get("format_version")
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise CheckpointError(
            f"{path}: checkpoint format version {version!r} is not supported by this drl "
            f"(supported: {list(SUPPORTED_FORMAT_VERSIONS)})"
        )
    return payload


def _unpickler_reason(message: str) -> str:
    """The one useful sentence of torch's long weights-only refusal."""
    detail = message.split("WeightsUnpickler error:", 1)[-1]
    detail = detail.split("Check the documentation")[0].split(". Please use")[0]
    return " ".join(detail.split())[:160]


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


# What each learner's state must hold for resume (Method.md, "Checkpoints").
LEARNER_STATE_KEYS: dict[str, tuple[str, ...]] = {
    "ppo": ("actor", "value", "optimizer"),
    "flash_sac": (
        "actor",
        "critic",
        "target_critic",
        "log_temperature",
        "actor_optimizer",
        "critic_optimizer",
        "temperature_optimizer",
        "updates",
        "return_scaler",
        "transitions",
    ),
}


def validate_learner_states(states: Any, algo: str, source: str = "checkpoint") -> str:
    """Check that ``learner_states`` can be resumed by ``algo``: a non-empty list of mappings
    with the keys the algorithm restores, and PPO's optional ``reward_scalers`` a list of null
    or ``{mean, var, count}`` moments of shape ``[1]`` with a positive count.

    Shared by training resume (before Ray starts) and ``drl verify``.

    Returns:
        A one-line description for ``drl verify``.

    Raises:
        CheckpointError: naming the first entry that is wrong.
    """
    if algo not in LEARNER_STATE_KEYS:
        raise CheckpointError(f"{source}: unknown algo {algo!r}, cannot check its learner states")
    if not isinstance(states, list) or not states:
        raise CheckpointError(f"{source}: checkpoint has no learner state to resume from")
    with_rewards = 0
    for index, state in enumerate(states):
        keys = state if isinstance(state, dict) else {}
        missing = [key for key in LEARNER_STATE_KEYS[algo] if key not in keys]
        if missing:
            raise CheckpointError(
                f"{source}: learner_states[{index}] lacks {', '.join(missing)}; the file is "
                "damaged or not from drl train: resume from another checkpoint"
            )
        problem = _reward_scalers_problem(state.get("reward_scalers"))
        if problem is not None:
            raise CheckpointError(
                f"{source}: learner_states[{index}].reward_scalers {problem}; the file is damaged"
            )
        with_rewards += state.get("reward_scalers") is not None
    rewards = ", reward statistics included" if with_rewards == len(states) else ""
    return f"{len(states)} learner state(s) complete for resume{rewards}"


def _reward_scalers_problem(scalers: Any) -> str | None:
    if scalers is None:
        return None
    if not isinstance(scalers, list):
        return f"is a {type(scalers).__name__}, expected a list"
    for moments in scalers:
        if moments is None:
            continue
        try:
            state = RmsState.from_dict(moments)
        except (TypeError, KeyError, ValueError) as error:
            return f"has an entry that is not {{mean, var, count}} ({error})"
        if state.mean.shape != (1,) or state.var.shape != (1,) or not state.count > 0:
            return "has an entry with the wrong shape or a non-positive count"
    return None

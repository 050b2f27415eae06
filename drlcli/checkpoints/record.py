"""The checkpoint record: one typed ``Checkpoint`` and its plain-data form.

A checkpoint is data, not code: ``Checkpoint.to_payload()`` is a dict of plain containers (dict,
list, str, int, float, bool, None) and tensors; ``Checkpoint.from_payload`` reads one back,
checking each field's presence and type. The fields are documented in Method.md
("Checkpoints"). Writing and reading files is ``checkpoints/files.py``; what a checkpoint must
pass before it is used, ``checkpoints/checks.py`` and ``checkpoints/verified.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from drlcli.algos.entry_types import Algorithm
from drlcli.algos.registry import get_algorithm
from drlcli.config import EnvConfig, check_env_kwargs
from drlcli.config_fields import check_plain_data
from drlcli.env_facts import EnvFacts
from drlcli.env_wrappers import wrapper_records
from drlcli.errors import CheckpointError, ConfigError
from drlcli.normalization import DEFAULT_OBSERVATION_CLIP
from drlcli.observations import (
    ObservationGroups,
    describe_layout,
    layout_from_record,
    layout_record,
)

BEST_BY_EVALUATION = "evaluation"

BEST_BY_TRAINING_RETURN = "training return"

BEST_BY_EVALUATION_SUCCESS = "evaluation success rate"

BEST_BY_TRAINING_SUCCESS = "training success rate"

FORMAT_NAME = "drl-checkpoint"

# Version 2 stores each PPO rollout actor's reward-scaler moments in that actor's state; version
# 1 kept them apart under the learner, and is still read (rollout_actor.rollout_actor_states).
FORMAT_VERSION = 2

SUPPORTED_FORMAT_VERSIONS = (1, 2)


@dataclass
class RunProgress:
    """The counters a checkpoint stores and resume continues from."""

    round: int = 0
    env_steps: int = 0
    wall_time_s: float = 0.0
    best_return: float | None = None
    # What best_return measures: BEST_BY_EVALUATION (the deterministic evaluation's mean
    # return), BEST_BY_TRAINING_RETURN (a round's mean training return), or a success rate of
    # either (BEST_BY_EVALUATION_SUCCESS, BEST_BY_TRAINING_SUCCESS: evaluation.best_by).
    best_criterion: str = BEST_BY_TRAINING_RETURN
    # Under a success rate, the mean return at the best: an equal rate with a higher return wins.
    best_tiebreak: float | None = None


@dataclass(frozen=True)
class EnvRecord:
    """The task a checkpoint was trained on: what play rebuilds and resume compares."""

    id: str
    observation_shape: list[int]
    action_low: list[float]
    action_high: list[float]
    max_episode_steps: int | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    # A Dict task's parts in the flat observation (``layout_record``); None: a flat Box.
    observation_layout: list[dict[str, Any]] | None = None
    # Gymnasium wrappers around the task, the first innermost (``wrapper_records``).
    wrappers: list[dict[str, Any]] = field(default_factory=list)
    # A privileged critic's training observation (``ObservationGroups.to_record``); None: the
    # critic read what the policy reads. The fields above are the policy's view.
    observation_groups: dict[str, Any] | None = None

    @staticmethod
    def of(env: EnvConfig, facts: EnvFacts) -> EnvRecord:
        """The record of a run's task as its policy reads it (with a privileged critic, the
        training observation besides): the id as the config names it (``module:Task-v0``
        imports the module that registers a task, so play rebuilds it in a fresh process)."""
        policy = facts.policy_facts()
        groups = facts.observation_groups
        return EnvRecord(
            id=env.id,
            observation_shape=[policy.obs_dim],
            action_low=facts.action_low.tolist(),
            action_high=facts.action_high.tolist(),
            max_episode_steps=env.max_episode_steps,
            kwargs=dict(env.kwargs),
            observation_layout=layout_record(policy.observation_layout),
            wrappers=wrapper_records(env.wrappers),
            observation_groups=None if groups is None else groups.to_record(),
        )

    def training_groups(self) -> ObservationGroups | None:
        """The recorded observation groups (the record is checked on reading)."""
        return ObservationGroups.from_record(self.observation_groups)

    def facts(self) -> EnvFacts:
        """The spaces as the policy reads them, as the checkpoint records them (no environment
        is made)."""
        obs_dim = self.observation_shape[0] if len(self.observation_shape) == 1 else -1
        return EnvFacts(
            self.id,
            obs_dim,
            len(self.action_low),
            np.asarray(self.action_low, dtype=np.float64),
            np.asarray(self.action_high, dtype=np.float64),
            layout_from_record(self.observation_layout),
        )


def current_versions() -> dict[str, str]:
    """The library versions a checkpoint written now records."""
    import gymnasium
    import mujoco

    from drlcli import __version__

    return {
        "drl": __version__,
        "torch": str(torch.__version__),
        "gymnasium": str(gymnasium.__version__),
        "mujoco": str(mujoco.__version__),
    }


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint (Method.md, "Checkpoints").

    Attributes:
        algo: the registered algorithm that trained it.
        actor: the policy actor's state_dict (learner 0's).
        actor_semantics: ``{schema_version, kind, builder, kwargs, obs_dim, action_dim,
            action_transform}``, checked (``validate_actor_semantics``) before any weight is
            loaded; read as stored, so that the check can say what is wrong with it.
        env: the task.
        progress: the counters resume continues from.
        config: the resolved config as plain data.
        learner_states: per learner, everything resume restores (the algorithm's
            ``learner_state_keys``).
        obs_rms_state: ``{mean, var [obs_dim] tensors, count}`` or None (no running statistics):
            the statistics of what the policy reads.
        observation_clip: clip of standardised observations.
        training_obs_rms_state: with a privileged critic, the statistics of the whole training
            observation (``env.observation_groups``), what ``--resume`` restores; else None.
        versions: library versions that wrote it.
        inference_memory: the bytes per category the actor declared it needs to start
            inference (``inference_startup_memory_categories``).
        evaluation: the deterministic evaluation of these weights (``EvaluationResult
            .to_dict()``), when one ran: every final checkpoint, best ones chosen by it.
    """

    algo: str
    actor: dict[str, torch.Tensor]
    actor_semantics: dict[str, Any] | None  # None only in a file that readers then refuse
    env: EnvRecord
    progress: RunProgress
    config: dict[str, Any]
    learner_states: list[dict[str, Any]]
    obs_rms_state: dict[str, Any] | None = None
    observation_clip: float = DEFAULT_OBSERVATION_CLIP
    versions: dict[str, str] = field(default_factory=current_versions)
    inference_memory: dict[str, int] = field(default_factory=dict)
    evaluation: dict[str, Any] | None = None
    training_obs_rms_state: dict[str, Any] | None = None

    @property
    def algorithm(self) -> Algorithm:
        return get_algorithm(self.algo)

    @property
    def resumed_obs_rms_state(self) -> dict[str, Any] | None:
        """The statistics a resumed run continues: of the training observation."""
        if self.env.observation_groups is not None:
            return self.training_obs_rms_state
        return self.obs_rms_state

    def to_payload(self) -> dict[str, Any]:
        """The plain-data form that is saved (tensors and containers only)."""
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "algo": self.algo,
            "actor": self.actor,
            "obs_rms_state": _to_tensors(self.obs_rms_state),
            "observation_clip": float(self.observation_clip),
            "actor_semantics": self.actor_semantics,
            "env": dataclasses.asdict(self.env),
            "progress": dataclasses.asdict(self.progress),
            "config": self.config,
            "learner_states": _to_tensors(self.learner_states),
            "versions": self.versions,
            "inference_memory": self.inference_memory,
            "evaluation": self.evaluation,
            "training_obs_rms_state": _to_tensors(self.training_obs_rms_state),
        }

    @staticmethod
    def from_payload(payload: Mapping[str, Any], source: str = "checkpoint") -> Checkpoint:
        """The record of a loaded payload.

        Raises:
            CheckpointError: a missing field or one of the wrong type, naming it.
        """
        algo = _field(payload, "algo", str, source)
        try:
            get_algorithm(algo)
        except ConfigError:
            raise CheckpointError(
                f"{source}: checkpoint of algorithm {algo!r}, which this drl does not have"
            ) from None
        if "obs_rms_state" not in payload:
            raise CheckpointError(f"{source}: checkpoint lacks 'obs_rms_state' (null is allowed)")
        env = _field(payload, "env", dict, source)
        progress = _field(payload, "progress", dict, source)
        try:
            check_env_kwargs(env["kwargs"], "env.kwargs")
        except KeyError:
            raise CheckpointError(f"{source}: checkpoint env entry lacks 'kwargs'") from None
        except ConfigError as error:
            raise CheckpointError(f"{source}: checkpoint {error}") from None
        try:
            max_steps = env["max_episode_steps"]
            if max_steps is not None and (type(max_steps) is not int or max_steps < 1):
                raise ValueError(f"max_episode_steps must be a positive int, got {max_steps!r}")
            env_record = EnvRecord(
                id=env["id"],
                observation_shape=list(env["observation_shape"]),
                action_low=[float(x) for x in env["action_low"]],
                action_high=[float(x) for x in env["action_high"]],
                max_episode_steps=max_steps,
                kwargs=dict(env["kwargs"]),
                observation_layout=env.get("observation_layout"),  # absent before Dict tasks
                wrappers=_wrappers(env.get("wrappers", [])),  # absent before env.wrappers
                observation_groups=env.get("observation_groups"),  # absent before groups
            )
            layout = layout_from_record(env_record.observation_layout)
            if layout is not None and [layout[-1].stop] != env_record.observation_shape:
                raise ValueError(
                    f"observation_layout ends at {layout[-1].stop}, the observation has "
                    f"{env_record.observation_shape}"
                )
            groups = env_record.training_groups()
            if groups is not None and groups.policy_layout != layout:
                raise ValueError(
                    "observation_groups: the training observation does not begin with the "
                    f"policy's ({describe_layout(groups.policy_layout)} != "
                    f"{describe_layout(layout)})"
                )
            counters = RunProgress(
                **{
                    f.name: progress[f.name]
                    for f in dataclasses.fields(RunProgress)
                    if f.name in progress or f.name != "best_tiebreak"  # absent before it
                }
            )
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(
                f"{source}: checkpoint env or progress entry is malformed ({error!r})"
            ) from None
        if not isinstance(env_record.id, str):
            raise CheckpointError(f"{source}: checkpoint does not name its environment (env.id)")
        obs_rms = payload["obs_rms_state"]
        training_rms = payload.get("training_obs_rms_state")  # absent before groups
        for name, state in (("obs_rms_state", obs_rms), ("training_obs_rms_state", training_rms)):
            if state is not None and not isinstance(state, dict):
                raise CheckpointError(f"{source}: checkpoint {name!r} must be a mapping or null")
        return Checkpoint(
            algo=algo,
            actor=_field(payload, "actor", dict, source),
            actor_semantics=payload.get("actor_semantics"),  # validated where it is used
            env=env_record,
            progress=counters,
            config=_field(payload, "config", dict, source),
            learner_states=_field(payload, "learner_states", list, source),
            obs_rms_state=obs_rms,
            observation_clip=_observation_clip(payload, source),
            versions=_field(payload, "versions", dict, source),
            inference_memory=_inference_memory(payload, source),
            evaluation=_evaluation(payload.get("evaluation"), source),
            training_obs_rms_state=training_rms,
        )


def _wrappers(value: Any) -> list[dict[str, Any]]:
    """A checkpoint's ``env.wrappers``: ``[{name: str, kwargs: plain mapping}]``."""
    if not isinstance(value, list) or not all(
        isinstance(w, dict) and isinstance(w.get("name"), str) and isinstance(w.get("kwargs"), dict)
        for w in value
    ):
        raise ValueError(f"wrappers must be a list of {{name, kwargs}}, got {value!r}")
    for wrapper in value:
        try:
            check_plain_data(wrapper["kwargs"], f"wrappers {wrapper['name']} kwargs")
        except ConfigError as error:
            raise ValueError(str(error)) from None
    return [{"name": w["name"], "kwargs": dict(w["kwargs"])} for w in value]


def _observation_clip(payload: Mapping[str, Any], source: str) -> float:
    clip = payload.get("observation_clip")
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0:
        raise CheckpointError(
            f"{source}: checkpoint 'observation_clip' must be a positive number, got {clip!r}"
        )
    return float(clip)


EVALUATION_FIELDS = ("env_steps", "episodes", "return_mean", "return_std", "episode_length_mean")


def _evaluation(value: Any, source: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(value.get(key), (int, float)) and not isinstance(value.get(key), bool)
        for key in EVALUATION_FIELDS
    ):
        raise CheckpointError(
            f"{source}: checkpoint 'evaluation' must hold numbers {', '.join(EVALUATION_FIELDS)}"
        )
    return dict(value)


def _inference_memory(payload: Mapping[str, Any], source: str) -> dict[str, int]:
    value = _field(payload, "inference_memory", dict, source)
    if not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in value.items()
    ):
        raise CheckpointError(
            f"{source}: checkpoint 'inference_memory' must map categories to byte counts"
        )
    return dict(value)


def _field(payload: Mapping[str, Any], key: str, kind: type, source: str) -> Any:
    if key not in payload:
        raise CheckpointError(f"{source}: checkpoint lacks '{key}'")
    value = payload[key]
    if not isinstance(value, kind):
        raise CheckpointError(
            f"{source}: checkpoint '{key}' is a {type(value).__name__}, expected {kind.__name__}"
        )
    return value


def _to_tensors(value: Any) -> Any:
    """numpy arrays (and numpy scalars) as tensors (and Python numbers): weights_only loading
    reads nothing else."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _to_tensors(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_tensors(item) for item in value]
    return value

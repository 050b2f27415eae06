"""The drl checkpoint: one typed record, its writer and its reader, and the checks every reader
shares.

A checkpoint is data, not code: ``Checkpoint.to_payload()`` is a dict of plain containers (dict,
list, str, int, float, bool, None) and tensors, written atomically with ``torch.save`` and read
back with ``weights_only=True`` only. The fields are documented in Method.md ("Checkpoints").
``check_fits`` is the one "does this checkpoint fit this environment / config" check of
``--resume``, ``drl play`` and ``drl verify``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pickle
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from drlcli.actors.spec import SEMANTICS_FIELDS, SUPPORTED_SEMANTICS_VERSIONS
from drlcli.algos.algorithm import Algorithm
from drlcli.algos.registry import get_algorithm
from drlcli.atomic import atomic_output
from drlcli.config import EnvConfig, check_env_kwargs
from drlcli.config_fields import check_plain_data
from drlcli.env_wrappers import wrapper_records
from drlcli.envs import EnvFacts
from drlcli.errors import CheckpointError, ConfigError, SemanticsError
from drlcli.normalization import DEFAULT_OBSERVATION_CLIP
from drlcli.observations import (
    ObservationGroups,
    describe_layout,
    layout_from_record,
    layout_record,
)

if TYPE_CHECKING:
    from drlcli.config import Config

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


def write_checkpoint(path: str | Path, checkpoint: Checkpoint) -> Path:
    """Write atomically (``drlcli.atomic``): the old or the new file, never a part."""
    return save_payload(path, checkpoint.to_payload())


def save_payload(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """``torch.save`` a payload atomically (``write_checkpoint``'s lower half), with the
    ``content_hash`` of everything in it."""
    path = Path(path)
    contents = {key: value for key, value in payload.items() if key != CONTENT_HASH}
    # Serialised in memory first: torch's file writer reports a full disk as an obscure
    # RuntimeError, Python's as OSError ENOSPC (a StorageError from atomic_output).
    buffer = io.BytesIO()
    torch.save({**contents, CONTENT_HASH: content_hash(contents)}, buffer)
    with atomic_output(path) as temp:
        temp.write_bytes(buffer.getbuffer())
    return path


CONTENT_HASH = "content_hash"


def content_hash(payload: Mapping[str, Any]) -> str:
    """BLAKE2b of a payload's structure and values (tensor bytes, dtypes, shapes, plain
    values), independent of how torch lays the file out: a flipped byte changes it."""
    digest = hashlib.blake2b(digest_size=16)

    def feed(value: Any, where: str) -> None:
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"{where}:{tensor.dtype}:{list(tensor.shape)}:".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, Mapping):
            for key in sorted(value, key=str):
                feed(value[key], f"{where}.{key}")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                feed(item, f"{where}[{index}]")
        else:
            digest.update(f"{where}={value!r};".encode())

    feed(payload, "")
    return digest.hexdigest()


def check_content_hash(payload: Mapping[str, Any]) -> bool:
    """Whether the payload matches the hash stored with it (False also when none is: drl
    writes one into every checkpoint)."""
    stored = payload.get(CONTENT_HASH)
    if stored is None:
        return False
    contents = {key: value for key, value in payload.items() if key != CONTENT_HASH}
    return stored == content_hash(contents)


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint without running any code from it, after checking its content hash
    and fields only: for tools and tests that inspect files drl wrote. drl's own commands
    (resume, play, export) read with ``audit.read_verified_checkpoint``, which also runs every
    check of ``drl verify``.

    Raises:
        CheckpointError: see ``load_payload``; contents that do not match the stored hash
            (corrupted after writing); a field missing or of the wrong type.
    """
    payload = load_payload(path)
    if not check_content_hash(payload):
        raise corrupted_error(path, payload)
    return Checkpoint.from_payload(payload, source=str(path))


def corrupted_error(path: str | Path, payload: Mapping[str, Any]) -> CheckpointError:
    """The error of a payload ``check_content_hash`` refuses."""
    if payload.get(CONTENT_HASH) is None and {"format_version", "actor_semantics"} <= set(payload):
        return CheckpointError(
            f"{path}: written by an older drl, before every checkpoint carried a content hash: "
            "its integrity cannot be checked and the format has no migration; train again "
            "with this drl (drl train CONFIG)"
        )
    if payload.get(CONTENT_HASH) is None:
        return CheckpointError(
            f"{path}: carries no content hash, which drl writes into every checkpoint: the file "
            "is damaged or was not written by drl; use another checkpoint"
        )
    return CheckpointError(
        f"{path}: corrupted: its contents do not match the content hash written with it (a "
        "changed byte, a damaged copy); use another checkpoint"
    )


def load_payload(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint file's raw payload without running any code from it (``drl verify``
    audits it field by field; everything else reads a ``Checkpoint``).

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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on pickle protocols: not the user's
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        unsafe = _unsafe_global(str(error)) or _pickled_callable(path)
        if unsafe is not None:
            raise CheckpointError(
                f"{path}: refused to load: unpickling it would call {unsafe}, which is code, "
                "not data; drl checkpoints hold only tensors and plain data. Do not load this "
                "file with torch.load(weights_only=False) unless you made it yourself"
            ) from error
        raise CheckpointError(  # garbage bytes, not a code-running object
            f"{path}: not a readable torch checkpoint (truncated or corrupt?): "
            f"UnpicklingError: {_unpickler_reason(str(error))}"
        ) from error
    except Exception as error:  # torch raises many types for garbage input; all mean the same
        reason = f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
        raise CheckpointError(
            f"{path}: not a readable torch checkpoint (truncated or corrupt?): {reason}"
        ) from error
    if not isinstance(payload, dict) or not _is(payload.get("format"), str, FORMAT_NAME):
        raise CheckpointError(f"{path}: not a drl checkpoint (no format '{FORMAT_NAME}')")
    version = payload.get("format_version")
    if not any(_is(version, int, supported) for supported in SUPPORTED_FORMAT_VERSIONS):
        raise CheckpointError(
            f"{path}: checkpoint format version {version!r} is not supported by this drl "
            f"(supported: {list(SUPPORTED_FORMAT_VERSIONS)})"
        )
    return payload


def _is(value: Any, kind: type, expected: Any) -> bool:
    """``value == expected`` for a value of exactly ``kind`` (a tensor or a bool is not)."""
    return type(value) is kind and value == expected


def _unsafe_global(message: str) -> str | None:
    """The callable a refused pickle asks for (``posix.system``), from torch's message."""
    match = re.search(r"GLOBAL ([\w.]+)", message)
    return match.group(1) if match else None


def _pickled_callable(path: Path) -> str | None:
    """The first module-level callable a plain pickle names (``posix.system``), read with
    ``pickletools`` (which runs nothing), or None. Torch's own zip files are not scanned."""
    import pickletools
    import zipfile

    if zipfile.is_zipfile(path):
        return None
    strings: list[str] = []
    try:
        for opcode, argument, _ in pickletools.genops(path.read_bytes()):
            if opcode.name == "GLOBAL":
                return str(argument).replace(" ", ".")
            if opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                return f"{strings[-2]}.{strings[-1]}"
            if isinstance(argument, str):
                strings.append(argument)
    except Exception:  # not a pickle at all: garbage, not an attack to name
        return None
    return None


def _unpickler_reason(message: str) -> str:
    """The one useful sentence of torch's long weights-only refusal, without its advice to
    load with ``weights_only=False``."""
    detail = message.split("trusted source.", 1)[-1]
    detail = detail.split("WeightsUnpickler error:", 1)[-1]
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

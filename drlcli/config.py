"""Strict, immutable training configuration loaded from YAML.

``load_config(path)`` returns a frozen ``Config``. Fields the file leaves out take the dataclass
defaults; an unknown key, a value of the wrong type, or a value out of range raises
``ConfigError`` naming the key path (``algo_params.batch_size: expected int, got 'abc'``).
Every field is documented in Method.md ("Configuration").

This module imports neither torch nor ray, so the CLI can validate a config instantly.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from drlcli.algos.registry import ALGORITHMS, DEFAULT_ALGORITHM, get_algorithm
from drlcli.config_fields import (
    check_plain_data,
    describe_value,
    in_range,
    one_of,
    positive,
    refuse_unread,
)
from drlcli.errors import ConfigError
from drlcli.run_names import seeded_name

# numpy's and gymnasium's seeds are non-negative; 32 bits leave room below torch's 64-bit limit
# for the offsets drl adds (10,000 per rollout actor, the evaluation's own).
SEED_MAX = 2**32 - 1

# --- schema ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvWrapperConfig:
    """One of Gymnasium's own wrappers around the task (``env.wrappers``)."""

    name: str
    """A class of ``gymnasium.wrappers`` (``FrameStackObservation``, ``RescaleAction``...)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Its keyword arguments besides the environment; plain data only."""


@dataclass(frozen=True)
class ObservationGroupsConfig:
    """What the policy and the critic read (``env.observation_groups``): a privileged critic."""

    policy: tuple[str, ...]
    """The policy's parts, in order: a Dict observation's keys (as ``observation_keys``), or a
    flat Box observation's slices (``'0:11'``, quoted). Everything played, evaluated and
    exported reads these only."""
    critic: tuple[str, ...] | None = None
    """The critic's parts (the value network, the Q networks), training only; null: the
    policy's. Typically the policy's and what a robot cannot measure (a target, friction)."""


@dataclass(frozen=True)
class EnvConfig:
    """The Gymnasium task every rollout actor steps."""

    id: str = "InvertedPendulum-v5"
    """Gymnasium id; a flat Box or Dict observation and a finite Box action are required."""
    num_envs: int = field(default=1, metadata=positive())
    """Environments each rollout actor steps together, with batched inference."""
    seed: int = field(default=0, metadata=in_range(0, SEED_MAX))
    """Run seed: environments, sampling noise and network initialisation derive from it."""
    max_episode_steps: int | None = field(default=None, metadata=positive())
    """Overrides the task's time limit; null: the task's own."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of gymnasium.make, e.g. ``{xml_file: /abs/robot.xml}``; stored in
    checkpoints so play and export rebuild the same task."""
    observation_keys: tuple[str, ...] | None = None
    """A Dict observation's parts the policy reads, in this order (``outer/inner`` for a
    nested one; a nested dict's name stands for all its parts, sorted); null: every part,
    sorted. A flat Box observation's parts are slices (``'0:11'``, quoted). The order is
    recorded in checkpoints and exports."""
    observation_groups: ObservationGroupsConfig | None = None
    """``{policy: [...], critic: [...]}``: the critic reads other parts than the policy (a
    privileged critic, in training only); instead of observation_keys."""
    wrappers: tuple[EnvWrapperConfig, ...] = ()
    """Gymnasium's own wrappers around the task, the first innermost, before drl reads a Dict
    observation: names from ``gymnasium.wrappers`` only, recorded in checkpoints so play,
    evaluation and export rebuild the same task."""
    success_key: str | None = None
    """The step ``info`` key that says the task succeeded (Meta-World's ``success``,
    Gymnasium-Robotics' ``is_success``); null: ``success`` or ``is_success``, whichever the task
    reports. Gives the metrics ``success_rate`` and ``eval_success_rate``."""
    success_when: str = field(default="any_step", metadata=one_of("any_step", "final_step"))
    """An episode succeeded when the key was true at ``any_step`` of it (Meta-World's measure)
    or at its ``final_step`` (Gymnasium-Robotics' and Stable-Baselines3's)."""

    def policy_view(self) -> EnvConfig:
        """The task as the policy alone reads it: the policy group as the observation keys
        (evaluation; play and export rebuild it from the checkpoint's record)."""
        if self.observation_groups is None:
            return self
        return dataclasses.replace(
            self, observation_keys=self.observation_groups.policy, observation_groups=None
        )


@dataclass(frozen=True)
class RuntimeEnvConfig:
    """Code and files Ray ships to every node of the run (Ray's runtime environment of the
    job): what a cluster's nodes need but do not have installed."""

    working_dir: str | None = None
    """A local directory uploaded to every node; training processes run inside their copy, so a
    relative path (``env.kwargs.xml_file: ./robots/hopper.xml``) means the same file on every
    node as on the driver run from this directory. Files its .gitignore names stay behind."""
    py_modules: tuple[str, ...] = ()
    """Local Python packages (directories) or wheels, importable in every training process and
    in the driver: e.g. the package of a custom actor's builder."""
    excludes: tuple[str, ...] = ()
    """Patterns (.gitignore syntax) of files under working_dir to leave behind."""
    env_vars: dict[str, str] = field(default_factory=dict)
    """Environment variables of every training process (e.g. ``GLOO_SOCKET_IFNAME``)."""

    def is_empty(self) -> bool:
        return self == RuntimeEnvConfig()

    def to_ray(self) -> dict[str, Any]:
        """The ``runtime_env`` mapping of ``ray.init``, with absolute paths."""
        ray_env: dict[str, Any] = {}
        if self.working_dir is not None:
            ray_env["working_dir"] = str(Path(self.working_dir).resolve())
        if self.py_modules:
            ray_env["py_modules"] = [str(Path(module).resolve()) for module in self.py_modules]
        if self.excludes:
            ray_env["excludes"] = list(self.excludes)
        if self.env_vars:
            ray_env["env_vars"] = dict(self.env_vars)
        return ray_env


# gymnasium.make arguments drl sets itself.
RESERVED_ENV_KWARGS = {
    "id": "env.id",
    "max_episode_steps": "env.max_episode_steps",
    "render_mode": "drl play --render / --video",
}


@dataclass(frozen=True)
class EvaluationConfig:
    """Deterministic evaluation of the policy (``transform(mean)``, frozen observation
    statistics) on environments seeded apart from training, in its own Ray actor."""

    interval_env_steps: int | None = field(default=None, metadata=positive())
    """Evaluate every this many env steps, overlapping the next round, and keep the best
    checkpoint by evaluation; null: no periodic evaluation (best by training return)."""
    episodes: int = field(default=10, metadata=positive())
    """Episodes per evaluation, also of the final one at the end of every run."""
    best_by: str = field(default="return", metadata=one_of("return", "success_rate"))
    """What the best checkpoint maximises: the mean ``return``, or the ``success_rate`` (a
    task that reports success; an equal rate with a higher mean return wins), of the
    evaluations, or of the training rounds without periodic evaluation."""


@dataclass(frozen=True)
class MlflowConfig:
    """An MLflow run per drl run (``logging.mlflow``)."""

    tracking_uri: str | None = None
    """A tracking server (``http://host:5000``) or store (``sqlite:///mlflow.db``); null:
    ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the working directory."""
    experiment: str = "drl"
    """The MLflow experiment the run goes into (created when missing)."""


@dataclass(frozen=True)
class WandbConfig:
    """A Weights & Biases run per drl run (``logging.wandb``)."""

    project: str = "drl"
    """The W&B project."""
    entity: str | None = None
    """The W&B team or user; null: the account's default."""
    mode: str | None = field(default=None, metadata=one_of("online", "offline"))
    """online: to the W&B server (``wandb login`` first); offline: run files only, no network
    nor account (``wandb sync`` uploads them later); null: ``$WANDB_MODE``, else online."""
    dir: str | None = None
    """Where W&B keeps its run files (``<dir>/wandb/``); null: ``output_dir``."""


@dataclass(frozen=True)
class LoggingConfig:
    """Where a run's metrics go besides its metrics CSV (the record of truth); each is off by
    default and is an optional extra (``pip install 'drlcli[tensorboard]'``)."""

    def display_name(self, config_name: str) -> str:
        """The run's name in the sinks: ``run_name``, else the config's name."""
        return self.run_name or config_name

    run_name: str | None = None
    """How the sinks name the run (its TensorBoard folder, its W&B and MLflow run name); null:
    the config's ``name``. drl tune's trials: ``<search>/<trial>``."""
    tensorboard: str | None = None
    """A folder of TensorBoard runs: this run's event files go to ``<folder>/<run name>``;
    null: off."""
    wandb: WandbConfig | None = None
    """A W&B run: the config, every metric by env step, the final evaluation in its summary,
    and the videos ``drl play --video`` records from its checkpoints; null: off."""
    mlflow: MlflowConfig | None = None
    """An MLflow run: params from the config, metrics by env step, the checkpoints as artifacts
    (and the ONNX files ``drl export`` writes from them); null: off."""


@dataclass(frozen=True)
class Config:
    """One training run. Topology names (num_actors, num_gpus, ...) are those of Method.md."""

    name: str = ""
    """Names the outputs (``model_<name>.pt``); default: the config file's stem."""
    algo: str = DEFAULT_ALGORITHM
    """A registered algorithm (drlcli/algos/registry.py); selects the ``algo_params`` schema."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The task."""
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    """Periodic and final deterministic evaluation."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Metrics sinks beside the CSV (TensorBoard, Weights & Biases, MLflow)."""
    num_actors: int = field(default=1, metadata=positive())
    """Rollout actors requested in total."""
    num_gpus: int = field(default=1, metadata=positive())
    """Learners requested, one per GPU."""
    actors_per_gpu: int | None = field(default=None, metadata=positive())
    """Rollout actors per learner; null: all on the one learner (only with num_gpus: 1)."""
    param_sync_interval: int = field(default=1, metadata=positive())
    """Rounds between averages of all learners' parameters."""
    runtime_env: RuntimeEnvConfig = field(default_factory=RuntimeEnvConfig)
    """Code and files shipped to every node (a custom actor's package, a robot model)."""
    learners_on_cpu: bool = False
    """Run all num_gpus learners on CPU (the multi-learner topology without GPUs)."""
    max_rollout_actor_restarts: int = field(default=10, metadata=in_range(0, None))
    """Times Ray restarts each rollout actor whose process died before the run stops."""
    stop_grace_s: float = field(default=20.0, metadata=in_range(0.0, None, low_open=True))
    """After the first SIGINT or SIGTERM, how long the round in progress may take to finish and
    write its checkpoint before it is abandoned (below Slurm's default KillWait of 30 s, which
    also leaves time to stop Ray)."""
    hang_timeout_s: float | None = field(default=None, metadata=in_range(0.0, None, low_open=True))
    """How long one phase of a run (its start, a round with its outputs, the final evaluation)
    may take before the run ends as hung; null: 10 times the slowest round so far, at least
    ``HANG_TIMEOUT_FLOOR_S`` (30 minutes)."""
    learner_threads: int | None = field(default=None, metadata=positive())
    """torch threads of each off-policy learner (FlashSAC, SAC) on CPU; null: the machine's
    cores left by the run's other CPU processes (rollout actors, evaluator), shared by the
    learners, at least 1."""
    total_env_steps: int = field(default=100_000, metadata=positive())
    """Training budget in environment steps, all rollout actors together."""
    rollout_length: int = field(default=2048, metadata=positive())
    """Steps each environment of each rollout actor takes per round."""
    gamma: float = field(default=0.99, metadata=in_range(0.0, 1.0))
    """Discount factor."""
    gae_lambda: float = field(default=0.95, metadata=in_range(0.0, 1.0))
    """Lambda of generalised advantage estimation."""
    output_dir: str = "output"
    """Where checkpoints are written."""
    metrics_path: str = ""
    """The metrics CSV; default ``<output_dir>/metrics_<name>.csv``."""
    algo_params: Any = field(default_factory=lambda: ALGORITHMS[DEFAULT_ALGORITHM].params_type())
    """Hyper-parameters of ``algo``: an instance of its registry entry's ``params_type``."""

    @property
    def default_metrics_path(self) -> str:
        """``<output_dir>/metrics_<name>.csv``: ``metrics_path`` where the config sets none."""
        return str(Path(self.output_dir) / f"metrics_{self.name}.csv")

    @property
    def checkpoint_path(self) -> Path:
        """``<output_dir>/model_<name>.pt``: the latest parameters."""
        return Path(self.output_dir) / f"model_{self.name}.pt"

    @property
    def best_checkpoint_path(self) -> Path:
        """``<output_dir>/model_<name>_best.pt``: the best evaluated policy so far (the best
        mean training return without periodic evaluation)."""
        return Path(self.output_dir) / f"model_{self.name}_best.pt"

    @property
    def transitions_per_round(self) -> int:
        """Env steps one rollout actor collects in a round (``rollout_length * env.num_envs``);
        a round of the run is this times the resolved number of rollout actors."""
        return self.rollout_length * self.env.num_envs

    def to_dict(self) -> dict[str, Any]:
        """Plain-container form (lists for tuples), suitable for YAML, JSON and checkpoints."""
        return _to_plain(dataclasses.asdict(self))


_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _to_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(item) for item in value]
    return value


# --- YAML ---------------------------------------------------------------------------------------


class _StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader that reads ``3e-4`` as a float (YAML 1.2), not as the string '3e-4'."""


_StrictYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read a YAML file into a validated, immutable ``Config``.

    Args:
        path: the YAML file. Its stem names the run when the file sets no ``name``.
        overrides: dotted config keys set over the file's values before validation (``drl
            train --set``, ``parse_override``).

    Raises:
        ConfigError: missing/empty/unreadable file, YAML syntax error, a top level that is not a
            mapping, an unknown key, a wrong type, a value out of range, an unknown algorithm.
    """
    return read_config(path, overrides)[1]


def read_config(
    path: str | Path, overrides: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], Config]:
    """``load_config``'s plain mapping (the file's, ``overrides`` set over it) and its
    ``Config``: ``drl tune`` plans its trials from the mapping.

    Raises:
        ConfigError: as ``load_config``, prefixed ``PATH with --set KEY, ...`` under overrides.
    """
    path = Path(path)
    raw = read_yaml_mapping(path, what="config file")
    where = str(path)
    if overrides:
        raw = with_values(raw, overrides)
        where = f"{path} with --set {', '.join(overrides)}"
    try:
        return raw, config_from_dict(raw, default_name=path.stem)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from error


def parse_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``drl train --set``: a dotted config key and its value read as YAML (as
    a config file's: ``1e-3`` is a number, ``[64, 64]`` a list, ``null`` or nothing null).

    Raises:
        ConfigError: no ``=``, an empty key part, or a value that is not YAML.
    """
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals or not key or not all(part.strip() for part in key.split(".")):
        raise ConfigError(
            f"--set {text!r}: expected KEY=VALUE with a dotted config key, e.g. "
            "--set algo_params.learning_rate=1e-3"
        )
    try:
        return key, yaml.load(value, Loader=_StrictYamlLoader)
    except yaml.YAMLError:
        raise ConfigError(f"--set {key}: {value!r} is not a YAML value") from None


def with_values(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of the plain config ``base`` with each dotted key of ``values`` set."""
    config = copy.deepcopy(dict(base))
    for key, value in values.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[leaf] = list(value) if isinstance(value, tuple) else value
    return config


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """A YAML file whose top level is a mapping (YAML 1.2 floats: ``3e-4`` is a number).

    Args:
        path: the file.
        what: how error messages name it (``config file``, ``search space file``).

    Raises:
        ConfigError: a missing, empty, unreadable or malformed file, or another top level.
    """
    if not path.exists():
        raise ConfigError(f"{path}: {what} not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, expected a YAML {what}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read {what} ({error})") from error
    try:
        raw = yaml.load(text, Loader=_StrictYamlLoader)
    except yaml.YAMLError as error:
        where = ""
        mark = getattr(error, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}: YAML syntax error{where}: {problem}") from error
    if raw is None:
        raise ConfigError(f"{path}: {what} is empty; see configs/ for examples")
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: top level must be a mapping of keys to values, got {type(raw).__name__}"
        )
    return raw


def config_from_dict(
    raw: dict[str, Any], default_name: str = "run", *, refuse_unread_settings: bool = True
) -> Config:
    """Validate a plain mapping (already parsed YAML or a checkpoint's stored config).

    Args:
        refuse_unread_settings: refuse an ``algo_params`` setting that the others leave unread
            (``config_fields.unread_settings``); ``drl tune`` builds its trials without it, as a
            space's values may be read by some trials only.
    """
    raw = dict(raw)
    _check_observation_parts(raw.get("env"))
    algorithm = get_algorithm(raw.get("algo", Config.algo))
    raw.setdefault("algo_params", {})
    _check_recurrent_algorithm(algorithm, raw["algo_params"])
    config = _build_dataclass(
        Config, raw, "", hint_overrides={"algo_params": algorithm.params_type}
    )
    algorithm.check_params(config.algo_params)
    if refuse_unread_settings:
        refuse_unread(config.algo_params)
    check_env_kwargs(config.env.kwargs, "env.kwargs")
    for index, wrapper in enumerate(config.env.wrappers):
        check_plain_data(wrapper.kwargs, f"env.wrappers[{index}].kwargs")
    for key, value in config.runtime_env.env_vars.items():
        if not isinstance(value, str):
            raise ConfigError(
                f"runtime_env.env_vars.{key}: expected a string, got {describe_value(value)}"
            )
    name = config.name or default_name
    if not _NAME_PATTERN.match(name):
        raise ConfigError(
            f"name: {name!r} cannot name output files; use letters, digits, '_', '-' or '.'"
        )
    named = dataclasses.replace(config, name=name)
    return dataclasses.replace(named, metrics_path=named.metrics_path or named.default_metrics_path)


def with_seed(config: Config, seed: int) -> Config:
    """``config`` on another seed (``drl train --seed``): ``env.seed`` set and the run named
    ``<name>_seed<seed>``, so its checkpoints and metrics sit beside the other seeds' and
    ``drl compare`` groups them; a ``metrics_path`` of the config's own gets the same ending.

    Raises:
        ConfigError: a seed outside ``[0, SEED_MAX]``.
    """
    if not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"--seed: {seed} is outside [0, {SEED_MAX}]")
    seeded = dataclasses.replace(
        config, name=seeded_name(config.name, seed), env=dataclasses.replace(config.env, seed=seed)
    )
    if config.metrics_path == config.default_metrics_path:
        return dataclasses.replace(seeded, metrics_path=seeded.default_metrics_path)
    own = Path(config.metrics_path)
    own = own.with_name(seeded_name(own.stem, seed) + own.suffix)
    return dataclasses.replace(seeded, metrics_path=str(own))


def _check_recurrent_algorithm(algorithm: Any, algo_params: Any) -> None:
    """Only PPO's policies are recurrent (ADR 0018): another algorithm's ``recurrent`` is
    refused with its way to a history, a stack of past observations.

    Raises:
        ConfigError: naming the setting.
    """
    if not isinstance(algo_params, dict) or "recurrent" not in algo_params:
        return
    if any(spec.name == "recurrent" for spec in dataclasses.fields(algorithm.params_type)):
        return
    raise ConfigError(
        f"algo_params.recurrent: {algorithm.name}'s policies are not recurrent (ppo's are); "
        "give it a history of observations with env.wrappers: [{name: FrameStackObservation, "
        "kwargs: {stack_size: 4}}, {name: FlattenObservation}]"
    )


def _check_observation_parts(env: Any) -> None:
    """Observation keys and groups name parts: non-empty, strings (YAML reads an unquoted slice
    ``11:17`` as the number 677), and only one of the two settings.

    Raises:
        ConfigError: naming the setting.
    """
    if not isinstance(env, dict):
        return  # the schema's own check says what is wrong
    lists = {"env.observation_keys": env.get("observation_keys")}
    groups = env.get("observation_groups")
    if isinstance(groups, dict):
        lists |= {f"env.observation_groups.{name}": value for name, value in groups.items()}
        if env.get("observation_keys") is not None:
            raise ConfigError(
                "env.observation_keys: set observation_groups.policy instead (with "
                "observation_groups, the policy's parts are its policy group)"
            )
        if "policy" in groups and not groups.get("policy"):
            raise ConfigError(
                "env.observation_groups.policy: empty; the policy must read at least one part"
            )
    for path, value in lists.items():
        if not isinstance(value, list):
            continue
        if not value and path != "env.observation_groups.critic":
            raise ConfigError(f"{path}: empty; name at least one part, or leave it out")
        if not value:
            raise ConfigError(f"{path}: empty; leave it out to give the critic the policy's parts")
        for index, item in enumerate(value):
            if isinstance(item, int) and not isinstance(item, bool):
                raise ConfigError(
                    f"{path}[{index}]: {item} is a number; quote a slice ('11:17': YAML reads "
                    "an unquoted 11:17 as the number 677) and an index ('5')"
                )


def build_section(cls: type, raw: Any, path: str) -> Any:
    """A dataclass of settings from a plain mapping, checked as config sections are (unknown
    keys with the nearest name, types, the fields' declared bounds), errors naming ``path``.

    Raises:
        ConfigError: naming the key path.
    """
    return _build_dataclass(cls, raw, path)


def check_env_kwargs(kwargs: Any, path: str) -> None:
    """Env kwargs are plain JSON data (they travel to every process and into checkpoints) and
    leave drl's own gymnasium.make arguments alone.

    Raises:
        ConfigError: naming the offending key.
    """
    check_plain_data(kwargs, path)
    for key in kwargs:
        if key in RESERVED_ENV_KWARGS:
            raise ConfigError(f"{path}.{key}: set by drl; use {RESERVED_ENV_KWARGS[key]}")


def _build_dataclass(
    cls: type,
    raw: Any,
    path: str,
    hint_overrides: dict[str, type] | None = None,
) -> Any:
    if not isinstance(raw, dict):
        all_defaults = all(
            spec.default is not dataclasses.MISSING
            or spec.default_factory is not dataclasses.MISSING
            for spec in dataclasses.fields(cls)
        )
        hint = (
            f" (leave {path} out for its defaults)" if raw is None and path and all_defaults else ""
        )
        raise ConfigError(
            f"{path or 'config'}: expected a mapping, got {describe_value(raw)}{hint}"
        )
    hints = typing.get_type_hints(cls)
    hints.update(hint_overrides or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            near = closest_name(str(key), fields)
            hint = f"; did you mean {near!r}?" if near else ""
            raise ConfigError(f"{_join(path, str(key))}: unknown key{hint}")
    missing = [
        name
        for name, spec in fields.items()
        if name not in raw
        and spec.default is dataclasses.MISSING
        and spec.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{_join(path, missing[0])}: required; set it")
    values = {}
    for name, value in raw.items():
        key_path = _join(path, name)
        converted = _coerce(value, hints[name], key_path)
        _check_bounds(converted, fields[name].metadata, key_path)
        values[name] = converted
    return cls(**values)


# What a scalar field's YAML value must be, in the error's words, and the test of it (a YAML
# bool is not a number here, though Python's bool is an int).
_SCALARS: dict[type, tuple[str, Callable[[Any], bool]]] = {
    bool: ("true or false", lambda value: isinstance(value, bool)),
    int: ("int", lambda value: isinstance(value, int) and not isinstance(value, bool)),
    float: (
        "a number",
        lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    ),
    str: ("a string", lambda value: isinstance(value, str)),
}


def _coerce(value: Any, type_: Any, path: str) -> Any:
    origin = typing.get_origin(type_)
    args = typing.get_args(type_)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [arg for arg in args if arg is not type(None)]
        if len(options) == 1:
            return _coerce(value, options[0], path)
        raise TypeError(f"unsupported config type {type_}")  # schema bug, not a user error
    if dataclasses.is_dataclass(type_):
        return _build_dataclass(type_, value, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {describe_value(value)}")
        item_type = args[0]
        return tuple(_coerce(item, item_type, f"{path}[{i}]") for i, item in enumerate(value))
    if origin is dict or type_ is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {describe_value(value)}")
        return dict(value)
    if type_ is int and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)  # YAML reads 1e6 as a float, and step counts are written so
    if type_ in _SCALARS:
        expected, accepts = _SCALARS[type_]
        if not accepts(value):
            raise ConfigError(f"{path}: expected {expected}, got {describe_value(value)}")
        if type_ is float and not math.isfinite(value):
            raise ConfigError(f"{path}: expected a finite number, got {value}")
        return float(value) if type_ is float else value
    raise TypeError(f"unsupported config type {type_}")


def _check_bounds(value: Any, metadata: Any, path: str) -> None:
    if value is None or not metadata:
        return
    if isinstance(value, tuple):  # a list field's constraint holds for each of its items
        for index, item in enumerate(value):
            _check_bounds(item, metadata, f"{path}[{index}]")
        return
    if "min" in metadata and value < metadata["min"]:
        raise ConfigError(f"{path}: must be a positive integer, got {value}")
    if "choices" in metadata and value not in metadata["choices"]:
        options = ", ".join(metadata["choices"])
        raise ConfigError(f"{path}: expected one of {options}; got {value!r}")
    low, high = metadata.get("low"), metadata.get("high")
    too_low = low is not None and (value <= low if metadata["low_open"] else value < low)
    too_high = high is not None and (value >= high if metadata["high_open"] else value > high)
    if too_low or too_high:
        if high is None:
            relation = ">" if metadata["low_open"] else ">="
            raise ConfigError(f"{path}: must be {relation} {low:g}, got {value}")
        left = "(" if metadata["low_open"] else "["
        right = ")" if metadata["high_open"] else "]"
        raise ConfigError(f"{path}: must be in {left}{low:g}, {high:g}{right}, got {value}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def closest_name(key: str, options: typing.Iterable[str]) -> str | None:
    """The option nearest to a mistyped key, if one is near enough to suggest."""
    import difflib

    matches = difflib.get_close_matches(key, list(options), n=1, cutoff=0.75)
    return matches[0] if matches else None

"""Strict, immutable training configuration loaded from YAML.

``load_config(path)`` returns a frozen ``Config``. Fields the file leaves out take the dataclass
defaults; an unknown key, a value of the wrong type, or a value out of range raises
``ConfigError`` naming the key path (``algo_params.batch_size: expected int, got 'abc'``).
Every field is documented in Method.md ("Configuration").

This module imports neither torch nor ray, so the CLI can validate a config instantly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from drlcli.errors import ConfigError

# --- field constraints -------------------------------------------------------------------------
# A field's metadata may carry bounds; the loader checks them and names the key path on failure.


def _positive() -> dict[str, Any]:
    return {"min": 1}


def _range(
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> dict[str, Any]:
    return {"low": low, "high": high, "low_open": low_open, "high_open": high_open}


def _choices(*options: str) -> dict[str, Any]:
    return {"choices": options}


# --- schema ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvConfig:
    """The Gymnasium task every rollout actor steps."""

    id: str = "InvertedPendulum-v5"
    num_envs: int = field(default=1, metadata=_positive())
    seed: int = 0
    max_episode_steps: int | None = field(default=None, metadata=_positive())
    # Keyword arguments of gymnasium.make, e.g. {xml_file: robot.xml} or
    # {include_cfrc_ext_in_observation: false}; stored in checkpoints so play rebuilds the task.
    kwargs: dict[str, Any] = field(default_factory=dict)


# gymnasium.make arguments drl sets itself.
RESERVED_ENV_KWARGS = {
    "id": "env.id",
    "max_episode_steps": "env.max_episode_steps",
    "render_mode": "drl play --render / --video",
}


@dataclass(frozen=True)
class PPOParams:
    """Hyper-parameters of PPO (Schulman et al. 2017), named as in the paper where it names them."""

    learning_rate: float = field(default=3e-4, metadata=_range(0.0, low_open=True))
    anneal_learning_rate: bool = True
    num_epochs: int = field(default=10, metadata=_positive())
    num_minibatches: int = field(default=32, metadata=_positive())
    clip_coef: float = field(default=0.2, metadata=_range(0.0, low_open=True))
    clip_value_loss: bool = False
    ent_coef: float = field(default=0.0, metadata=_range(0.0))
    vf_coef: float = field(default=0.5, metadata=_range(0.0))
    max_grad_norm: float = field(default=0.5, metadata=_range(0.0, low_open=True))
    target_kl: float | None = field(default=None, metadata=_range(0.0, low_open=True))
    normalize_advantages: bool = True
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = field(default="tanh", metadata=_choices("tanh", "relu", "elu"))
    init_log_std: float = 0.0
    normalize_observations: bool = True
    observation_clip: float = field(default=10.0, metadata=_range(0.0, low_open=True))
    normalize_rewards: bool = True
    reward_clip: float = field(default=10.0, metadata=_range(0.0, low_open=True))


@dataclass(frozen=True)
class ActorConfig:
    """A custom policy actor (ADR-0017): ``builder(obs_dim=, action_dim=, device=, **kwargs)``.

    Naming a builder in the config is the user's consent to import that module.
    """

    builder: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FlashSACParams:
    """Hyper-parameters of FlashSAC (arXiv 2604.04539); defaults are the paper's sizes."""

    batch_size: int = field(default=512, metadata=_positive())
    updates_per_env_step: float = field(default=1.0, metadata=_range(0.0, low_open=True))
    buffer_size: int = field(default=1_000_000, metadata=_positive())
    warmup_steps: int = field(default=5_000, metadata=_range(0))
    actor_hidden_dim: int = field(default=128, metadata=_positive())
    actor_num_blocks: int = field(default=2, metadata=_range(0))
    critic_hidden_dim: int = field(default=256, metadata=_positive())
    critic_num_blocks: int = field(default=2, metadata=_range(0))
    num_bins: int = field(default=101, metadata=_range(2))
    v_min: float = -5.0
    v_max: float = 5.0
    target_tau: float = field(default=0.01, metadata=_range(0.0, 1.0, low_open=True))
    initial_temperature: float = field(default=0.01, metadata=_range(0.0, low_open=True))
    target_sigma: float = field(default=0.15, metadata=_range(0.0, low_open=True))
    learning_rate: float = field(default=3e-4, metadata=_range(0.0, low_open=True))
    learning_rate_end: float = field(default=1.5e-4, metadata=_range(0.0))
    actor_update_period: int = field(default=2, metadata=_positive())
    normalize_rewards: bool = True
    normalized_return_max: float = field(default=5.0, metadata=_range(0.0, low_open=True))
    noise_zeta_mu: float = field(default=2.0, metadata=_range(0.0, low_open=True))
    noise_zeta_max: int = field(default=16, metadata=_positive())
    actor_normalize_parameters: bool = True
    critic_normalize_parameters: bool = True
    use_whole_cycle_cuda_graph: bool | None = None
    actor_config: ActorConfig | None = None
    save_replay_buffer: bool = False


# Registered algorithms and their parameter dataclasses.
ALGORITHM_PARAMS: dict[str, type] = {"ppo": PPOParams, "flash_sac": FlashSACParams}
AlgoParams = PPOParams | FlashSACParams


@dataclass(frozen=True)
class Config:
    """One training run. Topology names (num_actors, num_gpus, ...) are those of Method.md."""

    name: str = ""
    algo: str = "ppo"
    env: EnvConfig = field(default_factory=EnvConfig)
    num_actors: int = field(default=1, metadata=_positive())
    num_gpus: int = field(default=1, metadata=_positive())
    actors_per_gpu: int | None = field(default=None, metadata=_positive())
    param_sync_interval: int = field(default=1, metadata=_positive())
    learners_on_cpu: bool = False
    total_env_steps: int = field(default=100_000, metadata=_positive())
    rollout_length: int = field(default=2048, metadata=_positive())
    gamma: float = field(default=0.99, metadata=_range(0.0, 1.0, high_open=False))
    gae_lambda: float = field(default=0.95, metadata=_range(0.0, 1.0))
    output_dir: str = "output"
    metrics_path: str = ""
    algo_params: AlgoParams = field(default_factory=PPOParams)

    @property
    def checkpoint_path(self) -> Path:
        """``<output_dir>/model_<name>.pt``: the latest parameters."""
        return Path(self.output_dir) / f"model_{self.name}.pt"

    @property
    def best_checkpoint_path(self) -> Path:
        """``<output_dir>/model_<name>_best.pt``: the best mean episode return so far."""
        return Path(self.output_dir) / f"model_{self.name}_best.pt"

    @property
    def transitions_per_round(self) -> int:
        """Env steps collected by all rollout actors in one round (before topology scaling)."""
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


def load_config(path: str | Path) -> Config:
    """Read a YAML file into a validated, immutable ``Config``.

    Args:
        path: the YAML file. Its stem names the run when the file sets no ``name``.

    Raises:
        ConfigError: missing/empty/unreadable file, YAML syntax error, a top level that is not a
            mapping, an unknown key, a wrong type, a value out of range, an unknown algorithm.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, expected a YAML config file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read config file ({error})") from error
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
        raise ConfigError(f"{path}: config file is empty; see configs/ for examples")
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: top level must be a mapping of keys to values, got {type(raw).__name__}"
        )
    try:
        return config_from_dict(raw, default_name=path.stem)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


def config_from_dict(raw: dict[str, Any], default_name: str = "run") -> Config:
    """Validate a plain mapping (already parsed YAML or a checkpoint's stored config)."""
    raw = dict(raw)
    algo = raw.get("algo", Config.algo)
    if not isinstance(algo, str) or algo not in ALGORITHM_PARAMS:
        known = ", ".join(sorted(ALGORITHM_PARAMS))
        raise ConfigError(f"algo: unknown algorithm {algo!r}; choose one of: {known}")
    params_type = ALGORITHM_PARAMS[algo]
    raw.setdefault("algo_params", {})
    config = _build_dataclass(Config, raw, "", hint_overrides={"algo_params": params_type})
    if isinstance(config.algo_params, FlashSACParams):
        _check_flash_sac(config.algo_params)
    check_env_kwargs(config.env.kwargs, "env.kwargs")
    name = config.name or default_name
    if not _NAME_PATTERN.match(name):
        raise ConfigError(
            f"name: {name!r} cannot name output files; use letters, digits, '_', '-' or '.'"
        )
    metrics_path = config.metrics_path or str(Path(config.output_dir) / f"metrics_{name}.csv")
    return dataclasses.replace(config, name=name, metrics_path=metrics_path)


def check_env_kwargs(kwargs: Any, path: str) -> None:
    """Env kwargs are plain JSON data (they travel to every process and into checkpoints) and
    leave drl's own gymnasium.make arguments alone.

    Raises:
        ConfigError: naming the offending key.
    """
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{path}: expected a mapping, got {_describe(kwargs)}")
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise ConfigError(f"{path}: keys must be strings, got {key!r}")
        if key in RESERVED_ENV_KWARGS:
            raise ConfigError(f"{path}.{key}: set by drl; use {RESERVED_ENV_KWARGS[key]}")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{path}.{key}: {_describe(value)} is not plain data (use strings, numbers, "
                "booleans, lists and mappings)"
            ) from None


def _check_flash_sac(params: FlashSACParams) -> None:
    """ADR-0017 rules that need no hardware knowledge (the CUDA auto case is the learner's)."""
    if params.v_min >= params.v_max:
        raise ConfigError(
            f"algo_params.v_min: must be below v_max ({params.v_min} >= {params.v_max})"
        )
    if params.actor_config is None:
        return
    if params.use_whole_cycle_cuda_graph:
        raise ConfigError(
            "algo_params.use_whole_cycle_cuda_graph: a custom actor (actor_config) cannot run in "
            "a whole-cycle CUDA graph; set it to false"
        )
    if not params.actor_normalize_parameters:
        raise ConfigError(
            "algo_params.actor_normalize_parameters: false only applies to the built-in actor; "
            "a custom actor (actor_config) owns normalize_parameters()"
        )


def _build_dataclass(
    cls: type,
    raw: Any,
    path: str,
    hint_overrides: dict[str, type] | None = None,
) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {_describe(raw)}")
    hints = typing.get_type_hints(cls)
    hints.update(hint_overrides or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            near = _closest(str(key), fields)
            hint = f"; did you mean {near!r}?" if near else ""
            raise ConfigError(f"{_join(path, str(key))}: unknown key{hint}")
    values = {}
    for name, value in raw.items():
        key_path = _join(path, name)
        converted = _coerce(value, hints[name], key_path)
        _check_bounds(converted, fields[name].metadata, key_path)
        values[name] = converted
    return cls(**values)


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
            raise ConfigError(f"{path}: expected a list, got {_describe(value)}")
        item_type = args[0]
        return tuple(_coerce(item, item_type, f"{path}[{i}]") for i, item in enumerate(value))
    if origin is dict or type_ is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {_describe(value)}")
        return dict(value)
    if type_ is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {_describe(value)}")
        return value
    if type_ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected int, got {_describe(value)}")
        return value
    if type_ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {_describe(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{path}: expected a finite number, got {value}")
        return float(value)
    if type_ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {_describe(value)}")
        return value
    raise TypeError(f"unsupported config type {type_}")


def _check_bounds(value: Any, metadata: Any, path: str) -> None:
    if value is None or not metadata:
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


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return f"a {type(value).__name__}"
    return repr(value)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _closest(key: str, options: typing.Iterable[str]) -> str | None:
    import difflib

    matches = difflib.get_close_matches(key, list(options), n=1, cutoff=0.75)
    return matches[0] if matches else None

"""The search space file of ``drl tune``: which config keys a search varies and over what.

A space file maps dotted config keys to one distribution each::

    space:
      algo_params.learning_rate: {loguniform: [1.0e-5, 1.0e-3]}
      algo_params.num_epochs: {int: [4, 12]}          # both ends included
      algo_params.clip_coef: {uniform: [0.1, 0.3]}
      algo_params.hidden_sizes: {choice: [[64, 64], [256, 256]]}

Everything is checked before any trial starts, against the config the search starts from: an
unknown key, a key the search itself sets, a range on a field that is not a number, an empty
choice, ``low >= high``, a log range that reaches 0, each end or choice that the field
itself refuses (``gamma: {uniform: [0.9, 1.5]}``), and a setting read only under a value that
neither the config nor the space gives (``desired_kl`` without ``adaptive_kl``) are one-line
``ConfigError``s naming the key. A trial's config leaves out what that trial does not read
(``without_unread``).
Pure: no Ray, no torch.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drlcli.algos.registry import get_algorithm
from drlcli.config import (
    Config,
    closest_name,
    config_from_dict,
    read_yaml_mapping,
    with_values,
)
from drlcli.config_fields import (
    describe_value,
    read_condition,
    read_conditions,
    unread_settings,
)
from drlcli.errors import ConfigError

# Keys a search sets itself (each trial's name, folder and seed; the budget is the search's).
SEARCH_OWNED_KEYS = {
    "name": "each trial is named by the search",
    "output_dir": "each trial writes into the search's folder",
    "metrics_path": "each trial writes into the search's folder",
    "total_env_steps": "the search's trial_env_steps sets the budget",
    "env.seed": "the search gives each trial its seeds",
    "algo": "each algorithm has its own algo_params; run one search per algorithm",
}
KINDS = ("choice", "uniform", "loguniform", "int")


@dataclass(frozen=True)
class Dimension:
    """One searched key: ``kind`` is one of ``KINDS``; ``values`` the choices, or the range's
    ``(low, high)`` (``int``: both ends included)."""

    key: str
    kind: str
    values: tuple[Any, ...]

    @property
    def low(self) -> float:
        return self.values[0]

    @property
    def high(self) -> float:
        return self.values[1]


def parse_space(raw: Any, base: Mapping[str, Any], where: str = "space") -> list[Dimension]:
    """Check a ``space:`` mapping against the config it varies.

    Args:
        raw: the ``space`` section: dotted config key -> ``{kind: values}``.
        base: the plain config mapping the search starts from (a YAML config as read).
        where: the section's name in error messages.

    Returns:
        One ``Dimension`` per key, in the file's order.

    Raises:
        ConfigError: naming ``where.key`` and what is wrong with it.
    """
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(
            f"{where}: expected a mapping of config keys to distributions, got "
            f"{describe_value(raw) if raw != {} else 'an empty mapping'} "
            "(e.g. algo_params.learning_rate: {loguniform: [1.0e-5, 1.0e-3]})"
        )
    algorithm = get_algorithm(base.get("algo", Config.algo))
    dimensions = []
    for key, spec in raw.items():
        path = f"{where}.{key}"
        if not isinstance(key, str):
            raise ConfigError(f"{where}: keys must be dotted config keys, got {key!r}")
        if key in SEARCH_OWNED_KEYS:
            raise ConfigError(f"{path}: cannot be searched: {SEARCH_OWNED_KEYS[key]}")
        field_type = _field_type(key, algorithm.params_type, path)
        dimension = _parse_distribution(key, spec, field_type, path)
        for value in checked_values(dimension):
            try:
                config_from_dict(
                    with_values(base, {key: value}),
                    default_name="trial",
                    refuse_unread_settings=False,
                )
            except ConfigError as error:
                raise ConfigError(f"{path}: {describe_value(value)} is refused: {error}") from None
        dimensions.append(dimension)
    _check_each_is_read(dimensions, base, algorithm.params_type, where)
    return dimensions


def _check_each_is_read(
    dimensions: list[Dimension], base: Mapping[str, Any], params_type: type, where: str
) -> None:
    """A searched setting read only under another's value (``read_only_with``) needs the
    config or the space to give that value, or no trial would read it.

    Raises:
        ConfigError: ``space.KEY: read only with SETTING: VALUE, which ...``.
    """
    params = config_from_dict(dict(base), refuse_unread_settings=False).algo_params
    searched = {d.key: checked_values(d) for d in dimensions}
    conditions = read_conditions(params_type)
    for key in searched:
        name = key.removeprefix("algo_params.")
        if not key.startswith("algo_params.") or name not in conditions:
            continue
        setting, wanted = conditions[name]
        if getattr(params, setting) != wanted and wanted not in searched.get(
            f"algo_params.{setting}", ()
        ):
            raise ConfigError(
                f"{where}.{key}: read only with algo_params.{read_condition(setting, wanted)}, "
                "which neither the config nor the space gives any trial; set it in the config, "
                "or search it too"
            )


def without_unread(raw: dict[str, Any]) -> dict[str, Any]:
    """The plain config ``raw`` less the ``algo_params`` settings its others leave unread
    (``desired_kl`` in a trial of the ``anneal`` schedule): what a trial trains and a winner's
    config holds, so that ``drl train`` takes either."""
    config = config_from_dict(raw, default_name="trial", refuse_unread_settings=False)
    for name, _, _ in unread_settings(config.algo_params):
        raw["algo_params"].pop(name, None)
    return raw


def read_space_file(path: str | Path) -> dict[str, Any]:
    """The space file as a mapping (``space:`` and the optional ``search:`` settings).

    Raises:
        ConfigError: a missing, unreadable or malformed file, or a top-level key other than
            ``space`` and ``search``.
    """
    raw = read_yaml_mapping(Path(path), what="search space file")
    unknown = sorted(set(raw) - {"space", "search"})
    if unknown:
        raise ConfigError(
            f"{path}: {unknown[0]}: unknown key; a space file has 'space' (the keys searched) "
            "and 'search' (how)"
        )
    if "space" not in raw:
        raise ConfigError(f"{path}: space: required; name the config keys to search")
    return raw


def _field_type(key: str, params_type: type, path: str) -> Any:
    """The declared type of a dotted config key (``algo_params.*`` in the algorithm's
    params); ConfigError for a key the config does not have."""
    owner: type = Config
    parts = key.split(".")
    for index, part in enumerate(parts):
        hints = typing.get_type_hints(owner)
        if owner is Config:
            hints["algo_params"] = params_type
        names = [f.name for f in dataclasses.fields(owner)]
        if part not in names:
            near = closest_name(part, names)
            hint = f"; did you mean {'.'.join([*parts[:index], near])!r}?" if near else ""
            raise ConfigError(f"{path}: unknown key{hint}")
        field_type = _without_none(hints[part])
        if index == len(parts) - 1:
            return field_type
        if not dataclasses.is_dataclass(field_type):
            raise ConfigError(
                f"{path}: {'.'.join(parts[: index + 1])} has no keys inside it; search it whole"
            )
        owner = field_type
    raise AssertionError("unreachable")


def _without_none(type_: Any) -> Any:
    args = [arg for arg in typing.get_args(type_) if arg is not type(None)]
    if typing.get_origin(type_) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return type_


def _parse_distribution(key: str, spec: Any, field_type: Any, path: str) -> Dimension:
    example = (
        "{choice: [a, b]}, {uniform: [low, high]}, {loguniform: [low, high]}, {int: [low, high]}"
    )
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ConfigError(f"{path}: expected one distribution, one of {example}")
    ((kind, values),) = spec.items()
    if kind not in KINDS:
        raise ConfigError(f"{path}: {kind!r} is not a distribution; use one of {example}")
    if kind == "choice":
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{path}: choice needs a non-empty list of values")
        return Dimension(key, kind, tuple(values))
    if field_type is bool:
        raise ConfigError(f"{path}: a range on a boolean; use choice: [true, false]")
    if field_type not in (int, float):
        raise ConfigError(
            f"{path}: a range needs a number field, and this one holds "
            f"{getattr(field_type, '__name__', str(field_type))}; use choice: [...]"
        )
    if kind in ("uniform", "loguniform") and field_type is int:
        raise ConfigError(f"{path}: an integer field; use int: [low, high]")
    if (
        not isinstance(values, list)
        or len(values) != 2
        or not all(_is_number(value) for value in values)
    ):
        raise ConfigError(f"{path}: {kind} needs [low, high], two numbers; got {values!r}")
    low, high = values
    if kind == "int":  # a whole number written as a float (1e3) counts, as in a config
        if not all(isinstance(value, int) or float(value).is_integer() for value in values):
            raise ConfigError(f"{path}: int needs two integers; got {values!r}")
        low, high = int(low), int(high)
    if low >= high:
        raise ConfigError(f"{path}: low must be below high; got [{low}, {high}]")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{path}: loguniform needs low > 0; got {low}")
    return Dimension(key, kind, (low, high))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def checked_values(dimension: Dimension) -> tuple[Any, ...]:
    """The values whose acceptance by the config stands for the whole dimension: every
    choice, or both ends of a range (the config's bounds are intervals)."""
    if dimension.kind == "choice":
        return dimension.values
    if dimension.kind == "int":
        return (dimension.low, dimension.high)
    return (float(dimension.low), float(dimension.high))

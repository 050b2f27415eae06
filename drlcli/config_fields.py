"""Constraints a config field declares in its metadata (``load_config`` checks them and names the
key path on failure), and the plain-data check of free-form mappings. No torch, no drl imports
but errors: the params of every algorithm use these."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from drlcli.errors import ConfigError


def positive() -> dict[str, Any]:
    """An integer >= 1."""
    return {"min": 1}


def in_range(
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> dict[str, Any]:
    """A number in ``[low, high]``; ``low_open``/``high_open`` exclude the end; None: unbounded."""
    return {"low": low, "high": high, "low_open": low_open, "high_open": high_open}


def one_of(*options: str) -> dict[str, Any]:
    """A string from ``options``."""
    return {"choices": options}


def refuse_unread(params: Any, name: str, read: bool, read_with: str) -> None:
    """A setting that only another makes read, given a value other than its default where
    nothing reads it: training would ignore it in silence, so it is refused. Its default's
    value stays accepted (a stored config holds every field).

    Args:
        params: an algorithm's params dataclass.
        name: the field.
        read: whether this config reads it.
        read_with: the setting that makes it read, as the user writes it.

    Raises:
        ConfigError: ``algo_params.NAME: VALUE is read only with READ_WITH; ...``.
    """
    value = getattr(params, name)
    (spec,) = (field for field in dataclasses.fields(params) if field.name == name)
    if not read and value != spec.default:
        raise ConfigError(
            f"algo_params.{name}: {value} is read only with {read_with}; set that, or remove {name}"
        )


def check_plain_data(mapping: Any, path: str) -> None:
    """A mapping of string keys to JSON data (finite numbers): what travels to every process
    and into checkpoints (env kwargs, actor kwargs).

    Raises:
        ConfigError: naming the offending key.
    """
    if not isinstance(mapping, dict):
        raise ConfigError(f"{path}: expected a mapping, got {describe_value(mapping)}")
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ConfigError(f"{path}: keys must be strings, got {key!r}")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{path}.{key}: {describe_value(value)} is not plain data (use strings, finite "
                "numbers, booleans, lists and mappings)"
            ) from None


def describe_value(value: Any) -> str:
    """A value as an error message shows it: ``null``, ``a dict``, ``'abc'``."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return f"a {type(value).__name__}"
    return repr(value)

"""Constraints a config field declares in its metadata (``load_config`` checks them and names the
key path on failure), and the plain-data check of free-form mappings. No torch, no drl imports
but errors: the params of every algorithm use these."""

from __future__ import annotations

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

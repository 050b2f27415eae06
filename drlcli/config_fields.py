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


def read_only_with(setting: str, value: Any) -> dict[str, Any]:
    """A field read only when the params' ``setting`` is ``value`` (``unread_settings``)."""
    return {"read_only_with": (setting, value)}


def read_condition(setting: str, value: Any) -> str:
    """``setting: value`` as a config writes it (``normalize_rewards: true``)."""
    return f"{setting}: {str(value).lower() if isinstance(value, bool) else value}"


def read_conditions(params_type: Any) -> dict[str, tuple[str, Any]]:
    """Each field of a params dataclass (type or instance) declared ``read_only_with``: its
    name -> ``(setting, value that makes it read)``."""
    return {
        spec.name: spec.metadata["read_only_with"]
        for spec in dataclasses.fields(params_type)
        if "read_only_with" in spec.metadata
    }


def unread_settings(params: Any) -> list[tuple[str, str, Any]]:
    """The fields of ``params`` (an algorithm's params dataclass) given a value other than
    their default that the other settings leave unread (``read_only_with``), each as
    ``(name, setting, value that makes it read)``. The default's value never counts: a stored
    config holds every field."""
    defaults = {spec.name: spec.default for spec in dataclasses.fields(params)}
    return [
        (name, setting, wanted)
        for name, (setting, wanted) in read_conditions(params).items()
        if getattr(params, setting) != wanted and getattr(params, name) != defaults[name]
    ]


def with_unread_at_defaults(params: Any) -> Any:
    """``params`` with each setting the others leave unread (``unread_settings``) back at its
    default: what a config without those settings gives."""
    defaults = {spec.name: spec.default for spec in dataclasses.fields(params)}
    return dataclasses.replace(
        params, **{name: defaults[name] for name, _, _ in unread_settings(params)}
    )


def refuse_unread(params: Any) -> None:
    """Training would ignore a setting that nothing reads, in silence: refuse the first.

    Raises:
        ConfigError: ``algo_params.NAME: VALUE is read only with SETTING: VALUE; ...``.
    """
    for name, setting, wanted in unread_settings(params):
        raise ConfigError(
            f"algo_params.{name}: {getattr(params, name)} is read only with "
            f"{read_condition(setting, wanted)}; set that, or remove {name}"
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

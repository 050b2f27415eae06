"""Constraints a config field declares in its metadata; ``load_config`` checks them and names the
key path on failure. Plain data, no imports: the params of every algorithm use these."""

from __future__ import annotations

from typing import Any


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

"""What every sink takes from a metrics row: numeric cells against env steps."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

STEP_COLUMN = "env_steps"  # the x axis (step) of every value a sink logs


def is_number(value: Any) -> bool:
    """A finite int or float (an empty CSV cell, None, a bool or a NaN is no point)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def logged_values(row: Mapping[str, Any]) -> dict[str, float]:
    """The cells of a row (or an evaluation's metrics) a sink logs: numbers, the step aside."""
    return {key: value for key, value in row.items() if key != STEP_COLUMN and is_number(value)}

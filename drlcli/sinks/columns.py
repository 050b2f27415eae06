"""What every sink takes from a metrics row: numeric cells against env steps."""

from __future__ import annotations

import math
from typing import Any

STEP_COLUMN = "env_steps"  # the x axis (step) of every value a sink logs


def is_number(value: Any) -> bool:
    """A finite int or float (an empty CSV cell, None, a bool or a NaN is no point)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

"""The mean of learners' parameters: PPO's parameter averaging (the ParameterServer) and the
networks both algorithms resume from under another learner count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def average_state_dicts(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Element-wise mean of nested state dicts with identical structure (floating tensors);
    non-floating tensors (counters) are taken from the first."""
    import torch

    first = states[0]
    if isinstance(first, dict):
        return {key: average_state_dicts([state[key] for state in states]) for key in first}
    if isinstance(first, torch.Tensor) and first.is_floating_point():
        return torch.stack(list(states)).mean(dim=0)
    return first

"""ParameterServer: global observation statistics and learner parameter averaging.

A plain class that PPO's round loop holds in the driver's process (``runtime/ppo_loop.py``): it
merges a few moments a round and averages parameters the driver holds references to, so a
process of its own would only cost every run a Ray worker's start.
"""

from __future__ import annotations

from typing import Any

from drlcli.normalization import RmsState, merge_rms_states
from drlcli.parameter_averaging import average_state_dicts


class ParameterServer:
    """Holds the global observation statistics and averages learner parameters."""

    def __init__(self, obs_rms_state: dict[str, Any] | None = None) -> None:
        self._obs_rms = RmsState.from_dict(obs_rms_state) if obs_rms_state is not None else None

    def get_obs_rms(self) -> dict[str, Any] | None:
        return self._obs_rms.to_dict() if self._obs_rms is not None else None

    def update_obs_rms(self, increment: dict[str, Any] | None) -> dict[str, Any] | None:
        """Merge one round's increment (all rollout actors already merged) into the history,
        exactly once per round."""
        if increment is not None:
            self._obs_rms = merge_rms_states([self._obs_rms, RmsState.from_dict(increment)])
        return self.get_obs_rms()

    def average_parameters(self, *states: dict[str, Any]) -> dict[str, Any]:
        return average_state_dicts(states)

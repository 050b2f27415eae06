"""An off-policy run resumed under another learner count (Method.md, "Checkpoints and resume"):
pure functions from the stored learners' states and replay buffers to the new learners'.

Every new learner starts from the same state: the mean of the stored networks (the algorithm's
``OffPolicy.network_keys``: FlashSAC's actor, critics, target critics, temperature, BatchNorm
statistics included), learner 0's optimisers, and the run's totals shared out: the update
counter (the schedules' position: the same fraction of the run's updates is done), the
transitions collected (the warm-up), and the merged reward-scaler moments. The stored
transitions are pooled in the order they were collected and dealt out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from drlcli.normalization import RmsState, merge_rms_states
from drlcli.parameter_averaging import average_state_dicts


def learner_states_for(
    states: Sequence[dict[str, Any]], count: int, networks: Sequence[str]
) -> list[dict[str, Any]]:
    """The states of ``count`` learners resuming from ``states`` (unchanged when the count is
    the same); ``networks``: the state entries that are averaged."""
    if len(states) == count:
        return list(states)
    merged = {
        # Optimisers and aux-loss names of learner 0; not its collection (episodes in progress,
        # random streams): the new learners' rollout actors start their episodes afresh.
        **{key: value for key, value in states[0].items() if key != "collection"},
        **average_state_dicts([{name: state[name] for name in networks} for state in states]),
        "updates": round(sum(int(state["updates"]) for state in states) / count),
        "transitions": sum(int(state["transitions"]) for state in states) // count,
        "return_scaler": _merged_return_scaler([state.get("return_scaler") for state in states]),
    }
    return [merged] * count


def _merged_return_scaler(scalers: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    moments = [RmsState.from_dict(s) for s in scalers if s is not None and float(s["count"]) > 0]
    merged = merge_rms_states(moments)
    if merged is None:
        return None
    abs_max = max(float(s.get("abs_max", 0.0)) for s in scalers if s is not None)
    return {**merged.to_dict(), "abs_max": abs_max}


def replays_for(
    buffers: Sequence[dict[str, np.ndarray]], count: int
) -> list[dict[str, np.ndarray]]:
    """``count`` replay buffers from the stored ones (each oldest first): unchanged for the
    same count, else pooled in collection order (each buffer's rows spread evenly over the
    run's time) and dealt out round-robin, so each new learner holds a share of every period."""
    if len(buffers) == count:
        return list(buffers)
    # Position in time of each row: its rank within its own buffer, scaled to (0, 1].
    times = np.concatenate([(np.arange(len(b["obs"])) + 1) / len(b["obs"]) for b in buffers])
    order = np.argsort(times, kind="stable")
    pooled = {name: np.concatenate([b[name] for b in buffers])[order] for name in buffers[0]}
    return [{name: rows[index::count] for name, rows in pooled.items()} for index in range(count)]

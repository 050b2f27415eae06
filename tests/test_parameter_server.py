"""ParameterServer: parameter averaging and the global observation statistics."""

from __future__ import annotations

import numpy as np
import torch

from drlcli.normalization import RmsState, compute_batch_moments
from drlcli.parameter_averaging import average_state_dicts
from drlcli.runtime.parameter_server import ParameterServer


def test_average_state_dicts_means_floating_tensors_and_keeps_counters():
    averaged = average_state_dicts(
        [
            {"net": {"w": torch.tensor([1.0, 2.0]), "steps": torch.tensor(3)}, "tag": "a"},
            {"net": {"w": torch.tensor([3.0, 6.0]), "steps": torch.tensor(7)}, "tag": "b"},
            {"net": {"w": torch.tensor([5.0, 1.0]), "steps": torch.tensor(9)}, "tag": "c"},
        ]
    )
    assert torch.equal(averaged["net"]["w"], torch.tensor([3.0, 3.0]))
    assert torch.equal(averaged["net"]["steps"], torch.tensor(3))  # learner 0's counter
    assert averaged["tag"] == "a"


def test_the_server_merges_each_round_increment_once_into_the_history():
    rng = np.random.default_rng(0)
    rounds = [rng.normal(size=(50, 3)) for _ in range(3)]
    server = ParameterServer()
    assert server.get_obs_rms() is None
    for batch in rounds:
        merged = server.update_obs_rms(compute_batch_moments(batch).to_dict())
    everything = np.concatenate(rounds)
    state = RmsState.from_dict(merged)
    assert state.count == 150.0
    np.testing.assert_allclose(state.mean, everything.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(state.var, everything.var(axis=0), rtol=1e-12)
    assert server.update_obs_rms(None)["count"] == 150.0  # no data this round: unchanged

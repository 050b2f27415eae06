"""The shared off-policy layer (drlcli/off_policy/) with a stand-in learner: nothing in it is an
algorithm's, so any learner with the ``OffPolicyLearner`` surface is collected for."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from drlcli.config import EnvConfig
from drlcli.off_policy.collector import OffPolicyCollector
from drlcli.runtime.env_stepper import EnvStepper, LocalStepperPool
from drlcli.runtime.run_context import RolloutActorContext


def stepper_context(actor_id: int, env: EnvConfig) -> RolloutActorContext:
    """An ``EnvStepper``'s context: it reads its id and environments only (no policy)."""
    return RolloutActorContext(actor_id, env, spec=None, params=None, gamma=0.99)


@dataclasses.dataclass(frozen=True)
class Params:
    batch_size: int = 4
    updates_per_env_step: float = 0.75
    buffer_size: int = 1000
    warmup_steps: int = 8
    normalize_rewards: bool = False
    normalized_return_max: float = 5.0


class ConstantActor(torch.nn.Module):
    """Explores with one fixed action, so the collector's own warm-up actions stand out."""

    def __init__(self, action: float) -> None:
        super().__init__()
        self.action = action
        self.calls = 0

    def explore(self, obs, dones=None, deterministic=False):
        self.calls += 1
        return torch.full((len(obs), 1), self.action)


class RecordingLearner:
    """The ``OffPolicyLearner`` surface, recording every batch it is given."""

    def __init__(self) -> None:
        self.actor = ConstantActor(0.25)
        self.device = torch.device("cpu")
        self.data_parallel = None
        self.batches: list[dict[str, torch.Tensor]] = []

    def update(self, batch):
        self.batches.append(batch)
        return {"Loss/critic": float(len(self.batches))}

    def state_dict(self):
        return {"seen": len(self.batches)}

    def load_state_dict(self, state):
        pass


def collector(params=Params(), envs=2):
    env = EnvConfig(id="InvertedPendulum-v5", num_envs=envs, seed=3)
    steppers = LocalStepperPool([EnvStepper(stepper_context(0, env))], num_envs=envs)
    learner = RecordingLearner()
    return OffPolicyCollector(learner, steppers, params, [-3.0], [3.0], 4, 0.99), learner


def test_warm_up_actions_span_the_box_then_the_learners_actor_chooses():
    collect, learner = collector()
    collect.run(6)  # 12 transitions: the first 8 at random, then the actor's
    actions = collect.replay.arrays()["act"][:, 0]
    assert len(np.unique(actions[:8])) == 8 and np.all(np.abs(actions[:8]) <= 3.0)
    np.testing.assert_array_equal(actions[8:], 0.25)
    assert learner.actor.calls == 2


def test_updates_follow_the_update_to_data_ratio_with_the_fraction_carried():
    collect, learner = collector()
    stats, metrics = collect.run(10)
    # Ready once 8 transitions are in (after step 4): steps 5..10 owe 2 * 0.75 each = 9.0.
    assert metrics["updates"] == 9 == len(learner.batches)
    assert metrics["Loss/critic"] == np.mean(range(1, 10)) and metrics["buffer_size"] == 20.0
    assert all(len(batch["obs"]) == 4 for batch in learner.batches)
    state = collect.state_dict()
    assert state["seen"] == 9 and state["transitions"] == 20  # the learner's state, and ours


@pytest.mark.parametrize("normalize", [False, True])
def test_replayed_rewards_are_divided_by_the_scalers_divisor_only_when_asked(normalize):
    params = Params(normalize_rewards=normalize, updates_per_env_step=1.0, warmup_steps=20)
    collect, learner = collector(params)
    collect.run(10)  # fills the buffer; no update yet
    collect.updating = True
    divisor = collect.reward_scaler.divisor() if normalize else 1.0
    assert divisor != pytest.approx(1.0) or not normalize
    collect.replay._rng = np.random.default_rng(0)
    collect.run(1)
    index = np.random.default_rng(0).integers(0, 20, size=4)
    expected = collect.replay.rew[index] / np.float32(divisor)
    np.testing.assert_allclose(learner.batches[0]["rew"].numpy(), expected, rtol=1e-6)


def test_a_stored_return_scaler_is_checked_under_its_own_key():
    from drlcli.off_policy.soft_actor_critic import return_scaler_problem

    good = {"mean": np.zeros(1), "var": np.ones(1), "count": 4.0, "abs_max": 1.0}
    assert return_scaler_problem({"return_scaler": good}) is None
    assert return_scaler_problem({"return_scaler": None}) is None  # no reward yet
    damaged = {"return_scaler": {**good, "var": np.array([-1.0])}, "scaler": good}
    assert return_scaler_problem(damaged) == (
        "return_scaler has non-finite moments or a negative variance"
    )

"""FlashSAC's data-parallel learners (off_policy/data_parallel.py): two CPU learners in
their own Ray processes, joined in a gloo group the way the round loop joins them, make the same
updates as one learner on their two batches concatenated."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from drlcli.actors.spec import ActorSpec
from drlcli.algos.flash_sac.learner import FlashSACLearner
from drlcli.algos.flash_sac.params import FlashSACParams
from drlcli.env_facts import EnvFacts
from drlcli.runtime.off_policy_workers import DataParallelMember, form_data_parallel_group
from tests.learner_contexts import learner_context

OBS_DIM, ACTION_DIM, BATCH = 5, 2, 32
LOW, HIGH = [-1.0, -2.0], [1.0, 2.0]
FACTS = EnvFacts("task", OBS_DIM, ACTION_DIM, np.array(LOW), np.array(HIGH))
SPEC = ActorSpec(
    "tests.custom_actors:build_sample_noise",
    {"action_low": LOW, "action_high": HIGH, "hidden_dim": 16, "aux_weight": 0.1},
)
# Small networks; actor_update_period 2 alternates updates with and without the actor step, and
# a short schedule moves the learning rate at every update.
PARAMS = FlashSACParams(
    batch_size=BATCH,
    critic_hidden_dim=16,
    critic_num_blocks=1,
    num_bins=11,
    actor_update_period=2,
    learning_rate=1e-3,
    learning_rate_end=1e-4,
    use_whole_cycle_cuda_graph=False,
)
UPDATES = 6
# float32 sums over 2B rows in one learner and over B rows per learner plus an all-reduce round
# differently; Adam's first steps, ~lr * sign(g), then move a parameter whose gradient is near
# zero by up to 2 lr either way. Measured here: 3.7e-6 at most.
TOLERANCE = 1e-4


def learner(learners: int) -> FlashSACLearner:
    torch.set_num_threads(1)
    return FlashSACLearner(learner_context(SPEC, FACTS, PARAMS, updates=UPDATES, learners=learners))


def batches(seed: int) -> list[dict[str, torch.Tensor]]:
    """``UPDATES`` batches; observations with an offset and spread like a robot's state."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    return [
        {
            "obs": 2.0 + 3.0 * draw(BATCH, OBS_DIM),
            "act": draw(BATCH, ACTION_DIM).clamp(-1, 1),
            "rew": draw(BATCH),
            "next_obs": 2.0 + 3.0 * draw(BATCH, OBS_DIM),
            "terminated": (draw(BATCH) > 1.0).float(),
        }
        for _ in range(UPDATES)
    ]


class DataParallelUpdater(DataParallelMember):
    """One data-parallel learner in its own process (a Ray actor)."""

    def __init__(self, start: dict[str, Any]) -> None:
        self.off_policy_learner = learner(2)
        self.off_policy_learner.load_network_state(start)

    def train(self, seed: int) -> dict[str, Any]:
        for batch in batches(seed):
            self.off_policy_learner.update(batch)
        return self.off_policy_learner.state_dict()


def flat_networks(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {
        f"{network}.{name}": tensor
        for network in ("actor", "critic", "target_critic")
        for name, tensor in state[network].items()
    } | {"log_temperature": state["log_temperature"]}


def test_two_learners_hold_identical_networks_equal_to_one_learner_on_both_batches(ray_cluster):
    import ray

    start = learner(1).network_state()
    workers = [ray.remote(DataParallelUpdater).options(num_cpus=0.5).remote(start) for _ in "ab"]
    try:
        form_data_parallel_group(workers)  # as the round loop forms it
        states = ray.get([worker.train.remote(seed) for seed, worker in enumerate(workers)])
    finally:
        for worker in workers:
            ray.kill(worker)

    first, second = (flat_networks(state) for state in states)
    for name, tensor in first.items():  # the same all-reduced numbers on both: bit-identical
        assert torch.equal(tensor, second[name]), name
    for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
        for slot, values in states[0][name]["state"].items():
            for key, value in values.items():
                assert torch.equal(value, states[1][name]["state"][slot][key]), (name, key)

    single = learner(1)
    single.load_network_state(start)
    for part, other in zip(batches(0), batches(1), strict=True):
        single.update({key: torch.cat([part[key], other[key]]) for key in part})
    expected = flat_networks(single.state_dict())
    initial = flat_networks(start)
    moved = 0
    for name, tensor in first.items():
        difference = (tensor - expected[name]).abs().max().item()
        assert difference <= TOLERANCE, (name, difference)
        moved += not torch.equal(expected[name], initial[name])
    assert moved > len(first) // 2  # the updates changed most tensors: the test compares moves
    assert single.updates == UPDATES


def test_graphs_are_refused_with_several_learners_and_auto_turns_them_off(monkeypatch):
    from drlcli.algos.flash_sac.cuda_graph import resolve_cuda_graph
    from drlcli.errors import ConfigError

    builtin = ActorSpec("drlcli.algos.flash_sac.actor:build_flash_sac_actor", {})
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # an NVIDIA build, as far as drl asks
    assert resolve_cuda_graph(FlashSACParams(), builtin, cuda, learners=1) is True
    assert resolve_cuda_graph(FlashSACParams(), builtin, cuda, learners=2) is False
    assert resolve_cuda_graph(FlashSACParams(), SPEC, cuda, learners=2) is False  # custom: fine
    explicit = FlashSACParams(use_whole_cycle_cuda_graph=True)
    with pytest.raises(ConfigError, match="this run has 2 data-parallel learners"):
        resolve_cuda_graph(explicit, builtin, cuda, learners=2)


def test_a_learner_that_cannot_reach_the_group_fails_in_one_line(monkeypatch):
    import socket

    from drlcli.errors import TrainingError
    from drlcli.off_policy import data_parallel

    monkeypatch.setattr(data_parallel, "JOIN_TIMEOUT_S", 0.5)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TrainingError) as error:
        data_parallel.DataParallelGroup.join(1, 2, "127.0.0.1", port, torch.device("cpu"))
    message = str(error.value)
    assert message.startswith(
        f"learner 1 could not join the 2 data-parallel learners at 127.0.0.1:{port} (gloo: "
    )
    assert "GLOO_SOCKET_IFNAME" in message and "\n" not in message


class OtherLearner:
    """Stands in for ``torch.distributed``'s all-reduce across two learners: adds (or takes the
    minimum with) what the other learner contributes, given as ``other(tensor)``."""

    def __init__(self, other):
        self.other = other

    def all_reduce(self, tensor, op=None):
        if op is not None and op == torch.distributed.ReduceOp.MIN:
            tensor.copy_(torch.minimum(tensor, self.other(tensor)))
        else:
            tensor.add_(self.other(tensor))

    def differentiable_all_reduce(self, tensor):
        return tensor + self.other(tensor)


def test_averaged_gradients_are_the_mean_of_both_learners_in_place_of_each(monkeypatch):
    from drlcli.off_policy import data_parallel

    ours = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))]
    ours.append(torch.nn.Parameter(torch.zeros(1, 2)))
    unused = torch.nn.Parameter(torch.zeros(1))  # no gradient: left out on every learner
    ours[0].grad = torch.arange(6.0).reshape(2, 3)
    ours[1].grad = torch.tensor([1.0, -1.0, 2.0, -2.0])
    ours[2].grad = torch.tensor([[5.0, 7.0]])
    theirs = torch.cat(
        [torch.full((6,), 10.0), torch.tensor([3.0, 3.0, 0.0, 0.0]), torch.tensor([1.0, -1.0])]
    )
    fake = OtherLearner(lambda tensor: theirs)
    monkeypatch.setattr(data_parallel.dist, "all_reduce", fake.all_reduce)
    data_parallel.DataParallelGroup(0, 2).average_gradients([ours[0], unused, ours[1], ours[2]])
    torch.testing.assert_close(ours[0].grad, (torch.arange(6.0).reshape(2, 3) + 10.0) / 2)
    torch.testing.assert_close(ours[1].grad, torch.tensor([2.0, 1.0, 1.0, -1.0]))
    torch.testing.assert_close(ours[2].grad, torch.tensor([[3.0, 3.0]]))
    assert unused.grad is None


def test_batch_moments_are_those_of_both_learners_batches_together(monkeypatch):
    from drlcli.off_policy import data_parallel

    generator = torch.Generator().manual_seed(0)
    # [E, B, F]; variances well below 1, so a wrong floor on the variance shows
    ours = 0.2 + 0.3 * torch.randn(2, 8, 4, generator=generator)
    theirs = 0.1 + 0.4 * torch.randn(2, 8, 4, generator=generator)
    shift = torch.full((2, 1, 4), 0.5)

    def their_sums(_):
        centred = theirs - shift
        return torch.cat(
            [centred.sum(1, keepdim=True), centred.square().sum(1, keepdim=True)], dim=-1
        )

    fake = OtherLearner(their_sums)
    monkeypatch.setattr(data_parallel.differentiable, "all_reduce", fake.differentiable_all_reduce)
    mean, variance, count = data_parallel.DataParallelGroup(1, 2).batch_moments(ours, shift)
    both = torch.cat([ours, theirs], dim=1)
    assert count == 16
    torch.testing.assert_close(mean, both.mean(1, keepdim=True))
    torch.testing.assert_close(variance, both.var(1, unbiased=False, keepdim=True))
    assert float(variance.max()) < 0.5


@pytest.mark.parametrize(("ours", "theirs", "agreed"), [(1, 1, True), (1, 0, False), (0, 1, False)])
def test_learners_agree_only_when_every_one_does(monkeypatch, ours, theirs, agreed):
    from drlcli.off_policy import data_parallel

    fake = OtherLearner(lambda tensor: torch.full_like(tensor, float(theirs)))
    monkeypatch.setattr(data_parallel.dist, "all_reduce", fake.all_reduce)
    group = data_parallel.DataParallelGroup(0, 2)
    assert group.all_agree(bool(ours), torch.device("cpu")) is agreed


class RecordedDistributed:
    """Stands in for the ``torch.distributed`` calls of ``DataParallelGroup.join``, recording
    them; ``fail`` is raised by the store or the group if given."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.fail = fail
        self.DistStoreError = torch.distributed.DistStoreError

    def TCPStore(self, *args, **kwargs):
        self.calls.append(("TCPStore", args, kwargs))
        if self.fail is not None:
            raise self.fail
        return "store from TCPStore"

    def init_process_group(self, *args, **kwargs):
        self.calls.append(("init_process_group", args, kwargs))

    def barrier(self):
        self.calls.append(("barrier", (), {}))


@pytest.mark.parametrize(
    ("device", "backend", "device_id"),
    [(torch.device("cpu"), "gloo", None), (torch.device("cuda", 1), "nccl", "the device")],
)
def test_a_learner_joins_through_learner_0s_store_with_the_collective_timeout(
    monkeypatch, device, backend, device_id
):
    import datetime

    from drlcli.off_policy import data_parallel

    recorded = RecordedDistributed()
    monkeypatch.setattr(data_parallel, "dist", recorded)
    group = data_parallel.DataParallelGroup.join(2, 3, "10.0.0.7", 29512, device)
    assert (group.rank, group.world_size) == (2, 3)
    assert recorded.calls == [
        (
            "TCPStore",
            ("10.0.0.7", 29512),
            {
                "is_master": False,
                "timeout": datetime.timedelta(seconds=data_parallel.JOIN_TIMEOUT_S),
            },
        ),
        (
            "init_process_group",
            (backend,),
            {
                "store": "store from TCPStore",
                "rank": 2,
                "world_size": 3,
                "timeout": datetime.timedelta(seconds=data_parallel.COLLECTIVE_TIMEOUT_S),
                "device_id": device if device_id else None,
            },
        ),
        ("barrier", (), {}),
    ]
    recorded.calls.clear()  # learner 0 passes the store it opened: no TCPStore of its own
    data_parallel.DataParallelGroup.join(0, 3, "10.0.0.7", 29512, device, store="its store")
    assert [name for name, _, _ in recorded.calls] == ["init_process_group", "barrier"]
    assert recorded.calls[0][2]["store"] == "its store"


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (RuntimeError("  connection refused\nat some C++ frame  "), "connection refused"),
        (torch.distributed.DistStoreError("timed out"), "timed out"),
        (RuntimeError("   "), ""),
    ],
)
def test_a_failed_join_names_the_errors_first_line_and_what_to_check(monkeypatch, error, shown):
    from drlcli.errors import TrainingError
    from drlcli.off_policy import data_parallel

    monkeypatch.setattr(data_parallel, "dist", RecordedDistributed(fail=error))
    with pytest.raises(TrainingError) as raised:
        data_parallel.DataParallelGroup.join(1, 2, "127.0.0.1", 29500, torch.device("cpu"))
    assert str(raised.value) == (
        f"learner 1 could not join the 2 data-parallel learners at 127.0.0.1:29500 (gloo: "
        f"{shown}); the nodes must reach each other on any TCP port, and where a node's host "
        "name resolves to a loopback address set GLOO_SOCKET_IFNAME (CPU) or "
        "NCCL_SOCKET_IFNAME (GPU) to its network interface"
    )

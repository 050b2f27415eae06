from __future__ import annotations

import pytest

from drlcli.errors import TopologyError
from drlcli.topology import resolve_training_topology


def test_legacy_single_machine_config_starts_one_rollout_actor():
    topology = resolve_training_topology(1, 1, None, available_gpus=1)
    assert (topology.num_learners, topology.num_actors, topology.learner_device) == (1, 1, "cuda")


def test_legacy_meaning_keeps_all_actors_on_the_single_learner():
    topology = resolve_training_topology(4, 1, None, available_gpus=0)
    assert (topology.num_learners, topology.actors_per_learner) == (1, 4)
    assert topology.learner_device == "cpu"


def test_multi_gpu_uses_actors_per_gpu():
    topology = resolve_training_topology(8, 4, 2, available_gpus=4)
    assert (topology.num_learners, topology.actors_per_learner, topology.num_actors) == (4, 2, 8)
    assert [topology.learner_of_actor(i) for i in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [topology.actors_of_learner(k) for k in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_multi_gpu_counts_must_multiply_out():
    with pytest.raises(TopologyError, match="num_actors: must equal num_gpus \\* actors_per_gpu"):
        resolve_training_topology(7, 4, 2, available_gpus=4)


def test_multi_gpu_without_actors_per_gpu_is_refused():
    with pytest.raises(TopologyError, match="actors_per_gpu: must be set when num_gpus > 1"):
        resolve_training_topology(8, 4, None, available_gpus=4)


def test_fewer_gpus_than_requested_reduces_learners_not_actors_per_learner():
    topology = resolve_training_topology(8, 4, 2, available_gpus=2)
    assert (topology.num_learners, topology.actors_per_learner) == (2, 2)
    assert topology.num_actors == 4 and topology.requested_learners == 4


def test_no_gpu_gives_one_cpu_learner():
    topology = resolve_training_topology(8, 4, 2, available_gpus=0)
    assert (topology.num_learners, topology.actors_per_learner, topology.learner_device) == (
        1,
        2,
        "cpu",
    )


def test_no_cuda_but_mps_gives_one_mps_learner():
    topology = resolve_training_topology(2, 2, 1, available_gpus=0, mps_available=True)
    assert (topology.num_learners, topology.learner_device) == (1, "mps")


def test_more_gpus_than_requested_uses_only_requested():
    assert resolve_training_topology(2, 2, 1, available_gpus=8).num_learners == 2


def test_learners_on_cpu_override_keeps_all_requested_learners():
    topology = resolve_training_topology(4, 2, 2, available_gpus=0, learners_on_cpu=True)
    assert (topology.num_learners, topology.num_actors, topology.learner_device) == (2, 4, "cpu")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1, None, 0), "num_actors: must be a positive integer, got 0"),
        ((1, 0, None, 0), "num_gpus: must be a positive integer, got 0"),
        ((1, -2, None, 0), "num_gpus: must be a positive integer, got -2"),
        ((1, 1, 0, 0), "actors_per_gpu: must be a positive integer or null, got 0"),
        ((1, 1, None, -1), "available_gpus must be a non-negative integer"),
        ((True, 1, None, 0), "num_actors: must be a positive integer"),
    ],
)
def test_non_positive_counts_are_refused(args, message):
    with pytest.raises(TopologyError, match=message):
        resolve_training_topology(*args)

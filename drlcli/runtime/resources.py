"""The Ray resources of a run's processes: one GPU per CUDA learner, one CPU (or an equal share
that fits the cluster's nodes) per rollout actor, CPU learner and the evaluator, and the
learners' torch threads."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from drlcli.topology import TrainingTopology


@dataclass(frozen=True)
class ProcessResources:
    """Ray resource requests of a run's processes (``.options(**...)``)."""

    learner: dict[str, Any]
    rollout_actor: dict[str, Any]  # also the evaluator's
    cpu_share: float  # CPUs per CPU-bound process: 1, or less on a cluster with too few
    cpu_processes: int  # rollout actors, CPU learners and the evaluator (if it has its own)
    cluster_cpus: float  # the cluster's CPUs, or the placement group's the run is inside
    learner_torch_threads: int  # torch threads of each (off-policy) learner process


def cpu_share(node_cpus: list[float], processes: int) -> float:
    """The largest CPU request, at most 1, with which ``processes`` equal processes fit on nodes
    of ``node_cpus`` CPUs each: a node holds ``floor(cpus / share)`` of them, and a process
    never spans two nodes (a share of the cluster's total can leave one pending forever).
    Counted as Ray counts, in units of 1e-4 CPU."""
    node_units = [round(cpus * 1e4) for cpus in node_cpus]

    def fits(units: int) -> bool:
        return sum(node // units for node in node_units) >= processes

    # The best share fills some node exactly: ``node // k`` units for k processes on it.
    candidates = {min(node // k, 10_000) for node in node_units for k in range(1, processes + 1)}
    for units in sorted(candidates - {0}, reverse=True):
        if fits(units):
            return units / 1e4
    return 1e-4


def process_resources(
    topology: TrainingTopology,
    evaluator_process: bool = True,
    learner_threads: int | None = None,
    concurrent_runs: int = 1,
) -> ProcessResources:
    """One GPU per CUDA learner; one CPU per rollout actor, per CPU learner and for the
    evaluator (its request is ``rollout_actor``'s; ``evaluator_process``: whether it has a
    process of its own), or an equal share that fits them all on the cluster's nodes when they
    have fewer CPUs than that (whole-CPU requests would leave the surplus pending forever);
    rollout actors and the evaluator spread over the nodes. Call inside a Ray session.

    Inside a placement group (a ``drl tune`` trial: Ray Tune reserves each trial's resources as
    one), every process is placed in that group and the shares fit its bundles instead of the
    nodes: a run never takes CPUs another trial reserved. ``concurrent_runs`` equal runs (a
    trial's seeds) share the group: the shares fit all of their processes, and the learners'
    threads are this run's part of the trial's CPUs.

    ``learner_threads`` (config ``learner_threads``) sets each learner's torch threads; None
    gives the learners the cores this machine (a trial: its CPUs) has beside the run's other
    CPU processes, at least one each: a learner with every core beside busy rollout actors
    waits on them (scripts/bench/learner_threads.py)."""
    import ray
    from ray.util import get_current_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cuda = topology.learner_device == "cuda"
    cpu_processes = (
        topology.num_actors + (0 if cuda else topology.num_learners) + int(evaluator_process)
    )
    group = get_current_placement_group()
    if group is not None:
        node_cpus = [float(bundle.get("CPU", 0.0)) for bundle in group.bundle_specs]
        placed: dict[str, Any] = {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                group, placement_group_capture_child_tasks=True
            )
        }
        spread = placed
        machine_cpus = sum(node_cpus)
    else:
        node_cpus = [
            float(node["Resources"].get("CPU", 0.0)) for node in ray.nodes() if node.get("Alive")
        ]
        placed, spread = {}, {"scheduling_strategy": "SPREAD"}
        machine_cpus = float(os.cpu_count() or 1)
    share = cpu_share(node_cpus, cpu_processes * concurrent_runs)
    machine_cpus /= concurrent_runs
    learner = {"num_gpus": 1.0} if cuda else {"num_cpus": share}
    return ProcessResources(
        learner={**learner, **placed},
        # Spread over the cluster's nodes: every machine steps environments.
        rollout_actor={"num_cpus": share, **spread},
        cpu_share=share,
        cpu_processes=cpu_processes,
        cluster_cpus=sum(node_cpus),
        learner_torch_threads=learner_threads
        or max(
            1,
            (int(machine_cpus) - (cpu_processes - (0 if cuda else topology.num_learners)))
            // topology.num_learners,
        ),
    )

"""resolve_training_topology: how many learners, on which device, with how many rollout actors.

The rules are those of Method.md ("Topology"). Available hardware is an argument, so every branch
is testable without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drlcli.errors import TopologyError


@dataclass(frozen=True)
class TrainingTopology:
    """The resolved layout of one training run.

    Attributes:
        num_learners: learner processes: PPO averages their parameters every
            ``param_sync_interval`` rounds, FlashSAC's average their gradients every update.
        actors_per_learner: rollout actors feeding each learner (PPO's MuJoCoActor, FlashSAC's
            EnvStepper).
        learner_device: ``"cuda"``, ``"mps"`` or ``"cpu"``.
        requested_learners: ``num_gpus`` of the config, for reporting a reduction.
    """

    num_learners: int
    actors_per_learner: int
    learner_device: str
    requested_learners: int

    @property
    def num_actors(self) -> int:
        """Rollout actors in total."""
        return self.num_learners * self.actors_per_learner

    def learner_of_actor(self, actor_index: int) -> int:
        """The learner rollout actor ``actor_index`` feeds (and, in PPO, samples with the
        parameters of)."""
        return actor_index // self.actors_per_learner

    def actors_of_learner(self, learner_index: int) -> list[int]:
        """The rollout actors feeding learner ``learner_index``, in order."""
        start = learner_index * self.actors_per_learner
        return list(range(start, start + self.actors_per_learner))


def resolve_training_topology(
    num_actors: int,
    num_gpus: int,
    actors_per_gpu: int | None,
    available_gpus: int,
    *,
    mps_available: bool = False,
    learners_on_cpu: bool = False,
) -> TrainingTopology:
    """Resolve the requested counts against the hardware that is actually there.

    Args:
        num_actors: rollout actors requested in total (> 0).
        num_gpus: learners requested, one per GPU (> 0).
        actors_per_gpu: rollout actors per learner; ``None`` keeps the legacy single-learner
            meaning and is only allowed with ``num_gpus == 1``.
        available_gpus: CUDA devices visible to this run (>= 0).
        mps_available: whether an Apple MPS device can host the single learner without CUDA.
        learners_on_cpu: run all ``num_gpus`` learners on CPU (exercises the multi-learner
            topology on machines without GPUs).

    Returns:
        The topology. Fewer GPUs than requested gives fewer learners with the same rollout
        actors per learner; no GPU gives one CPU (or MPS) learner.

    Raises:
        TopologyError: a non-positive count, or counts that do not multiply out.
    """
    for name, value in (("num_actors", num_actors), ("num_gpus", num_gpus)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise TopologyError(f"{name}: must be a positive integer, got {value!r}")
    if actors_per_gpu is not None and (
        isinstance(actors_per_gpu, bool)
        or not isinstance(actors_per_gpu, int)
        or actors_per_gpu <= 0
    ):
        raise TopologyError(
            f"actors_per_gpu: must be a positive integer or null, got {actors_per_gpu!r}"
        )
    if (
        isinstance(available_gpus, bool)
        or not isinstance(available_gpus, int)
        or available_gpus < 0
    ):
        raise TopologyError(
            f"available_gpus must be a non-negative integer, got {available_gpus!r}"
        )

    if actors_per_gpu is None:
        if num_gpus != 1:
            raise TopologyError(
                f"actors_per_gpu: must be set when num_gpus > 1 (num_gpus={num_gpus}, "
                f"num_actors={num_actors}); num_actors must equal num_gpus * actors_per_gpu"
            )
        # Legacy single-machine meaning: every requested rollout actor feeds the one learner.
        actors_per_learner = num_actors
    else:
        if num_actors != num_gpus * actors_per_gpu:
            raise TopologyError(
                f"num_actors: must equal num_gpus * actors_per_gpu = {num_gpus} * {actors_per_gpu}"
                f" = {num_gpus * actors_per_gpu}, got {num_actors}"
            )
        actors_per_learner = actors_per_gpu

    if learners_on_cpu:
        return TrainingTopology(num_gpus, actors_per_learner, "cpu", num_gpus)
    if available_gpus == 0:
        return TrainingTopology(1, actors_per_learner, "mps" if mps_available else "cpu", num_gpus)
    return TrainingTopology(min(num_gpus, available_gpus), actors_per_learner, "cuda", num_gpus)


@dataclass(frozen=True)
class AvailableDevices:
    """Accelerators this process can see."""

    cuda_devices: int
    mps: bool


def detect_available_devices() -> AvailableDevices:
    """Ask torch which accelerators are visible (imports torch; keep it out of ``--help``)."""
    import torch

    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    return AvailableDevices(cuda_devices=torch.cuda.device_count(), mps=mps)


def topology_for_config(config: Any, devices: AvailableDevices) -> TrainingTopology:
    """``resolve_training_topology`` with the counts of a ``Config``."""
    # By name: four counts of the same type side by side.
    return resolve_training_topology(
        num_actors=config.num_actors,
        num_gpus=config.num_gpus,
        actors_per_gpu=config.actors_per_gpu,
        available_gpus=devices.cuda_devices,
        mps_available=devices.mps,
        learners_on_cpu=config.learners_on_cpu,
    )

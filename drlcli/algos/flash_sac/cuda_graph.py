"""Whether a FlashSAC learner replays its update cycle as a captured CUDA graph: the rules that
need the learner device and count, shared by the registry entry (checked before any process
starts) and the learner."""

from __future__ import annotations

from typing import Any

from drlcli.actors.spec import ActorSpec
from drlcli.algos.flash_sac.params import FlashSACParams
from drlcli.errors import ConfigError

FLASH_SAC_BUILDER = "drlcli.algos.flash_sac.actor:build_flash_sac_actor"


def resolve_cuda_graph(
    params: FlashSACParams, spec: ActorSpec, device: Any, learners: int = 1
) -> bool:
    """Whether the whole update cycle runs as one captured CUDA graph on ``device``: the rules
    that need the learner device and count (the rest are ``check_params``'s, at config load).

    null means auto: on for one NVIDIA CUDA learner, where an actor other than the built-in one
    (``FLASH_SAC_BUILDER``) is refused (it cannot
    be captured; an explicit request with one was refused at config load); off for several
    learners, whose all-reduces are not captured.

    Raises:
        ConfigError: auto meets a custom actor on NVIDIA CUDA, or the graph is requested
            without a CUDA device or with several learners.
    """
    import torch

    device = torch.device(device)
    # A "cuda" learner is NVIDIA's unless this torch is a ROCm build: a driver with a CPU build
    # of torch (a cluster's login node) judges its cluster's CUDA learners as they will run.
    nvidia = device.type == "cuda" and getattr(torch.version, "hip", None) is None
    if params.use_whole_cycle_cuda_graph is None:
        if nvidia and spec.builder != FLASH_SAC_BUILDER and learners == 1:
            raise ConfigError(
                "algo_params.use_whole_cycle_cuda_graph is on (by default on NVIDIA CUDA) but "
                "actor_config names a custom actor, which cannot be captured; set "
                "use_whole_cycle_cuda_graph: false"
            )
        return nvidia and learners == 1
    if params.use_whole_cycle_cuda_graph and device.type != "cuda":
        raise ConfigError(
            "algo_params.use_whole_cycle_cuda_graph: true needs a CUDA learner device; "
            f"this learner runs on {device.type} (use null for automatic)"
        )
    if params.use_whole_cycle_cuda_graph and learners > 1:
        raise ConfigError(
            f"algo_params.use_whole_cycle_cuda_graph: true works with one learner; this run "
            f"has {learners} data-parallel learners, whose gradient all-reduce is not captured "
            "(use null for automatic)"
        )
    return params.use_whole_cycle_cuda_graph

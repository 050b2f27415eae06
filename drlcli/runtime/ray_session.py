"""Ray plumbing: a quiet session (local or cluster), learner resources, and ray.get with
one-line errors."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from drlcli.errors import DrlError, TrainingError
from drlcli.topology import TrainingTopology


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int) -> Iterator[None]:
    """Start a quiet local Ray (no dashboard, no usage stats) or join ``address``.

    A Ray already initialised by the caller (tests share one session) is used as it is and left
    running; a Ray started here is shut down on exit, on error and on Ctrl-C.

    Args:
        address: ``host:port`` or ``auto`` of a running cluster; None starts a local one.
        num_cpus: logical CPUs of a local Ray: enough for every rollout actor and learner.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    options = {
        "include_dashboard": False,
        "logging_level": logging.ERROR,
        "log_to_driver": False,
        "configure_logging": True,
    }
    if address:
        ray.init(address=address, **options)
    else:
        ray.init(num_cpus=num_cpus, **options)
    try:
        yield
    finally:
        ray.shutdown()


@dataclass(frozen=True)
class ProcessResources:
    """Ray resource requests of a run's processes (``.options(**...)``)."""

    learner: dict[str, float]
    rollout_actor: dict[str, float]
    cpu_share: float  # CPUs per CPU-bound process: 1, or less on a cluster with too few
    cpu_processes: int  # rollout actors, CPU learners and the evaluator
    cluster_cpus: float


def process_resources(topology: TrainingTopology) -> ProcessResources:
    """One GPU per CUDA learner; one CPU per rollout actor, per CPU learner and for the
    evaluator (its request is ``rollout_actor``'s), or an equal share of the cluster's CPUs when
    it has fewer than that (whole-CPU requests would leave the surplus pending forever). Call
    inside a Ray session."""
    import ray

    cuda = topology.learner_device == "cuda"
    # Rollout actors, CPU learners and the evaluator.
    cpu_processes = topology.num_actors + (0 if cuda else topology.num_learners) + 1
    available = float(ray.cluster_resources().get("CPU", 0.0))
    share = 1.0
    if available < cpu_processes:
        share = math.floor(available / cpu_processes * 1e4) / 1e4  # Ray's resource precision
    learner = {"num_gpus": 1.0} if cuda else {"num_cpus": share}
    return ProcessResources(
        learner=learner,
        rollout_actor={"num_cpus": share},
        cpu_share=share,
        cpu_processes=cpu_processes,
        cluster_cpus=available,
    )


def get_or_raise(refs: Any) -> Any:
    """``ray.get`` that turns a worker's failure into a one-line DrlError."""
    import ray

    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as error:
        cause = error.cause
        if isinstance(cause, DrlError):
            raise cause from None
        if isinstance(cause, ValueError) and "NaN or infinite" in str(cause):
            raise TrainingError(
                "the environment returned NaN or infinite observations; check the task"
            ) from None
        first_line = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        raise TrainingError(
            f"a training worker failed: {type(cause).__name__}: {first_line}"
        ) from None
    except ray.exceptions.RayActorError as error:
        raise TrainingError(f"a training worker died: {error}") from None

"""Ray plumbing: a quiet session (local or cluster), learner resources, and ray.get with
one-line errors."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from drlcli.errors import (
    ConfigError,
    DrlError,
    TrainingError,
    UsageError,
    error_line,
    first_line,
)
from drlcli.runtime.ray_head import LocalRayHead
from drlcli.runtime.restarts import death_reason
from drlcli.runtime.stop import HANG_TIMEOUT_FLOOR_S
from drlcli.topology import TrainingTopology


@contextlib.contextmanager
def ray_session(
    address: str | None,
    num_cpus: int,
    runtime_env: dict[str, Any] | None = None,
    start_timeout_s: float = HANG_TIMEOUT_FLOOR_S,
) -> Iterator[None]:
    """Start a quiet local Ray (no dashboard, no usage stats) or join ``address``.

    A local Ray runs in a process of its own session (``LocalRayHead``: a terminal's Ctrl-C or
    a SIGTERM to the driver's process group reaches the driver, not Ray). A Ray already
    initialised by the caller (tests share one session) is used as it is and left running; a
    Ray started here is shut down on exit, on error and on Ctrl-C.

    Args:
        address: ``host:port`` or ``auto`` of a running cluster; None starts a local one.
        num_cpus: logical CPUs of a local Ray: enough for every rollout actor and learner.
        runtime_env: Ray's runtime environment of the job (code and files for every node).
        start_timeout_s: how long a local Ray may take to start.

    Raises:
        ConfigError: a runtime environment, with a Ray that the caller started.
        UsageError: no Ray cluster answers at ``address``.
    """
    import ray

    if ray.is_initialized():
        if runtime_env:
            raise ConfigError(
                "runtime_env: this process's Ray was started before drl's training; give the "
                "runtime environment to that ray.init(runtime_env=...) instead"
            )
        yield
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    options: dict[str, Any] = {
        "logging_level": logging.ERROR,
        "log_to_driver": False,
        "configure_logging": True,
    }
    if runtime_env:
        options["runtime_env"] = runtime_env
    with contextlib.ExitStack() as stack:
        if address:
            target = address
            options["include_dashboard"] = False
        else:
            head = LocalRayHead(num_cpus)
            stack.callback(head.close)
            target = head.address(start_timeout_s)
        with _own_sigterm_handler():
            _init(target, options, joining=bool(address))
        stack.callback(ray.shutdown)
        yield


@contextlib.contextmanager
def _own_sigterm_handler() -> Iterator[None]:
    """Keep this process's SIGTERM handler: ``ray.init`` replaces it with one that exits at
    once (a run's handler finishes the round in progress first)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _init(address: str, options: dict[str, Any], joining: bool) -> None:
    """``ray.init``; where no cluster answers at a joined ``address``, one line on why."""
    import ray

    try:
        if joining:
            _check_reachable(address)
        ray.init(address=address, **options)
    except OSError as error:  # ConnectionError, TimeoutError, an unknown host
        if not joining:
            raise TrainingError(f"the local Ray did not answer ({error_line(error)})") from None
        raise UsageError(
            f"no Ray cluster answers at {address!r} ({error_line(error)}); start one "
            "(ray start --head) or give its address with --address; without --address and "
            "RAY_ADDRESS, drl starts a Ray of its own on this machine"
        ) from None


def _check_reachable(address: str) -> None:
    """A ``host:port`` address must accept a connection: Ray itself retries a dead address for
    minutes before it gives up. (``auto`` and ``ray://`` addresses are Ray's to resolve.)

    Raises:
        ConnectionError: nothing listens there.
    """
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    with socket.create_connection((host, int(port)), timeout=10):
        pass


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


class ProcessOwner:
    """The Ray actors one owner (a round loop, the evaluator) started, so that ``close`` stops
    every one started so far, also when the owner's constructor fails part-way."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def started(self, handle: Any) -> Any:
        """Own ``handle`` (a Ray actor handle just created); returns it."""
        self.handles.append(handle)
        return handle

    @contextlib.contextmanager
    def closed_on_failure(self) -> Iterator[ProcessOwner]:
        """Kill the actors started so far where the block fails or is interrupted."""
        try:
            yield self
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kill every owned actor, the last started first (one already gone is skipped). A
        Ctrl-C meanwhile (``KeyboardInterrupt``) is raised once every handle is killed: on a
        cluster, an actor left alive would hold its CPUs until the driver's session ends."""
        import ray

        interrupted: BaseException | None = None
        while self.handles:
            handle = self.handles.pop()
            try:
                ray.kill(handle)
            except KeyboardInterrupt as interrupt:
                interrupted = interrupted or interrupt
                with contextlib.suppress(Exception):
                    ray.kill(handle)
            except Exception:  # its process or the session is gone already
                pass
        if interrupted is not None:
            raise interrupted


class WorkerDied(TrainingError):
    """A Ray actor's process died during a call (or could not start).

    Attributes:
        actor_id: Ray's hex id of the actor, to tell which process it was.
        reason: one line from Ray (the process id and what happened).
        init_failed: its constructor raised: a restart would fail the same way.
    """

    def __init__(self, message: str, actor_id: str | None, reason: str, init_failed: bool):
        super().__init__(message)
        self.actor_id, self.reason, self.init_failed = actor_id, reason, init_failed


def actor_id_of(handle: Any) -> str:
    """Ray's hex id of an actor handle (what ``WorkerDied.actor_id`` names)."""
    return handle._actor_id.hex()


def get_or_raise(refs: Any, roles: Mapping[str, str] | None = None) -> Any:
    """``ray.get`` that turns a worker's failure into a one-line DrlError.

    Args:
        roles: actor id (``actor_id_of``) -> what the process is (``"learner 0"``), so that a
            death names the process.

    Raises:
        WorkerDied: a Ray actor died (a TrainingError); its message names the process.
        TrainingError: a worker raised; DrlErrors raised in a worker come through unchanged.
    """
    import ray

    try:
        if isinstance(refs, list) and len(refs) > 1:
            # The first failure raises at once: data-parallel learners would otherwise hold the
            # get while they wait in a collective for the one that failed.
            pending = refs
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                ray.get(done)
        return ray.get(refs)
    except ray.exceptions.RayError as error:
        raise worker_error(error, roles) from None


def worker_error(error: Exception, roles: Mapping[str, str] | None = None) -> DrlError:
    """The one-line DrlError of a failed Ray call (``get_or_raise``'s)."""
    import ray

    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.cause
        if isinstance(cause, DrlError):
            return cause
        if isinstance(cause, ray.exceptions.RayError):  # a worker's own Ray call failed
            return worker_error(cause, roles)
        return TrainingError(f"a training worker failed: {error_line(cause)}")
    if not isinstance(error, ray.exceptions.RayActorError):
        detail = first_line(str(error), type(error).__name__)
        return TrainingError(f"{ray_failure(error)}: {detail}")
    role = (roles or {}).get(error.actor_id or "", "a training process")
    init_failed = bool(getattr(error, "_actor_init_failed", False))
    if init_failed:
        lines = [line.strip() for line in str(error.error_msg).splitlines() if line.strip()]
        reason = lines[-1] if lines else "its constructor raised"
        return WorkerDied(f"{role} could not start: {reason}", error.actor_id, reason, True)
    reason = death_reason(error)
    return WorkerDied(f"{role} died ({reason})", error.actor_id, reason, False)


def ray_failure(error: Exception) -> str:
    """What a Ray failure other than a worker's own error or death means, in drl's words."""
    import ray

    exceptions = ray.exceptions
    meanings = [
        ((exceptions.OwnerDiedError,), "a result was lost: the process that made it died"),
        (
            (exceptions.ObjectFetchTimedOutError,),
            "a result could not be fetched from the node that holds it in time",
        ),
        (
            (exceptions.ObjectLostError,),
            "a result was lost from Ray's object store (its node died or it was freed)",
        ),
        (
            (exceptions.NodeDiedError, exceptions.LocalRayletDiedError),
            "a Ray node left the cluster",
        ),
        ((exceptions.WorkerCrashedError,), "a Ray worker process crashed"),
        (
            (exceptions.OutOfMemoryError,),
            "Ray killed a process to free memory (lower num_envs or num_actors)",
        ),
        (
            (exceptions.ObjectStoreFullError, exceptions.OutOfDiskError),
            "Ray's object store or its disk is full",
        ),
    ]
    for kinds, meaning in meanings:  # in this order: OwnerDiedError is an ObjectLostError
        if isinstance(error, kinds):
            return meaning
    return f"Ray failed ({type(error).__name__})"


def get_when_restarted(
    call: Callable[[], Any], roles: Mapping[str, str] | None = None, timeout_s: float = 300.0
) -> Any:
    """``get_or_raise(call())`` once a restarting actor answers: Ray refuses calls while it
    restarts the process (``ActorUnavailableError``); they are made again until ``timeout_s``."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(call())
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise TrainingError(
                    f"a restarted process did not come back within {timeout_s:g} s"
                ) from None
            time.sleep(0.1)
        except ray.exceptions.RayError as error:
            raise worker_error(error, roles) from None

"""Ray's failures in drl's words: ``get_or_raise`` turns a worker's exception, a dead actor or a
lost result into a one-line ``DrlError`` naming the process (``WorkerDied`` for a death)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drlcli.errors import DrlError, TrainingError, error_line, first_line


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


def death_reason(error: Exception) -> str:
    """One line on why a Ray actor call failed: the process id and Ray's first line."""
    message = str(getattr(error, "error_msg", "") or error)
    pid = next(
        (line.split(":", 1)[1].strip() for line in message.splitlines() if "pid:" in line), None
    )
    first = first_line(message, type(error).__name__)
    return f"pid {pid}: {first}" if pid else first

"""Rollout actors that die are restarted by Ray; this module counts the restarts and stops the
run past the configured limit.

Ray restarts a rollout actor's process (``max_restarts``) by running its constructor again with
the same arguments, and never retries the call that was in flight (``max_task_retries: 0``): the
caller redoes that call on the fresh process, after restoring what the process must carry over
(PPO's reward-scaler moments). A process killed between two calls is also restarted silently;
the caller notices it by the process id each call reports, and treats it as a death: the call
that ran on the fresh process is redone after the same restoration, or its data is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from drlcli.errors import TrainingError
from drlcli.runtime.ray_errors import worker_error


def restartable_actor_options(max_restarts: int) -> dict[str, Any]:
    """Ray ``.options`` of a rollout actor: restarted up to ``max_restarts`` times, calls in
    flight not retried (the caller redoes them after restoring state)."""
    return {"max_restarts": max_restarts, "max_task_retries": 0}


class RestartCounter:
    """The restarts of the restartable processes (rollout actors, the evaluator) one process
    (driver or learner) calls.

    Args:
        limit: restarts allowed per process (config ``max_rollout_actor_restarts``).
        actor_ids: the rollout actors' indices in the run, named in messages as ``rollout
            actor K``; or ``names``: what each process is (``["the evaluator"]``).
    """

    def __init__(
        self, limit: int, actor_ids: Sequence[int] = (), names: list[str] | None = None
    ) -> None:
        self.limit = limit
        self.names = names or [f"rollout actor {index}" for index in actor_ids]
        self.restarts = [0] * len(self.names)
        self.pids: list[int | None] = [None] * len(self.names)
        self.new_restarts = 0  # since take_new_restarts()

    def died(self, position: int, reason: str) -> None:
        """The process at ``position`` died in a call (Ray restarts it if the limit allows);
        raises TrainingError past the limit."""
        self.restarts[position] += 1
        self.new_restarts += 1
        self.pids[position] = None  # the next call reports the fresh process
        if self.restarts[position] > self.limit:
            raise TrainingError(
                f"{self.names[position]} died {self.restarts[position]} times, "
                f"more than max_rollout_actor_restarts: {self.limit} ({reason})"
            )

    def restarted_unseen(self, position: int, pid: int) -> bool:
        """Record the process id a call reported; True (and counted as a death) when it differs
        from the previous call's: the process died and was restarted between two calls."""
        previous, self.pids[position] = self.pids[position], pid
        if previous is None or previous == pid:
            return False
        self.died(position, "its process was replaced between two calls")
        self.pids[position] = pid
        return True

    def replaced(self, position: int, pid: int) -> bool:
        """Record the process id a call reported; True where it is not the process of the
        previous call: one whose death a call counted since (``died``), or one replaced between
        two calls (counted now, as ``restarted_unseen`` does)."""
        if self.pids[position] is None:
            self.pids[position] = pid
            return True
        return self.restarted_unseen(position, pid)

    def take_new_restarts(self) -> int:
        """Restarts since the previous call (a round's count for the metrics row)."""
        count, self.new_restarts = self.new_restarts, 0
        return count


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

"""The Ray actors one owner (a round loop, the evaluator) started, stopped together."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from drlcli.runtime.restarts import restartable_actor_options


class ProcessOwner:
    """The Ray actors one owner (a round loop, the evaluator) started, so that ``close`` stops
    every one started so far, also when the owner's constructor fails part-way."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def started(self, handle: Any) -> Any:
        """Own ``handle`` (a Ray actor handle just created); returns it."""
        self.handles.append(handle)
        return handle

    def started_rollout_actors(
        self,
        actor_class: type,
        contexts: Sequence[Any],
        resources: dict[str, Any],
        max_restarts: int,
    ) -> list[Any]:
        """One Ray actor of ``actor_class`` per context, in order, each with ``resources`` and
        restarted by Ray up to ``max_restarts`` times (``restartable_actor_options``); owned."""
        import ray

        options = {**resources, **restartable_actor_options(max_restarts)}
        remote_class = ray.remote(actor_class).options(**options)
        return [self.started(remote_class.remote(context)) for context in contexts]

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

"""A sink's calls on a thread of its own, so that a slow store never slows the rounds."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

# How long the end of a run waits for a sink's calls: W&B's init (up to 90 s against a server
# that does not answer), the rows still queued, MLflow's checkpoint upload.
CLOSE_TIMEOUT_S = 300.0


class BackgroundCalls:
    """Runs submitted calls in order on one daemon thread. The first call that fails ends the
    thread and the calls after it; its error is raised by the next ``submit`` or by ``close``
    (where the sinks' owner warns once and leaves the sink out).

    Args:
        name: the thread's name.
    """

    def __init__(self, name: str) -> None:
        self.calls: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._call_in_order, name=name, daemon=True)
        self.thread.start()

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        self._raise_error()
        self.calls.put((call, args))

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Wait for the calls submitted (at most ``timeout_s``).

        Raises:
            the first call's error; TimeoutError when the calls outlast ``timeout_s``.
        """
        self.calls.put(None)
        self.thread.join(timeout_s)
        self._raise_error()
        if self.thread.is_alive():
            raise TimeoutError(f"calls still running after {timeout_s:g} s; left behind")

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def _call_in_order(self) -> None:
        while (item := self.calls.get()) is not None:
            call, args = item
            try:
                call(*args)
            except BaseException as error:  # raised in the training thread, not here
                self.error = error
                return  # the thread ends: a sink left out keeps no thread behind

"""Stop requests of a run, checked by the run loop between rounds: Ctrl-C and SIGTERM
(``StopRequest``: the run stops with ``TrainingStopped``), and the caller's stop rules
(``StopRule``: a search's pruner, a target reached; the run ends early as a finished run)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from drlcli.errors import TrainingStopped


class StopRequest:
    """Ctrl-C or SIGTERM (what a terminal's process group, ``timeout(1)``, Slurm and Kubernetes
    send before killing) at any moment of a run. Outside the main thread it does nothing.

    While rounds train (``deferred``), the first signal finishes the round in progress (its
    metrics row and checkpoint are written), then training stops with ``TrainingStopped``; a
    second signal aborts at once. Elsewhere (starting Ray and the processes, warm-up, the final
    evaluation) the first signal stops at once: it raises ``KeyboardInterrupt`` in the main
    thread, which Ray's blocking calls also raise, and the run closes what it started.

    The handler only records the signal (and raises, where it stops at once). Python runs a
    handler between any two bytecodes of the main thread, in the middle of an import included,
    so printing from it can re-enter a half-imported module (rich imports its emoji table
    lazily) and fail; a short-lived thread prints the notice instead, waiting on the import
    lock like any other thread.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, console: Console) -> None:
        self.console = console
        self.signal: signal.Signals | None = None
        self.rounds_training = False  # inside ``deferred``: the round in progress finishes
        self._previous: dict[int, Any] = {}
        self._notice: threading.Thread | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def stopped(self, checkpoint: Path | None, rounds: int, during: str = "") -> TrainingStopped:
        """The error that ends the run; ``during``: what it was doing, where that was not
        training rounds (``"while starting"``, ``"during the final evaluation"``)."""
        assert self.signal is not None
        return TrainingStopped(self.signal.name, int(self.signal), checkpoint, rounds, during)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[StopRequest]:
        """While rounds train: a first signal lets the round in progress finish."""
        self.rounds_training = True
        try:
            yield self
        finally:
            self.rounds_training = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum)
        if not self.rounds_training:
            raise KeyboardInterrupt
        self._notice = threading.Thread(
            target=self.console.print,
            args=(f"{self.signal.name}: stopping after this round (send it again to abort now)",),
            kwargs={"style": "yellow"},
            name="drl-stop-notice",
            daemon=True,
        )
        self._notice.start()

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        if self._notice is not None:  # the notice comes before whatever the caller prints next
            self._notice.join(timeout=5)


class StopRule(Protocol):
    """A reason to end a run early, judged on each round's metrics row once the row and the
    round's checkpoint are written."""

    def after_round(self, row: Mapping[str, Any]) -> str | None:
        """Why the run should end after this round (one line), or None to go on."""
        ...


def first_stop_reason(rules: Sequence[StopRule], row: Mapping[str, Any]) -> str | None:
    """The first of ``rules`` (in order) that ends the run after ``row``'s round, by its reason;
    every rule sees every row until then."""
    for rule in rules:
        if (reason := rule.after_round(row)) is not None:
            return reason
    return None

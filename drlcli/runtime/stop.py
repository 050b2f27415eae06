"""Stop requests of a run, checked by the run loop between rounds: Ctrl-C and SIGTERM
(``StopRequest``: the run stops with ``TrainingStopped``), and the caller's stop rules
(``StopRule``: a search's pruner, a target reached; the run ends early as a finished run)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from drlcli.errors import TrainingStopped


class StopRequest:
    """Ctrl-C or SIGTERM (what Slurm and Kubernetes send before killing) during training: the
    first finishes the round in progress (its metrics row and checkpoint are written), then
    training stops with ``TrainingStopped``; a second signal aborts at once. Outside the main
    thread it does nothing.

    The handler only records the signal. Python runs a handler between any two bytecodes of
    the main thread, in the middle of an import included, so printing from it can re-enter a
    half-imported module (rich imports its emoji table lazily) and fail; a short-lived thread
    prints the notice instead, waiting on the import lock like any other thread.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, console: Console) -> None:
        self.console = console
        self.signal: signal.Signals | None = None
        self._previous: dict[int, Any] = {}
        self._notice: threading.Thread | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def stopped(self, checkpoint: Path | None, rounds: int) -> TrainingStopped:
        assert self.signal is not None
        return TrainingStopped(self.signal.name, int(self.signal), checkpoint, rounds)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum)
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

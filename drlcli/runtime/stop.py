"""What a run is doing (``Phase``), how it stops on a signal or a hang (``StopRequest``), and
the caller's reasons to end it early (``StopRule``).

``StopRequest`` owns the run's one phase value: every message about a stop names the phase it
interrupted, and the phase decides what a signal does (a round finishes, anything else stops at
once). Each phase has a bound (``enter``): a phase that outlives it is abandoned, so that no
wait of the driver on its processes lasts forever. After the first signal, the round in
progress has ``stop_grace_s`` at most: Slurm and Kubernetes send one SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import enum
import math
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from drlcli.errors import DrlError, TrainingError, TrainingStopped

HANG_TIMEOUT_FLOOR_S = 1800.0
"""The least bound of a phase when ``hang_timeout_s`` is null: a first round, a start on a
cluster that installs a runtime environment, may take minutes; a hang takes forever."""


class Phase(enum.Enum):
    """What a run is doing, in the words its messages use."""

    STARTING = "while starting"
    WARM_UP = "during the observation warm-up"
    ROUND = "during round {round}"
    CHECKPOINT = "while round {round}'s outputs were written"
    FINAL_EVALUATION = "during the final evaluation"
    ENDING = "while ending"

    @property
    def deferred(self) -> bool:
        """A first signal lets the phase finish (the round and its outputs); elsewhere the run
        stops at once."""
        return self in (Phase.ROUND, Phase.CHECKPOINT)

    def describe(self, round_number: int) -> str:
        return self.value.format(round=round_number)


class StopRequest:
    """Ctrl-C or SIGTERM (what a terminal's process group, ``timeout(1)``, Slurm and Kubernetes
    send before killing) at any moment of a run, and the bound of each phase. Outside the main
    thread it only keeps the phase: no handler, no bound.

    In a deferred phase (``Phase.deferred``: a round and the writing of its outputs) the first
    signal finishes the round in progress (its metrics row and checkpoint are written), then
    training stops; a second signal aborts at once, and so does the end of ``grace_s`` after the
    first. Elsewhere the first signal stops at once. Stopping at once raises
    ``KeyboardInterrupt`` in the main thread, which Ray's blocking calls also raise, and the run
    closes what it started; ``error`` then says what happened.

    A phase that outlives its bound (``enter``) is abandoned the same way, by a watchdog thread
    that sends SIGINT to the main thread: a blocking system call returns, Ray's waits check for
    signals.

    The handler only records the signal (and raises, where it stops at once). Python runs a
    handler between any two bytecodes of the main thread, in the middle of an import included,
    so printing from it can re-enter a half-imported module (rich imports its emoji table
    lazily) and fail; a short-lived thread prints the notice instead, waiting on the import
    lock like any other thread.

    Args:
        console: where the notice of a first signal goes.
        grace_s: how long the round in progress may take after the first signal
            (config ``stop_grace_s``).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, console: Console, grace_s: float) -> None:
        self.console = console
        self.grace_s = grace_s
        self.phase = Phase.STARTING
        self.round = 0  # the round the phase belongs to (ROUND, CHECKPOINT)
        self.signal: signal.Signals | None = None  # the first one
        self.second: signal.Signals | None = None  # one more, before the run stopped
        # What the watchdog abandoned: (phase, round, bound in s, "grace" or "hang").
        self.expired: tuple[Phase, int, float, str] | None = None
        self._bound_s = math.inf
        self._deadline: float | None = None
        self._grace_deadline: float | None = None
        self._previous: dict[int, Any] = {}
        self._notice: threading.Thread | None = None
        self._condition = threading.Condition()
        self._watchdog: threading.Thread | None = None
        self._closing = False  # the watchdog ends
        self._disarmed = False  # ``disarm``

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def enter(self, phase: Phase, round_number: int = 0, bound_s: float = math.inf) -> None:
        """The run is now in ``phase`` (of round ``round_number``), which may last ``bound_s``
        seconds. After a first signal, the rest of a deferred phase keeps the grace period."""
        with self._condition:
            self.phase, self.round, self._bound_s = phase, round_number, bound_s
            deadline = time.monotonic() + bound_s if math.isfinite(bound_s) else None
            if self._grace_deadline is not None and phase.deferred:
                deadline = min(deadline or math.inf, self._grace_deadline)
            self._deadline = deadline
            self._condition.notify()

    def disarm(self) -> None:
        """The run is closing what it started after an error or a stop: no bound from now on
        (the closing has bounds of its own: the local Ray head's, 30 s), and a signal only
        interrupts the step of the closing it lands in; the error that ends the run stays the
        one it was."""
        with self._condition:
            self._disarmed = True
            self._deadline = self._grace_deadline = None
            self._condition.notify()

    def error(
        self, checkpoint: Path | None, checkpoint_round: int, complete: bool = False
    ) -> DrlError | None:
        """The error that ends the run, once a signal or the watchdog stopped it (None: neither
        did). ``checkpoint``: the last good checkpoint, of round ``checkpoint_round``;
        ``complete``: it already holds the run's final evaluation (nothing to continue)."""
        where = f"checkpoint {checkpoint}" if checkpoint is not None else "no checkpoint yet"
        if self.expired is not None and (self.signal is None or self.expired[3] == "hang"):
            return self._hang_error()
        if self.signal is None:
            return None
        stopping, number = self.signal, int(self.signal)
        phase = self.phase.describe(self.round)
        if self.expired is not None:  # the grace period ran out
            message = (
                f"aborted: {self._what(*self.expired[:2])} did not finish within stop_grace_s "
                f"{self.expired[2]:g} s of {stopping.name}; {where}"
            )
        elif self.phase.deferred and self.second is not None:
            number = int(self.second)
            message = f"aborted by a second {self.second.name} {phase}; {where}"
        elif self.phase.deferred:  # the round finished
            message = f"stopped by {stopping.name} after round {self.round}; {where}"
        else:
            after = f", after round {checkpoint_round}" if checkpoint_round else ""
            message = f"stopped by {stopping.name} {phase}{after}; {where}"
        if self.phase.deferred and (self.second is not None or self.expired is not None):
            message += f", of round {checkpoint_round}" if checkpoint is not None else ""
        if complete:
            message += " (the run is complete: it holds its final evaluation)"
            checkpoint = None
        return TrainingStopped(message, number, checkpoint)

    def _hang_error(self) -> DrlError:
        """The run outlived a phase's bound without a signal: a ``TrainingError`` (the run
        adds the last good checkpoint)."""
        assert self.expired is not None
        phase, round_number, bound_s, _ = self.expired
        return TrainingError(
            f"{self._what(phase, round_number)} did not finish within {bound_s:g} s "
            "(hang_timeout_s): a stuck environment, a lost node or an overloaded machine; "
            "raise hang_timeout_s if it only needs longer"
        )

    @staticmethod
    def _what(phase: Phase, round_number: int) -> str:
        if phase.deferred:
            return f"round {round_number}"
        return {
            Phase.STARTING: "the run's start",
            Phase.WARM_UP: "the observation warm-up",
            Phase.FINAL_EVALUATION: "the final evaluation",
            Phase.ENDING: "the run's end",
        }[phase]

    def _handle(self, signum: int, frame: Any) -> None:
        if self.expired is not None or self._disarmed:  # the watchdog's, or while closing
            raise KeyboardInterrupt
        if self.signal is not None:
            self.second = self.second or signal.Signals(signum)
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum)
        if not self.phase.deferred:
            raise KeyboardInterrupt
        with self._condition:
            self._grace_deadline = time.monotonic() + self.grace_s
            self._deadline = min(self._deadline or math.inf, self._grace_deadline)
            self._condition.notify()
        self._notice = threading.Thread(
            target=self.console.print,
            args=(
                f"{self.signal.name}: stopping after this round, within stop_grace_s "
                f"{self.grace_s:g} s (send it again to abort now)",
            ),
            kwargs={"style": "yellow"},
            name="drl-stop-notice",
            daemon=True,
        )
        self._notice.start()

    def _watch(self) -> None:
        """The watchdog: interrupt the main thread when the phase's deadline passes."""
        main = threading.main_thread().ident
        assert main is not None
        with self._condition:
            while not self._closing:
                if self._deadline is None:
                    self._condition.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._condition.wait(left)
                    continue
                grace = self._grace_deadline is not None and self._deadline >= self._grace_deadline
                self.expired = (
                    self.phase,
                    self.round,
                    self.grace_s if grace else self._bound_s,
                    "grace" if grace else "hang",
                )
                self._deadline = None
                signal.pthread_kill(main, signal.SIGINT)  # to the handler above

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
            self._watchdog = threading.Thread(target=self._watch, name="drl-watchdog", daemon=True)
            self._watchdog.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watchdog is not None:  # stopped before the handlers go: it signals no more
            with self._condition:
                self._closing = True
                self._condition.notify()
            self._watchdog.join()
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

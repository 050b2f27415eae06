"""Where a run's metrics rows go.

A ``MetricsSink`` takes one row per round (``write``) and is closed when the run ends. The
metrics CSV (``MetricsWriter``) is the record of truth: a failure to write it (a full disk)
stops the round, as a failed checkpoint does. Every other sink is optional: when one fails it
warns once, in one line, and the run goes on without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from drlcli.errors import error_line

RUN_OUTCOMES = ("finished", "failed", "stopped")
"""How a run ended, as ``run_ended`` tells a sink: its plan done (or a stop rule ended it),
an error, or a signal."""


class MetricsSink(Protocol):
    """What a sink implements; it may also have ``final_evaluation(result, env_steps)``, called
    once with the run's final evaluation (an ``EvaluationResult``) before ``close``, and
    ``run_ended(outcome)`` (one of ``RUN_OUTCOMES``), called just before ``close``."""

    def write(self, row: Mapping[str, Any]) -> None:
        """One round's row (the run's columns; None where there is nothing to report)."""
        ...

    def close(self) -> None: ...


def sink_name(sink: MetricsSink) -> str:
    """How a warning names a sink: its ``name`` attribute, else its class."""
    return str(getattr(sink, "name", type(sink).__name__))


class MetricsSinks:
    """The record (the CSV) and the optional sinks of a run, written in that order.

    Args:
        record: the sink whose failure stops the round (its error propagates).
        optional: sinks whose failure is reported once through ``warn`` and that are then left
            out for the rest of the run.
        warn: prints a one-line warning.
    """

    def __init__(
        self,
        record: MetricsSink,
        optional: Sequence[MetricsSink] = (),
        warn: Callable[[str], None] = print,
    ) -> None:
        self.record = record
        self.optional = list(optional)
        self.warn = warn

    def write(self, row: Mapping[str, Any]) -> None:
        self.record.write(row)
        for sink in list(self.optional):
            try:
                sink.write(row)
            except Exception as error:  # any failure of an optional sink: the CSV has the row
                self._drop(sink, "failed", error)

    def final_evaluation(self, result: Any, env_steps: int) -> None:
        """The run's final evaluation, to the optional sinks that take it."""
        for sink in list(self.optional):
            if hasattr(sink, "final_evaluation"):
                try:
                    sink.final_evaluation(result, env_steps)
                except Exception as error:
                    self._drop(sink, "failed", error)

    def close(self, outcome: str = "finished") -> None:
        """Close the optional sinks (telling those that take it how the run ended), then the
        record (whose error propagates)."""
        for sink in list(self.optional):
            try:
                if hasattr(sink, "run_ended"):
                    sink.run_ended(outcome)
                sink.close()
            except Exception as error:
                self._drop(sink, "failed to close", error)
        self.record.close()

    def _drop(self, sink: MetricsSink, what: str, error: Exception) -> None:
        self.optional.remove(sink)
        self.warn(sink_warning(sink_name(sink), what, error))


def sink_warning(name: str, what: str, error: BaseException) -> str:
    """The one line that says an optional sink is left out, and why (the error's first line)."""
    return (
        f"warning: metrics sink {name} {what} ({error_line(error)}); training goes on without "
        "it, the metrics CSV has every row"
    )

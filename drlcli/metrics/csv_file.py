"""The canonical metrics CSV of a run: ``MetricsWriter`` appends one row per round (the columns
of ``metrics/schema.py``'s ``metric_columns``), and keeps a resumed run's rows exact;
``read_metrics`` reads them back.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from drlcli.atomic import atomic_output, storage_error
from drlcli.errors import TrainingError


class MetricsWriter:
    """Appends one row per round to the CSV at ``path``.

    A fresh run truncates the file. A resumed run (``append``) keeps the existing rows up to
    ``resume_round``, the round its checkpoint stored: rows of later rounds (written before a
    crash, their checkpoint never was) and a torn last line (a kill in the middle of a write)
    are dropped, so the resumed rounds are neither duplicated nor missing. A resumed run with
    more columns (evaluation turned on, say) rewrites the earlier rows under its header, their
    new cells empty. Every rewrite is atomic. Each row is flushed, so a crash loses at most the
    round in progress.

    Attributes:
        dropped_rounds: the rounds of the rows a resume dropped (empty otherwise).
    """

    def __init__(
        self,
        path: str | Path,
        columns: Sequence[str],
        append: bool = False,
        resume_round: int | None = None,
    ):
        self.path = Path(path)
        self.columns = list(columns)
        self.dropped_rounds: list[str] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if append and self.path.exists() and self.path.stat().st_size > 0:
            header, rows, torn = _read_complete_rows(self.path)
            if header != self.columns and not set(header) < set(self.columns):
                raise TrainingError(
                    f"{self.path}: existing metrics columns differ from this run's; move the "
                    "file away or set a new metrics_path to resume"
                )
            kept = [row for row in rows if _round_at_most(row, resume_round)]
            self.dropped_rounds = [
                row.get("round", "") for row in rows if not _round_at_most(row, resume_round)
            ]
            if header != self.columns or torn or len(kept) != len(rows):
                self._rewrite(kept)
            self._file = self.path.open("a", newline="")
            self._writer = csv.writer(self._file)
        else:
            try:
                self._file = self.path.open("w", newline="")
                self._writer = csv.writer(self._file)
                self._writer.writerow(self.columns)
                self._file.flush()
            except OSError as error:
                raise storage_error(self.path, error) from None

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        with atomic_output(self.path) as temp, Path(temp).open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(self.columns)
            for row in rows:
                writer.writerow([row.get(column, "") for column in self.columns])

    def write(self, row: Mapping[str, float | int]) -> None:
        """Write one round; a name outside the columns is an error (fail closed)."""
        unknown = sorted(set(row) - set(self.columns))
        if unknown:
            raise TrainingError(
                f"metrics {unknown} are not among this run's columns: the set of metric names "
                "(aux losses included) must not change during training"
            )
        try:
            self._writer.writerow([_format(row.get(column)) for column in self.columns])
            self._file.flush()
        except OSError as error:
            raise storage_error(self.path, error) from None

    def close(self) -> None:
        self._file.close()


def _format(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value) if not value.is_integer() else str(int(value))
    return str(value)


def _read_complete_rows(path: Path) -> tuple[list[str], list[dict[str, str]], bool]:
    """(header, rows, torn): the rows of complete lines; ``torn`` when the file ends inside a
    line (a write cut short), which is left out."""
    text = path.read_text()
    torn = not text.endswith("\n")
    if torn:
        text = text[: text.rfind("\n") + 1]
    reader = csv.reader(text.splitlines())
    header = next(reader, [])
    rows = [dict(zip(header, cells, strict=False)) for cells in reader if len(cells) == len(header)]
    return header, rows, torn


def _round_at_most(row: Mapping[str, str], last_round: int | None) -> bool:
    if last_round is None:
        return True
    try:
        return int(row.get("round", "")) <= last_round
    except ValueError:  # not a row drl wrote
        return False


def read_metrics(path: str | Path) -> list[dict[str, str]]:
    """The CSV rows as dicts of strings (empty string where a value is missing)."""
    with Path(path).open(newline="") as handle:
        return list(csv.DictReader(handle))

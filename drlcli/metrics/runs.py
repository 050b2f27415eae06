"""Runs on disk: finding them under folders, and reading their metrics CSVs incrementally.

A run is a metrics CSV written by ``drl train`` (its header starts with ``round,env_steps``, or
it is named ``metrics_<name>.csv``),
with the checkpoints and videos beside it: ``model_<name>.pt``, ``model_<name>_best.pt`` and
any ``.mp4``/``.webm`` whose name starts with ``<name>`` or ``model_<name>`` (all of a folder's
videos when it holds one run). Runs of one config on other seeds form a group; so do the
trials of a ``drl tune`` search (its folder holds ``search.yaml``: the trials under
``trials/``, each named by its folder; a trial of several seeds is a seed group of its own,
one run per ``seed_<n>`` folder in it; each re-trained candidate's seeds under ``retrain/``).
Nothing outside the given folders is ever reported: a file whose real path (symbolic links
resolved) leaves them is skipped.

CSVs are read by byte offset, complete lines only, so a row being written is read once it is
whole, and a poll moves only the new rows. A file that shrank or whose header changed (a run
restarted from scratch) is reported as a reset and read from the start again.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drlcli.run_names import seed_group

REQUIRED_COLUMNS = ("round", "env_steps")
VIDEO_SUFFIXES = (".mp4", ".webm")
SEARCH_FILE = "search.yaml"  # in a drl tune search's folder
SEARCH_RESULTS = "results.csv"  # ... its trials' results, once the search ended
# Never walk into these (virtual environments, caches, VCS data).
_SKIPPED_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".pytest_cache"}
# In a search's trial folder: Ray Tune's checkpoints, which hold copies of the trial's CSVs.
_TUNE_CHECKPOINT = re.compile(r"checkpoint_\d+")


@dataclass(frozen=True)
class Run:
    """One run found on disk; paths are real paths inside one of the roots."""

    id: str
    name: str
    group: str
    root: Path
    csv_path: Path
    checkpoint: Path | None
    best_checkpoint: Path | None
    videos: tuple[Path, ...] = field(default=())
    group_kind: str = "seeds"  # or "trials": a search's, which differ by more than a seed
    note: str = ""  # a search trial's objective and state
    values: dict[str, str] = field(default_factory=dict)  # a search trial's searched values

    def describe(self) -> dict[str, Any]:
        """The run-list entry of the API (paths relative to the run's root)."""

        def relative(path: Path | None) -> str | None:
            return None if path is None else str(path.relative_to(self.root))

        return {
            "id": self.id,
            "name": self.name,
            "group": self.group,
            "root": str(self.root),
            "csv": relative(self.csv_path),
            "checkpoint": relative(self.checkpoint),
            "best_checkpoint": relative(self.best_checkpoint),
            "videos": [path.name for path in self.videos],
            "group_kind": self.group_kind,
            "note": self.note,
            "values": self.values,
        }


@dataclass(frozen=True)
class Grouping:
    """Where a run belongs: its name, its group and the group's kind, and for a search's
    trial its result."""

    name: str
    group: str
    kind: str = "seeds"
    note: str = ""
    values: dict[str, str] = field(default_factory=dict)


def grouping(
    directory: Path, name: str, results: dict[Path, dict[str, dict[str, str]]]
) -> Grouping:
    """The group of the run named ``name`` in ``directory``: a search's trial (named by its
    folder), a re-trained candidate's seed, or a seed of a config. ``results``: the searches'
    results read so far (a cache for one listing)."""
    search = directory.parent.parent
    kind = directory.parent.name
    seed_of_trial = (
        directory.name.startswith("seed_")
        and directory.parent.parent.name == "trials"
        and (directory.parents[2] / SEARCH_FILE).is_file()
    )
    if seed_of_trial:  # trials/<trial>/seed_<n>: one seed of a trial of several
        search, trial = directory.parents[2], directory.parent.name
        if search not in results:
            results[search] = _search_results(search / SEARCH_RESULTS)
        row = results[search].get(trial)
        return Grouping(
            f"{trial} {directory.name}",
            f"search {search.name}: {trial}",
            note="" if row is None else _trial_note(row),
            values={} if row is None else _trial_values(row),
        )
    if kind not in ("trials", "retrain") or not (search / SEARCH_FILE).is_file():
        return Grouping(name, seed_group(name))
    trial = directory.name
    if kind == "retrain":
        return Grouping(trial, f"search {search.name}: {seed_group(trial)} re-trained")
    if search not in results:
        results[search] = _search_results(search / SEARCH_RESULTS)
    row = results[search].get(trial)
    if row is None:  # the search is still running
        return Grouping(trial, f"search {search.name}", "trials")
    return Grouping(trial, f"search {search.name}", "trials", _trial_note(row), _trial_values(row))


def _trial_values(row: dict[str, str]) -> dict[str, str]:
    """A trial's searched values: its results row's columns between trial and objective."""
    columns = list(row)
    return {key: row[key] for key in columns[1 : columns.index("objective")]}


def _trial_note(row: dict[str, str]) -> str:
    """A trial's objective and state, from its results row."""
    objective = f"objective {float(row['objective']):.1f}" if row["objective"] else "no objective"
    return f"{objective}, {row['state']}"


def _search_results(path: Path) -> dict[str, dict[str, str]]:
    """A search's results CSV by trial (empty while the search runs, or if unreadable)."""
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, csv.Error, UnicodeDecodeError):
        return {}
    if not rows or "objective" not in rows[0] or "trial" not in rows[0]:
        return {}
    return {row["trial"]: row for row in rows}


def run_id(csv_path: Path) -> str:
    """A stable, URL-safe id of a run (its CSV's real path, hashed)."""
    return hashlib.sha1(str(csv_path).encode()).hexdigest()[:12]


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _is_metrics_csv(path: Path) -> bool:
    """A drl metrics CSV: its header starts with ``round,env_steps``; or, by drl's default
    name ``metrics_<name>.csv``, any file (an empty or broken one is shown with its error)."""
    if path.name.startswith("metrics_"):
        return True
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return False
    header = first.decode("utf-8", "replace").strip().split(",")
    return tuple(header[: len(REQUIRED_COLUMNS)]) == REQUIRED_COLUMNS


def find_runs(roots: list[Path]) -> list[Run]:
    """Every run under ``roots`` (recursively), sorted by folder and name."""
    runs: dict[str, Run] = {}
    results: dict[Path, dict[str, dict[str, str]]] = {}
    for root in roots:
        root = root.resolve()
        if not root.is_dir():
            continue
        for folder, dirs, files in os.walk(root):
            directory = Path(folder)
            in_trial = (directory.parent.parent / SEARCH_FILE).is_file()
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in _SKIPPED_DIRS and not (in_trial and _TUNE_CHECKPOINT.fullmatch(d))
            )
            csvs = [
                directory / name
                for name in sorted(files)
                if name.endswith(".csv") and _safe(directory / name, root)
            ]
            csvs = [path for path in csvs if _is_metrics_csv(path)]
            videos = [
                directory / name
                for name in sorted(files)
                if name.endswith(VIDEO_SUFFIXES) and _safe(directory / name, root)
            ]
            for path in csvs:
                real = path.resolve()
                name = path.stem.removeprefix("metrics_")
                mine = tuple(
                    video.resolve()
                    for video in videos
                    if len(csvs) == 1 or video.name.startswith((name, f"model_{name}"))
                )
                identifier = run_id(real)
                where = grouping(directory, name, results)
                runs.setdefault(
                    identifier,
                    Run(
                        id=identifier,
                        name=where.name,
                        group=where.group,
                        root=root,
                        csv_path=real,
                        checkpoint=_beside(directory, f"model_{name}.pt", root),
                        best_checkpoint=_beside(directory, f"model_{name}_best.pt", root),
                        videos=mine,
                        group_kind=where.kind,
                        note=where.note,
                        values=where.values,
                    ),
                )
    return sorted(runs.values(), key=lambda run: (str(run.csv_path.parent), run.name))


def _safe(path: Path, root: Path) -> bool:
    """A regular file whose real path stays inside ``root``."""
    try:
        real = path.resolve()
    except OSError:
        return False
    return real.is_file() and _inside(real, root)


def _beside(directory: Path, name: str, root: Path) -> Path | None:
    path = directory / name
    return path.resolve() if _safe(path, root) else None


@dataclass(frozen=True)
class Chunk:
    """Rows read from a CSV since an offset.

    Attributes:
        columns: the header.
        rows: values per row, column order; floats, None for an empty cell.
        offset: the byte offset to read from next time.
        generation: identifies the file's contents (its header and first row); a different one
            than the caller's means the file was restarted and ``rows`` are all of it.
        reset: the caller must drop what it has (restarted run, or its first read).
    """

    columns: list[str]
    rows: list[list[float | None]]
    offset: int
    generation: str
    reset: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "rows": self.rows,
            "offset": self.offset,
            "generation": self.generation,
            "reset": self.reset,
        }


class MalformedCsv(ValueError):
    """A CSV that is not a readable drl metrics file; the message says where."""


def read_rows(path: Path, offset: int = 0, generation: str | None = None) -> Chunk:
    """The complete rows of a metrics CSV after byte ``offset``.

    Args:
        offset, generation: what the caller's last ``Chunk`` returned (0 and None at first).

    Raises:
        MalformedCsv: empty file, a header without ``round,env_steps``, a row with another
            number of cells than the header, or a cell that is not a number.
        OSError: the file cannot be read.
    """
    with path.open("rb") as handle:
        header_line = handle.readline()
        if not header_line.endswith(b"\n"):
            raise MalformedCsv("no complete header line yet" if header_line else "empty file")
        columns = next(csv.reader([header_line.decode("utf-8", "replace")]))
        if tuple(columns[: len(REQUIRED_COLUMNS)]) != REQUIRED_COLUMNS:
            raise MalformedCsv(f"header does not start with {','.join(REQUIRED_COLUMNS)}")
        first_row = handle.readline()
        if not first_row.endswith(b"\n"):
            first_row = b""
        size = os.fstat(handle.fileno()).st_size
        # The header and the first row: a run restarted from scratch writes another first row
        # (its wall time at least), even when the file has grown past the caller's offset again.
        current = hashlib.sha1(header_line + first_row).hexdigest()[:12]
        reset = generation != current or offset < len(header_line) or offset > size
        start = len(header_line) if reset else offset
        handle.seek(start)
        data = handle.read(max(0, size - start))
    complete = data[: data.rfind(b"\n") + 1]  # a torn last line waits for its newline
    rows = []
    for number, line in enumerate(complete.decode("utf-8", "replace").splitlines(), start=1):
        if not line.strip():
            continue
        cells = next(csv.reader(io.StringIO(line)))
        if len(cells) != len(columns):
            raise MalformedCsv(
                f"a row has {len(cells)} cells, the header {len(columns)} (line {number} after "
                f"byte {start})"
            )
        rows.append([_number(cell, column) for cell, column in zip(cells, columns, strict=True)])
    return Chunk(columns, rows, start + len(complete), current, reset)


def _number(cell: str, column: str) -> float | None:
    if cell == "":
        return None
    try:
        value = float(cell)
    except ValueError:
        raise MalformedCsv(f"column {column!r} holds {cell[:40]!r}, not a number") from None
    return value if math.isfinite(value) else None

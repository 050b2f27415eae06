"""A learning study's finished runs, recorded in the repository: each run's metrics CSV, its
final-evaluation record (``final_evaluation_<name>.json``, which ``drl compare`` reads where the
checkpoint is not kept) and a line of ``runs.jsonl`` (variant, seed, final deterministic
evaluation, wall-clock, commit, date) under ``docs/results/data/<study>/<task>/``. A study that
stops resumes where it was (a recorded run is skipped), plans its runs to a deadline, and ``drl
compare`` redraws its tables from the repository alone. Used by ``memory_study.py`` and
``stabiliser_study.py``."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from rich.console import Console

REPOSITORY = Path(__file__).resolve().parents[2]


def current_commit() -> str:
    """The checkout's short commit (the code a run was trained with)."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPOSITORY
    ).stdout.strip()


def run_drl(config: Any) -> dict[str, Any]:
    """Train ``config`` (local Ray): its final evaluation's mean return, wall-clock, env
    steps, metrics CSV and final-evaluation record."""
    from drlcli.metrics.seed_runs import final_evaluation_record
    from drlcli.runtime.training import train

    started = time.perf_counter()
    summary = train(config, quiet=True, console=Console(quiet=True))
    return {
        "final_return": summary.final_evaluation.return_mean,
        "wall_s": time.perf_counter() - started,
        "env_steps": summary.env_steps,
        "csv": Path(config.metrics_path),
        "evaluation_record": final_evaluation_record(Path(summary.checkpoint_path)),
    }


class StudyRecord:
    """The recorded runs of one task of a study, in ``folder``.

    Args:
        folder: ``docs/results/data/<study>/<task>`` (a smoke test's: elsewhere).
        commit_each_run: ``git commit`` each run's two files as it is recorded (a long study's
            results then outlive the machine it runs on).
    """

    def __init__(self, folder: Path, commit_each_run: bool = False) -> None:
        self.folder = folder
        self.path = folder / "runs.jsonl"
        self.commit_each_run = commit_each_run
        folder.mkdir(parents=True, exist_ok=True)

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def done(self) -> set[tuple[str, int]]:
        """``(variant, seed)`` of every recorded run."""
        return {(entry["variant"], entry["seed"]) for entry in self.entries()}

    def returns(self, variant: str) -> dict[int, float]:
        """The recorded final returns of ``variant``, by seed."""
        return {
            entry["seed"]: entry["final_return"]
            for entry in self.entries()
            if entry["variant"] == variant
        }

    def typical_wall_s(self) -> float | None:
        """The median wall-clock of the recorded runs (None before any)."""
        walls = [entry["wall_s"] for entry in self.entries()]
        return statistics.median(walls) if walls else None

    def add(self, variant: str, seed: int, result: dict[str, Any], **extra: Any) -> dict:
        """Record a finished run (``run_drl``'s result): its CSV copied beside the record, its
        final-evaluation record written beside the CSV."""
        from drlcli.metrics.seed_runs import record_path

        csv = self.folder / result["csv"].name
        shutil.copy(result["csv"], csv)
        evaluation = record_path(csv)
        evaluation.write_text(json.dumps(result["evaluation_record"], indent=1) + "\n")
        entry = {
            "variant": variant,
            "seed": seed,
            "final_return": round(result["final_return"], 2),
            "wall_s": round(result["wall_s"], 1),
            "env_steps": result["env_steps"],
            **extra,
            "commit": current_commit(),
            "date": time.strftime("%Y-%m-%d"),
        }
        with self.path.open("a") as file:
            file.write(json.dumps(entry) + "\n")
        if self.commit_each_run:
            self._commit([csv, evaluation], f"{variant} seed {seed}")
        print(json.dumps(entry), flush=True)
        return entry

    def _commit(self, run_files: list[Path], run: str) -> None:
        """Commit the run's files and the record alone (other staged work stays staged); a
        commit that fails (another git command holds the index) is retried, then left to a
        later one with a warning: the run stays recorded on disk."""
        files = [str(path.relative_to(REPOSITORY)) for path in [*run_files, self.path]]
        message = f"{self.folder.parent.name} study: {self.folder.name} {run}"
        for _attempt in range(5):
            added = subprocess.run(["git", "add", "--", *files], cwd=REPOSITORY)
            committed = (
                added.returncode == 0
                and not subprocess.run(
                    ["git", "commit", "-q", "-m", message, "--only", "--", *files], cwd=REPOSITORY
                ).returncode
            )
            if committed:
                return
            time.sleep(3.0)
        print(f"warning: {run} is recorded but not committed; commit {files} yourself")


class Deadline:
    """Stops a study before a run that would not finish in time: ``hours`` from now, each
    run taking the record's median wall-clock (or ``first_guess_s`` before any)."""

    def __init__(self, hours: float | None, first_guess_s: float) -> None:
        self.end = None if hours is None else time.monotonic() + hours * 3600
        self.first_guess_s = first_guess_s

    def allows(self, record: StudyRecord) -> bool:
        if self.end is None:
            return True
        expected = record.typical_wall_s() or self.first_guess_s
        return time.monotonic() + expected <= self.end

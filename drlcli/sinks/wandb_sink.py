"""A Weights & Biases run per drl run: the config, every numeric metrics column by env step,
the final evaluation in the run's summary, and the videos ``drl play --video`` records from the
run's checkpoints.

The run's W&B id is kept beside its metrics CSV (``<metrics>.wandb-id``): a resumed run goes on
in the same W&B run, and ``drl play`` finds it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drlcli.config import Config
from drlcli.evaluation import EvaluationResult
from drlcli.sinks.background import BackgroundCalls
from drlcli.sinks.columns import STEP_COLUMN, logged_values


def id_file(config: Config) -> Path:
    """Where the run's W&B id is kept."""
    return Path(config.metrics_path).with_suffix(".wandb-id")


def _start(config: Config, run_id: str, resume: bool) -> Any:
    import wandb

    settings = config.logging.wandb
    return wandb.init(
        project=settings.project,
        entity=settings.entity,
        name=config.logging.display_name(config.name),
        id=run_id,
        resume="allow" if resume else None,
        mode=settings.mode,
        dir=str(Path(settings.dir or config.output_dir)),
        config=config.to_dict(),
        reinit="create_new",
        settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
    )


class WandbSink:
    """Logs one drl run into one W&B run, on a thread of its own: ``wandb.init`` (up to W&B's
    ``init_timeout``, 90 s, against a server that does not answer) and every call after it
    never hold up the rounds. A failure warns at the next row (``MetricsSinks``).

    Args:
        config: the run (its ``logging.wandb``, its config, its metrics path).
        resumed: the run resumes a checkpoint: its W&B run, when it has one, continues.
    """

    name = "wandb"

    def __init__(self, config: Config, resumed: bool = False) -> None:
        record = id_file(config)
        if resumed and record.exists():
            run_id, resume = record.read_text().strip(), True
        else:
            run_id, resume = secrets.token_hex(6), False  # W&B ids: letters and digits
            Path(config.output_dir).mkdir(parents=True, exist_ok=True)
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(run_id + "\n")
        self.run: Any = None
        self.calls = BackgroundCalls(f"wandb-{config.name}")
        self.calls.submit(self._open, config, run_id, resume)

    def write(self, row: Mapping[str, Any]) -> None:
        self.calls.submit(self._log, logged_values(row), int(row[STEP_COLUMN]))

    def final_evaluation(self, result: EvaluationResult, env_steps: int) -> None:
        values = logged_values(result.metrics())
        self.calls.submit(self._summarise, {f"final/{key}": value for key, value in values.items()})

    def run_ended(self, outcome: str) -> None:
        """W&B marks a run that exits non-zero as failed (a stopped one too: it can resume)."""
        self.exit_code = 0 if outcome == "finished" else 1

    def close(self) -> None:
        self.calls.submit(self._finish)
        self.calls.close()

    def _open(self, config: Config, run_id: str, resume: bool) -> None:
        self.run = _start(config, run_id, resume)

    def _log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def _summarise(self, values: dict[str, float]) -> None:
        self.run.summary.update(values)

    def _finish(self) -> None:
        self.run.finish(exit_code=getattr(self, "exit_code", 0))


def log_video(config: Config, video: Path) -> str | None:
    """Add a video ``drl play`` recorded from one of the run's checkpoints to the run's W&B
    run (``config``: the checkpoint's); returns the W&B run id, None when the config logs no
    W&B run or the run's id file is gone.

    Raises:
        whatever W&B raises: the caller warns.
    """
    if config.logging.wandb is None or not id_file(config).exists():
        return None
    import wandb

    from drlcli.checkpoints.files import load_payload

    run_id = id_file(config).read_text().strip()
    # At the run's last step: W&B keeps a run's steps increasing.
    step = load_payload(config.checkpoint_path)["progress"]["env_steps"]
    run = _start(config, run_id, resume=True)
    try:
        run.log({"video": wandb.Video(str(video))}, step=step)
    finally:
        run.finish()
    return run_id

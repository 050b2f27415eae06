"""TensorBoard event files of a run: every numeric metrics column as a scalar against env
steps, the config as text, and the final evaluation (``final/`` scalars)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from drlcli.config import Config
from drlcli.evaluation import EvaluationResult
from drlcli.sinks.columns import STEP_COLUMN, logged_values


class TensorBoardSink:
    """Writes a run's rows into one TensorBoard run folder (torch's ``SummaryWriter``).

    Args:
        folder: the run's folder of event files (created); a resumed run adds an event file
            beside the earlier ones, which TensorBoard reads as one run.
        config: written once as text (YAML).
    """

    name = "tensorboard"

    def __init__(self, folder: Path, config: Config) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.folder = Path(folder)
        self.writer = SummaryWriter(log_dir=str(self.folder), flush_secs=10)
        text = yaml.safe_dump(config.to_dict(), sort_keys=False)
        # Four-space indentation: TensorBoard renders text as Markdown, this as code.
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()))

    @classmethod
    def for_run(cls, config: Config) -> TensorBoardSink:
        """``<logging.tensorboard>/<run name>``."""
        name = config.logging.display_name(config.name)
        return cls(Path(config.logging.tensorboard) / name, config)

    def write(self, row: Mapping[str, Any]) -> None:
        step = int(row[STEP_COLUMN])
        for column, value in logged_values(row).items():
            self.writer.add_scalar(column, value, global_step=step)

    def final_evaluation(self, result: EvaluationResult, env_steps: int) -> None:
        for column, value in logged_values(result.metrics()).items():
            self.writer.add_scalar(f"final/{column}", value, global_step=env_steps)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

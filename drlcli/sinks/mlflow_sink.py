"""An MLflow run per drl run: params from the config, every numeric metrics column by env
step, the final evaluation (``final/`` metrics), the checkpoints as artifacts at the end. The
calls run on a thread of their own (a round never waits for the store), the metrics in
batches of at most ten seconds' rows."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drlcli.config import Config
from drlcli.evaluation import EvaluationResult
from drlcli.sinks.background import BackgroundCalls
from drlcli.sinks.columns import STEP_COLUMN, logged_values

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
RUN_TAG = "drl.metrics_path"  # finds a run's MLflow run again (a resume, drl export)
MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param value
# Metrics go to the store in batches (each value keeps its own step and time): a store's
# transaction per round cost a few percent of a two-core machine's training throughput.
FLUSH_EVERY_S = 10.0
MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch


def tracking_uri(config: Config) -> str:
    """The config's tracking URI, else ``$MLFLOW_TRACKING_URI``, else a SQLite store here."""
    settings = config.logging.mlflow
    return (
        (settings.tracking_uri if settings else None)
        or os.environ.get("MLFLOW_TRACKING_URI")
        or DEFAULT_TRACKING_URI
    )


def client_for(config: Config) -> Any:
    """An ``MlflowClient`` of the config's store. An unreachable server fails in seconds, not
    after MLflow's default minutes of retries (unless the environment sets them)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri(config))


def find_run(client: Any, config: Config) -> str | None:
    """The MLflow run of the drl run writing ``config.metrics_path``, if any (the latest)."""
    experiment = client.get_experiment_by_name(config.logging.mlflow.experiment)
    if experiment is None:
        return None
    key = str(Path(config.metrics_path).resolve()).replace("'", "\\'")
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{RUN_TAG}` = '{key}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def flat_params(config: Config) -> dict[str, str]:
    """The config as MLflow params: dotted keys, values as text (lists as their YAML-ish
    repr), cut to MLflow's length limit."""
    params: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            params[prefix] = str(value)[:MAX_PARAM_LENGTH]

    walk("", config.to_dict())
    return params


class MlflowSink:
    """Logs one drl run into one MLflow run.

    Args:
        config: the run (its ``logging.mlflow``, its params, its checkpoint paths).
        resumed: the run resumes a checkpoint: its MLflow run, when there is one, continues.
    """

    name = "mlflow"

    def __init__(self, config: Config, resumed: bool = False) -> None:
        from mlflow.entities import Param

        self.config = config
        self.client = client_for(config)
        run_id = find_run(self.client, config) if resumed else None
        if run_id is None:
            experiment = self.client.get_experiment_by_name(config.logging.mlflow.experiment)
            experiment_id = (
                experiment.experiment_id
                if experiment is not None
                else self.client.create_experiment(config.logging.mlflow.experiment)
            )
            tags = {RUN_TAG: str(Path(config.metrics_path).resolve())}
            name = config.logging.display_name(config.name)
            run_id = self.client.create_run(experiment_id, run_name=name, tags=tags)
            run_id = run_id.info.run_id
            params = [Param(key, value) for key, value in flat_params(config).items()]
            for start in range(0, len(params), 100):  # MLflow's batch limit on params
                self.client.log_batch(run_id, params=params[start : start + 100])
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id
        self.calls = BackgroundCalls(f"mlflow-{config.name}")
        self.pending: list[Any] = []
        self.flushed = time.monotonic()

    def write(self, row: Mapping[str, Any]) -> None:
        self._log(row, int(row[STEP_COLUMN]), prefix="")

    def final_evaluation(self, result: EvaluationResult, env_steps: int) -> None:
        self._log(result.metrics(), env_steps, prefix="final/")

    def run_ended(self, outcome: str) -> None:
        """MLflow's status of the run: FINISHED, FAILED, or KILLED for a stopped one."""
        self.status = {"failed": "FAILED", "stopped": "KILLED"}.get(outcome, "FINISHED")

    def close(self) -> None:
        self._flush()
        for path in (self.config.checkpoint_path, self.config.best_checkpoint_path):
            if Path(path).exists():
                self.calls.submit(self.client.log_artifact, self.run_id, str(path), "checkpoints")
        status = getattr(self, "status", "FINISHED")
        self.calls.submit(self.client.set_terminated, self.run_id, status)
        self.calls.close()

    def _log(self, values: Mapping[str, Any], step: int, prefix: str) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(prefix + column, float(value), now, step)
            for column, value in logged_values(values).items()
        ]
        self.pending += metrics
        if len(self.pending) >= MAX_BATCH or time.monotonic() - self.flushed >= FLUSH_EVERY_S:
            self._flush()

    def _flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
            self.calls.submit(self.client.log_batch, self.run_id, batch)
        self.flushed = time.monotonic()


def log_export(config: Config, onnx_path: Path) -> str | None:
    """Add an exported ONNX file to the MLflow run of the drl run that wrote its checkpoint
    (``config``: the checkpoint's); returns the run's id, None when the config logs no MLflow
    run or the store has none for it.

    Raises:
        whatever MLflow raises (an unreachable server): the caller warns.
    """
    if config.logging.mlflow is None:
        return None
    client = client_for(config)
    run_id = find_run(client, config)
    if run_id is not None:
        client.log_artifact(run_id, str(onnx_path), "onnx")
    return run_id

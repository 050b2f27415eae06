"""``drl tune``: trials of ``drl train`` as Ray Tune trials, then the best re-trained on fresh
seeds and a winner written as a config.

Each trial is a normal drl run in its own folder (config, metrics CSV, checkpoints), inside the
placement group Ray Tune reserves for it (``SearchSettings.cpus_per_trial``): its rollout
actors, learner and evaluator never take CPUs another trial holds. The objective is the mean
deterministic evaluation return of a trial's last few evaluations; trials report at each
evaluation, which is where ASHA may stop them.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from drlcli.config import Config, config_from_dict
from drlcli.tune.settings import SearchSettings
from drlcli.tune.space import Dimension, with_values

OBJECTIVE = "objective"  # the metric every trial reports and the search maximises
CHECKPOINT_FILE = "model.pt"  # in a Ray Tune checkpoint: the trial's drl checkpoint
RETURNS_FILE = "evaluation_returns.json"  # ... its evaluation returns so far
METRICS_FILE = "metrics.csv"  # ... its metrics rows
ORIGIN_FILE = "trial.json"  # ... and the trial's name (another's: an exploit step)
EXPLOITS_FILE = "exploits.csv"  # in a trial's folder: its exploit steps
PRIMITIVE = (type(None), bool, int, float, str)
# The trial's own process (Ray Tune's trainable) only waits on its run's workers.
TRIAL_PROCESS_CPU = 1e-4


@dataclass(frozen=True)
class TrialPlan:
    """What every trial of a search shares: the config mapping it starts from (``base``), the
    searched keys, the settings, and the resolved budget and evaluation interval."""

    base: dict[str, Any]
    dimensions: tuple[Dimension, ...]
    settings: SearchSettings
    env_steps: int
    evaluation_interval: int

    def trial_config(self, values: Mapping[str, Any], folder: Path, seed: int) -> Config:
        """The config of one trial: the searched ``values`` set, writing into ``folder``."""
        raw = with_values(self.base, values)
        raw.pop("metrics_path", None)
        raw.update(
            name="trial",
            output_dir=str(folder),
            total_env_steps=self.env_steps,
        )
        raw.setdefault("env", {})["seed"] = seed
        raw.setdefault("evaluation", {})["interval_env_steps"] = self.evaluation_interval
        # In TensorBoard, W&B and MLflow: <search>/<trial>, not every trial's config name.
        run_name = f"{folder.parent.parent.name}/{folder.name}"
        raw["logging"] = {**(raw.get("logging") or {}), "run_name": run_name}
        return config_from_dict(raw)


def plan_trials(
    base: Mapping[str, Any],
    config: Config,
    dimensions: Sequence[Dimension],
    settings: SearchSettings,
) -> TrialPlan:
    """Resolve the trials' budget (``trial_env_steps`` or the config's) and evaluation interval
    (the config's, else the budget over ``evaluations_per_trial``)."""
    env_steps = settings.trial_env_steps or config.total_env_steps
    interval = config.evaluation.interval_env_steps or max(
        1, env_steps // settings.evaluations_per_trial
    )
    return TrialPlan(dict(base), tuple(dimensions), settings, env_steps, interval)


def encode_choices(values: Sequence[Any]) -> tuple[list[Any], dict[Any, Any]]:
    """Choices as a searcher can hold them (Optuna takes None, bool, int, float, str): lists
    and mappings become their JSON text. Returns the choices and the text -> value map."""
    encoded, decode = [], {}
    for value in values:
        if isinstance(value, PRIMITIVE):
            encoded.append(value)
        else:
            text = json.dumps(value)
            encoded.append(text)
            decode[text] = value
    return encoded, decode


def tune_space(dimensions: Sequence[Dimension]) -> dict[str, Any]:
    """Ray Tune's search space of the dimensions (``int`` ranges include ``high``)."""
    from ray import tune

    space = {}
    for dimension in dimensions:
        if dimension.kind == "choice":
            space[dimension.key] = tune.choice(encode_choices(dimension.values)[0])
        elif dimension.kind == "uniform":
            space[dimension.key] = tune.uniform(dimension.low, dimension.high)
        elif dimension.kind == "loguniform":
            space[dimension.key] = tune.loguniform(dimension.low, dimension.high)
        else:
            space[dimension.key] = tune.randint(dimension.low, dimension.high + 1)
    return space


def decode_values(params: Mapping[str, Any], dimensions: Sequence[Dimension]) -> dict[str, Any]:
    """A trial's sampled parameters as config values (choices' JSON text decoded)."""
    values = {}
    for dimension in dimensions:
        value = params[dimension.key]
        if dimension.kind == "choice":
            value = encode_choices(dimension.values)[1].get(value, value)
        values[dimension.key] = value
    return values


def objective_of(evaluation_returns: Sequence[float], last: int) -> float:
    """The mean of the last ``last`` evaluation returns (fewer when fewer were made)."""
    if not evaluation_returns:
        raise ValueError("no evaluation yet")
    return float(statistics.fmean(evaluation_returns[-last:]))


class EvaluationReporter:
    """The metrics sink of a trial: each evaluation is reported to Ray Tune (``report``) with
    the objective so far, the evaluation's return and its env steps, and, as Ray Tune's
    checkpoint, the trial's drl checkpoint of the round whose row showed it, the returns so far,
    the metrics CSV and the trial's name: what a resumed trial continues from, or a
    population-based trial that exploits this one. The checkpoint of a round is written after
    its row, so each report goes out at the next row (or at ``finish``).

    Args:
        objective_evaluations: the objective's number of last evaluations.
        report: ``report(metrics, checkpoint=...)``: ``ray.tune.report``.
        files: the trial's files for the checkpoint (None: report metrics only).
        returns: the evaluation returns of the trial before a resume.
    """

    name = "ray tune"

    def __init__(
        self,
        objective_evaluations: int,
        report,
        files: TrialFiles | None = None,
        returns: Sequence[float] = (),
    ) -> None:
        self.objective_evaluations = objective_evaluations
        self.report = report
        self.files = files
        self.returns: list[float] = list(returns)
        self.pending: dict[str, Any] | None = None

    def write(self, row: Mapping[str, Any]) -> None:
        self._send_pending()
        if row.get("eval_return_mean") is not None:
            self.pending = self._add(float(row["eval_return_mean"]), int(row["eval_env_steps"]))

    def finish(self, final_return: float | None, env_steps: int) -> None:
        """After the run: the last row's evaluation, then the final one (``final_return``)."""
        self._send_pending()
        if final_return is not None:
            self._send(self._add(final_return, env_steps))

    def resend(self, env_steps: int) -> None:
        """Report the returns as they stand (a trial restored from a finished checkpoint)."""
        self._send(self._metrics(self.returns[-1], env_steps))

    def close(self) -> None:
        pass

    def _add(self, evaluation_return: float, env_steps: int) -> dict[str, Any]:
        self.returns.append(evaluation_return)
        return self._metrics(evaluation_return, env_steps)

    def _metrics(self, evaluation_return: float, env_steps: int) -> dict[str, Any]:
        return {
            OBJECTIVE: objective_of(self.returns, self.objective_evaluations),
            "evaluation_return": evaluation_return,
            "env_steps": env_steps,
        }

    def _send_pending(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self._send(pending)

    def _send(self, metrics: dict[str, Any]) -> None:
        if self.files is None or not self.files.checkpoint.exists():
            self.report(metrics)
            return
        from ray.tune import Checkpoint

        # Ray Tune copies the folder into the trial's storage before report returns.
        with tempfile.TemporaryDirectory(prefix="drl-tune-") as folder:
            self.files.snapshot(Path(folder), self.returns)
            self.report(metrics, checkpoint=Checkpoint.from_directory(folder))


@dataclass(frozen=True)
class TrialFiles:
    """A trial's files that travel in its Ray Tune checkpoints."""

    trial: str
    checkpoint: Path  # the latest
    best: Path
    metrics: Path

    def snapshot(self, folder: Path, returns: Sequence[float]) -> None:
        """Copy the checkpoint and the metrics rows into ``folder``, with ``returns`` and
        the trial's name."""
        shutil.copyfile(self.checkpoint, folder / CHECKPOINT_FILE)
        if self.metrics.exists():
            shutil.copyfile(self.metrics, folder / METRICS_FILE)
        (folder / RETURNS_FILE).write_text(json.dumps(list(returns)))
        (folder / ORIGIN_FILE).write_text(json.dumps({"trial": self.trial}))


def restore_trial(
    stored: Path, files: TrialFiles, values: Mapping[str, Any]
) -> tuple[Path, list, int]:
    """Take a trial's Ray Tune checkpoint (``stored``) as where the trial continues: returns
    the drl checkpoint to resume from (copied into the trial's folder), the evaluation returns
    so far and the checkpoint's env steps.

    A checkpoint of another trial is population-based training's exploit step: the trial
    takes that trial's history (its metrics rows up to the checkpoint replace the trial's own;
    its best checkpoint, of a history left behind, is removed), and the exploit is recorded in
    ``exploits.csv`` beside the metrics (env steps, the trial exploited, the values it goes on
    with)."""
    from drlcli.checkpoint import load_payload

    folder = files.checkpoint.parent
    resume = folder / "resumed_from.pt"
    shutil.copyfile(stored / CHECKPOINT_FILE, resume)
    returns = json.loads((stored / RETURNS_FILE).read_text())
    env_steps = load_payload(resume)["progress"]["env_steps"]
    origin = files.trial
    if (stored / ORIGIN_FILE).exists():
        origin = json.loads((stored / ORIGIN_FILE).read_text())["trial"]
    if origin != files.trial:
        if (stored / METRICS_FILE).exists():
            shutil.copyfile(stored / METRICS_FILE, files.metrics)
        files.best.unlink(missing_ok=True)
        record = folder / EXPLOITS_FILE
        new = not record.exists()
        with open(record, "a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(["env_steps", "exploited", "values"])
            writer.writerow([env_steps, origin, json.dumps(dict(values), sort_keys=True)])
    return resume, returns, env_steps


def run_trial(
    params: Mapping[str, Any],
    plan: TrialPlan,
    experiment_folder: Path,
    seed_key: str | None = None,
) -> None:
    """The Ray Tune trainable: train one trial's config and report at each evaluation, the
    final one included; a trial restored (a resumed search, or population-based training's
    exploit step) continues from its Ray Tune checkpoint by drl's exact resume. ``seed_key``:
    the parameter holding the seed (re-training); else the config's env.seed."""
    from ray import tune

    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    values = decode_values(params, plan.dimensions) if seed_key is None else params["values"]
    seed = params[seed_key] if seed_key else plan.base.get("env", {}).get("seed", 0)
    # Straight into the search's folder (Ray Tune's storage), not Ray's staging copy of it,
    # whose syncing would race with drl's atomic writes.
    trial = tune.get_context().get_trial_name()
    folder = Path(experiment_folder) / trial
    folder.mkdir(parents=True, exist_ok=True)
    config = plan.trial_config(values, folder, seed)
    (folder / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    files = TrialFiles(
        trial, config.checkpoint_path, config.best_checkpoint_path, Path(config.metrics_path)
    )
    resume, returns, env_steps = None, [], 0
    restored = tune.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as stored:
            resume, returns, env_steps = restore_trial(Path(stored), files, values)
    reporter = EvaluationReporter(plan.settings.objective_evaluations, tune.report, files, returns)
    if resume is not None and env_steps >= config.total_env_steps:  # complete as it stands
        reporter.resend(env_steps)
        return
    with open(os.devnull, "w") as devnull:
        summary = train(
            config,
            resume=resume,
            quiet=True,
            console=Console(file=devnull),
            devices=AvailableDevices(cuda_devices=0, mps=False),
            metrics_sinks=[reporter],
        )
    final = summary.final_evaluation
    reporter.finish(None if final is None else final.return_mean, summary.env_steps)


def trial_resources(config: Config, settings: SearchSettings):
    """Ray Tune's reservation for one trial, ``cpus_per_trial`` in all: a sliver for the
    trial's own process, then equal bundles for its rollout actors, CPU learners and
    evaluator."""
    from ray.tune import PlacementGroupFactory

    processes = config.num_actors + config.num_gpus + 1
    share = math.floor((settings.cpus_per_trial - TRIAL_PROCESS_CPU) / processes * 1e4) / 1e4
    return PlacementGroupFactory([{"CPU": TRIAL_PROCESS_CPU}] + [{"CPU": share}] * processes)


def write_results_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """All trials, one row each, columns in first-seen order."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)

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
import dataclasses
import functools
import json
import math
import operator
import os
import shutil
import statistics
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from drlcli.config import Config, config_from_dict, with_values
from drlcli.config_fields import with_unread_at_defaults
from drlcli.errors import TrainingError
from drlcli.seed_statistics import aggregate
from drlcli.topology import AvailableDevices
from drlcli.tune.settings import SearchSettings, search_seeds
from drlcli.tune.space import Dimension

TRIAL_DEVICES = AvailableDevices(cuda_devices=0, mps=False)
"""Trials train on CPU: what every trial's topology is resolved for."""
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

    @property
    def trial_seeds(self) -> tuple[int, ...]:
        """The seeds every trial trains on (``seeds_per_trial`` from the config's env.seed)."""
        first = int((self.base.get("env") or {}).get("seed", 0))
        return search_seeds(first, self.settings.seeds_per_trial)

    def trial_config(
        self, values: Mapping[str, Any], folder: Path, seed: int, part: str = ""
    ) -> Config:
        """The config of one trial's run on ``seed``: the searched ``values`` set, writing into
        the trial's ``folder`` (``folder / part`` for one of several seeds)."""
        raw = with_values(self.base, values)
        raw.pop("metrics_path", None)
        raw.update(
            name="trial",
            output_dir=str(folder / part),
            total_env_steps=self.env_steps,
        )
        raw.setdefault("env", {})["seed"] = seed
        raw.setdefault("evaluation", {})["interval_env_steps"] = self.evaluation_interval
        # In TensorBoard, W&B and MLflow: <search>/<trial>[/seed_<n>], not the config's name.
        run_name = f"{folder.parent.parent.name}/{folder.name}" + (f"/{part}" if part else "")
        raw["logging"] = {**(raw.get("logging") or {}), "run_name": run_name}
        # A trial leaves out what it does not read (desired_kl in an anneal trial, say).
        config = config_from_dict(raw, refuse_unread_settings=False)
        return dataclasses.replace(config, algo_params=with_unread_at_defaults(config.algo_params))


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
    """The metrics sink of one seed's run in a trial: each evaluation is added to the seed's
    returns and the seed then meets the trial's other seeds at that evaluation point
    (``arrive``: a ``SeedBarrier``'s, which reports for all of them). The checkpoint of a round
    is written after its row, so an evaluation arrives at the next row (or at ``finish``),
    when the checkpoint a report carries is that of the round whose row carried it. A trial's
    runs wait for each evaluation in the round after the evaluated one
    (``TrainOptions.evaluations_in_next_row``): the evaluation of the weights of env step N
    reports the checkpoint one round past N, however loaded the machine.

    Args:
        arrive: called once per evaluation, after ``returns`` holds it.
        returns: the seed's evaluation returns before a resume.
    """

    name = "ray tune"

    def __init__(self, arrive: Callable[[], None], returns: Sequence[float] = ()) -> None:
        self.arrive = arrive
        self.returns: list[float] = list(returns)
        self.env_steps: int | None = None  # of the latest evaluation
        self.pending: tuple[float, int] | None = None

    def write(self, row: Mapping[str, Any]) -> None:
        self._arrive_pending()
        if row.get("eval_return_mean") is not None:
            self.pending = (float(row["eval_return_mean"]), int(row["eval_env_steps"]))

    def finish(self, final_return: float | None, env_steps: int) -> None:
        """After the run: the last row's evaluation, then the final one (``final_return``)."""
        self._arrive_pending()
        if final_return is not None:
            self._add(final_return, env_steps)

    def close(self) -> None:
        pass

    def _arrive_pending(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self._add(*pending)

    def _add(self, evaluation_return: float, env_steps: int) -> None:
        self.returns.append(evaluation_return)
        self.env_steps = env_steps
        self.arrive()


class TrialStop(BaseException):
    """Ends a seed's training because the trial ends (another seed failed, or Ray Tune stopped
    the trial while this seed waited): not an ``Exception``, so that no handler in ``train``
    takes it for a failure of its own; the run's exit stack still closes everything."""


class SeedBarrier:
    """The seeds of a trial meet at each evaluation point (counted from 1 per seed): the last
    to arrive calls ``send(point)`` for all of them, the others wait until it returns. A seed
    whose run ended (``leave``) counts as arrived at every later point. ``stop(error)`` ends
    every wait with ``TrialStop``; an error of ``send`` (Ray Tune stopping the trial) stops the
    others the same way and is raised in the seed that sent."""

    def __init__(self, count: int, send: Callable[[int], None]) -> None:
        self.send = send
        self.arrivals = [0] * count
        self.left = [False] * count
        self.reported = 0
        self.stopped: BaseException | None = None
        self.condition = threading.Condition()

    def arrive(self, seed_index: int) -> None:
        with self.condition:
            if self.stopped is not None:
                raise TrialStop
            self.arrivals[seed_index] += 1
            point = self.arrivals[seed_index]
            self._report_complete_points()
            self.condition.wait_for(lambda: self.reported >= point or self.stopped is not None)
            if self.stopped is not None:
                raise TrialStop

    def leave(self, seed_index: int) -> None:
        with self.condition:
            self.left[seed_index] = True
            if self.stopped is None:
                self._report_complete_points()

    def stop(self, error: BaseException) -> None:
        with self.condition:
            if self.stopped is None:
                self.stopped = error
            self.condition.notify_all()

    def _report_complete_points(self) -> None:
        while True:
            point = self.reported + 1
            there = [arrived >= point for arrived in self.arrivals]
            if not any(there) or not all(map(operator.or_, there, self.left)):
                return
            try:
                self.send(point)
            except BaseException as error:
                self.stopped = error
                self.condition.notify_all()
                raise
            self.reported = point
            self.condition.notify_all()


@dataclass(frozen=True)
class TrialFiles:
    """One seed's files that travel in its trial's Ray Tune checkpoints (``part``: its folder
    inside them; "" when the trial trains one seed)."""

    part: str
    checkpoint: Path  # the latest
    best: Path
    metrics: Path

    def snapshot(self, folder: Path, returns: Sequence[float]) -> None:
        """Copy the checkpoint and the metrics rows into ``folder / part``, with ``returns``."""
        target = folder / self.part
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.checkpoint, target / CHECKPOINT_FILE)
        if self.metrics.exists():
            shutil.copyfile(self.metrics, target / METRICS_FILE)
        (target / RETURNS_FILE).write_text(json.dumps(list(returns)))


class TrialReports:
    """What a trial reports to Ray Tune at each evaluation point, once all its seeds reached it:
    the objective (``objective_aggregate`` over the seeds of each seed's mean of its last
    ``objective_evaluations`` evaluations), the same aggregate of the seeds' latest evaluation
    returns, the env steps, and, as Ray Tune's checkpoint, every seed's drl checkpoint of the
    evaluated round with its returns and metrics rows, and the trial's name: what a resumed
    trial continues from, or a population-based trial that exploits this one.

    Args:
        report: ``report(metrics, checkpoint=...)``: ``ray.tune.report``.
        returns: per seed, its evaluation returns before a resume.
    """

    def __init__(
        self,
        trial: str,
        files: Sequence[TrialFiles],
        settings: SearchSettings,
        report: Callable[..., None],
        returns: Sequence[Sequence[float]] | None = None,
    ) -> None:
        self.trial, self.files, self.settings, self.report = trial, list(files), settings, report
        self.barrier = SeedBarrier(len(self.files), self._send)
        self.reporters = [
            EvaluationReporter(
                functools.partial(self.barrier.arrive, index),
                () if returns is None else returns[index],
            )
            for index in range(len(self.files))
        ]

    def metrics(self) -> dict[str, Any]:
        """The trial's figures as its seeds' returns stand."""
        how = self.settings.objective_aggregate or "mean"
        last = self.settings.objective_evaluations
        objectives = [objective_of(reporter.returns, last) for reporter in self.reporters]
        latest = [reporter.returns[-1] for reporter in self.reporters]
        return {
            OBJECTIVE: float(aggregate(objectives, how)),
            "evaluation_return": float(aggregate(latest, how)),
            "env_steps": max(reporter.env_steps or 0 for reporter in self.reporters),
        }

    def resend(self, env_steps: int) -> None:
        """Report the returns as they stand (a trial restored from a finished checkpoint)."""
        for reporter in self.reporters:
            reporter.env_steps = env_steps
        self._send(0)

    def _send(self, point: int) -> None:
        metrics = self.metrics()
        if not all(files.checkpoint.exists() for files in self.files):
            self.report(metrics)
            return
        from ray.tune import Checkpoint

        # Ray Tune copies the folder into the trial's storage before report returns.
        with tempfile.TemporaryDirectory(prefix="drl-tune-") as folder:
            for files, reporter in zip(self.files, self.reporters, strict=True):
                files.snapshot(Path(folder), reporter.returns)
            (Path(folder) / ORIGIN_FILE).write_text(json.dumps({"trial": self.trial}))
            self.report(metrics, checkpoint=Checkpoint.from_directory(folder))


def restore_trial(
    stored: Path, trial: str, trial_folder: Path, files: Sequence[TrialFiles], values: Any
) -> list[tuple[Path, list[float], int]]:
    """Take a trial's Ray Tune checkpoint (``stored``) as where each of its seeds continues:
    per seed, the drl checkpoint to resume from (copied into the seed's folder), its
    evaluation returns so far and the checkpoint's env steps.

    A checkpoint of another trial is population-based training's exploit step: each seed takes
    that trial's same seed's history (its metrics rows up to the checkpoint replace the seed's
    own; its best checkpoint, of a history left behind, is removed), and the exploit is
    recorded once in ``exploits.csv`` in the trial's folder (env steps, the trial exploited,
    the values it goes on with).

    Raises:
        TrainingError: the checkpoint lacks a seed's files.
    """
    from drlcli.checkpoints.files import load_payload

    origin = trial
    if (stored / ORIGIN_FILE).exists():
        origin = json.loads((stored / ORIGIN_FILE).read_text())["trial"]
    starts = []
    for seed_files in files:
        part = stored / seed_files.part
        if not (part / CHECKPOINT_FILE).is_file():
            raise TrainingError(
                f"{stored}: the trial's checkpoint has no {seed_files.part or 'run'} to resume "
                "from; start the search again without --resume"
            )
        resume = seed_files.checkpoint.parent / "resumed_from.pt"
        shutil.copyfile(part / CHECKPOINT_FILE, resume)
        returns = json.loads((part / RETURNS_FILE).read_text())
        env_steps = load_payload(resume)["progress"]["env_steps"]
        if origin != trial:
            if (part / METRICS_FILE).exists():
                shutil.copyfile(part / METRICS_FILE, seed_files.metrics)
            seed_files.best.unlink(missing_ok=True)
        starts.append((resume, returns, env_steps))
    if origin != trial:
        _record_exploit(
            trial_folder / EXPLOITS_FILE,
            [str(starts[0][2]), origin, json.dumps(dict(values), sort_keys=True)],
        )
    return starts


def _record_exploit(record: Path, row: list[str]) -> None:
    """Append an exploit step to ``record`` unless it is the last one there: a trial stopped
    before it reported a checkpoint of its own restarts from the exploited one again when its
    search resumes, which is the same exploit."""
    rows = []
    if record.exists():
        with open(record, newline="") as handle:
            rows = list(csv.reader(handle))
    if rows and rows[-1] == row:
        return
    with open(record, "a", newline="") as handle:
        writer = csv.writer(handle)
        if not rows:
            writer.writerow(["env_steps", "exploited", "values"])
        writer.writerow(row)


def run_trial(
    params: Mapping[str, Any],
    plan: TrialPlan,
    experiment_folder: Path,
    seed_key: str | None = None,
) -> None:
    """The Ray Tune trainable: train one trial's config on each of its seeds (side by side,
    each in a thread of its own, when more than one) and report at each evaluation point, the
    final one included; a trial restored (a resumed search, or population-based training's
    exploit step) continues from its Ray Tune checkpoint by drl's exact resume. ``seed_key``:
    the parameter holding the one seed (re-training); else the plan's ``trial_seeds``."""
    from ray import tune

    values = decode_values(params, plan.dimensions) if seed_key is None else params["values"]
    seeds = (params[seed_key],) if seed_key else plan.trial_seeds
    # Straight into the search's folder (Ray Tune's storage), not Ray's staging copy of it,
    # whose syncing would race with drl's atomic writes.
    trial = tune.get_context().get_trial_name()
    folder = Path(experiment_folder) / trial
    configs, files = [], []
    for seed in seeds:
        part = "" if len(seeds) == 1 else f"seed_{seed}"
        (folder / part).mkdir(parents=True, exist_ok=True)
        config = plan.trial_config(values, folder, seed, part)
        (folder / part / "config.yaml").write_text(
            yaml.safe_dump(config.to_dict(), sort_keys=False)
        )
        configs.append(config)
        files.append(
            TrialFiles(
                part,
                config.checkpoint_path,
                config.best_checkpoint_path,
                Path(config.metrics_path),
            )
        )
    starts: list[tuple[Path | None, list[float], int]] = [(None, [], 0) for _ in seeds]
    restored = tune.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as stored:
            starts = list(restore_trial(Path(stored), trial, folder, files, values))
    reports = TrialReports(
        trial, files, plan.settings, tune.report, [returns for _, returns, _ in starts]
    )
    steps = [env_steps for _, _, env_steps in starts]
    if all(done >= config.total_env_steps for done, config in zip(steps, configs, strict=True)):
        reports.resend(max(steps))  # complete as it stands
        return
    train_seeds(configs, [resume for resume, _, _ in starts], reports)


def train_seeds(
    configs: Sequence[Config], resumes: Sequence[Path | None], reports: TrialReports
) -> None:
    """Train each seed's config (from its resume checkpoint, if any) with its reporter; more
    than one side by side, each in a thread. The first error of a seed (or Ray Tune's stop,
    raised in the seed that reported) stops the others and is raised here once all ended."""
    from drlcli.runtime.training import train

    errors: list[BaseException | None] = [None] * len(configs)

    def train_seed(index: int) -> None:
        reporter = reports.reporters[index]
        try:
            with open(os.devnull, "w") as devnull:
                summary = train(
                    configs[index],
                    resume=resumes[index],
                    quiet=True,
                    console=Console(file=devnull),
                    devices=TRIAL_DEVICES,
                    metrics_sinks=[reporter],
                    concurrent_runs=len(configs),
                    evaluations_in_next_row=True,
                )
            final = summary.final_evaluation
            reporter.finish(None if final is None else final.return_mean, summary.env_steps)
        except BaseException as error:
            errors[index] = error
            reports.barrier.stop(error)
        finally:
            reports.barrier.leave(index)

    if len(configs) == 1:
        train_seed(0)
    else:
        threads = [
            threading.Thread(target=train_seed, args=(index,), name=f"drl-seed-{index}")
            for index in range(len(configs))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    causes = [error for error in errors if error is not None and not isinstance(error, TrialStop)]
    if causes:
        raise causes[0]


def trial_resources(config: Config, settings: SearchSettings, seeds: int = 1):
    """Ray Tune's reservation for one trial, ``cpus_per_trial`` in all: a sliver for the
    trial's own process, then equal bundles for the rollout actors, CPU learners and evaluator
    of each of its ``seeds`` runs."""
    from ray.tune import PlacementGroupFactory

    processes = (config.num_actors + config.num_gpus + 1) * seeds
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

"""``drl tune``'s stateful shell: checks everything, runs the search's trials with Ray Tune,
re-trains the best on fresh seeds, and writes the results CSV and the winner's config."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import math
import os
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from drlcli.algos.entry_types import RoundShape
from drlcli.algos.registry import get_algorithm
from drlcli.config import config_from_dict, read_config, with_values
from drlcli.errors import ConfigError, SearchInterrupted, TrainingError, UsageError
from drlcli.metrics.runs import SEARCH_FILE
from drlcli.run_names import seeded_name
from drlcli.seed_statistics import Interval, bootstrap_interval, interquartile_mean
from drlcli.topology import topology_for_config
from drlcli.tune.search import (
    EXPLOITS_FILE,
    OBJECTIVE,
    PRIMITIVE,
    TRIAL_DEVICES,
    TrialPlan,
    decode_values,
    plan_trials,
    run_trial,
    trial_resources,
    tune_space,
    write_results_csv,
)
from drlcli.tune.settings import parse_search_settings
from drlcli.tune.space import checked_values, parse_space, read_space_file, without_unread


@dataclass(frozen=True)
class Candidate:
    """One of the best trials, re-trained: its values, its objective in the search, and the
    final deterministic evaluation return on each re-training seed."""

    trial: str
    values: dict[str, Any]
    search_objective: float
    seed_returns: dict[int, float]

    @property
    def median(self) -> float:
        return float(statistics.median(self.seed_returns.values()))

    @property
    def iqm(self) -> float:
        return float(interquartile_mean(list(self.seed_returns.values())))

    @property
    def iqm_interval(self) -> Interval:
        """The IQM's 95% bootstrap interval over the seeds (at least 2)."""
        return bootstrap_interval([list(self.seed_returns.values())], "iqm")


@dataclass(frozen=True)
class SearchSummary:
    """What a search wrote: its folder, the results CSV, the winner's config, and the
    re-trained candidates, best first."""

    folder: Path
    results_csv: Path
    winner_yaml: Path
    winner_values: dict[str, Any]
    candidates: list[Candidate]


def require_tune(searcher: str = "optuna") -> None:
    """Ray Tune (and Optuna for its searcher) are an optional extra.

    Raises:
        UsageError: naming what to install.
    """
    missing = []
    try:
        import ray.tune  # noqa: F401
    except ImportError:
        missing.append("Ray Tune")
    if searcher == "optuna":
        try:
            import optuna  # noqa: F401
        except ImportError:
            missing.append("Optuna")
    if missing:
        raise UsageError(
            f"drl tune needs {' and '.join(missing)}, not installed here: "
            "pip install 'drlcli[tune]'"
        )


def search_folder(plan: TrialPlan) -> Path:
    """The default folder of a search: ``<output_dir>/search_<config name>``."""
    return Path(plan.base.get("output_dir", "output")) / f"search_{plan.base['name']}"


def prepare_search(
    config_path: Path,
    space_path: Path,
    trials: int | None = None,
    overrides: dict[str, Any] | None = None,
) -> TrialPlan:
    """Read and check the config (with ``overrides``' dotted keys set over it: ``drl tune
    --set``) and the space file; nothing runs.

    Raises:
        ConfigError: in either file, naming the key.
    """
    base, config = read_config(config_path, overrides)
    raw = read_space_file(space_path)
    try:
        dimensions = parse_space(raw["space"], base)
        search = dict(raw.get("search") or {})
        if trials is not None:
            search["trials"] = trials
        settings = parse_search_settings(search, config)
    except ConfigError as error:
        raise ConfigError(f"{space_path}: {error}") from None
    base.setdefault("name", config.name)
    if settings.scheduler == "pbt":
        try:
            check_resumable_dimensions(base, config, dimensions)
        except ConfigError as error:
            raise ConfigError(f"{space_path}: {error}") from None
    plan = plan_trials(base, config, dimensions, settings)
    check_trial_shapes(plan, config_path, space_path)
    return plan


TRIAL_CORNERS_CHECKED = 4096
"""At most this many combinations of the searched keys' extreme values are checked together;
a larger space has each key's values checked alone against the config."""


def check_trial_shapes(plan: TrialPlan, config_path: Path, space_path: Path) -> None:
    """Every trial's topology and round are valid, as a run's preflight would find at the
    trial's start (trials train on CPUs; the algorithm's ``check_round``, e.g. PPO's minibatches
    within a round's steps): for the search's own config, and for each combination of the
    searched keys' extreme values (a range's ends, every choice), as several keys together
    make a round.

    Raises:
        ConfigError: ``CONFIG: <the rule>`` for the config's own trial, ``SPACE: space: a trial
            with KEY VALUE, ...: is refused: <the rule>`` for another.
    """
    values = [[(d.key, value) for value in checked_values(d)] for d in plan.dimensions]
    if math.prod(len(each) for each in values) <= TRIAL_CORNERS_CHECKED:
        combinations = [dict(combination) for combination in itertools.product(*values)]
    else:
        combinations = [dict([pair]) for each in values for pair in each]
    for combination in [{}, *combinations]:
        trial = plan.trial_config(combination, Path("trial"), 0)
        try:
            shape = RoundShape.of(trial, topology_for_config(trial, TRIAL_DEVICES))
            get_algorithm(trial.algo).check_round(trial.algo_params, shape)
        except ConfigError as error:
            if not combination:
                raise ConfigError(f"{config_path}: {error}") from None
            named = ", ".join(f"{key} {value!r}" for key, value in combination.items())
            raise ConfigError(
                f"{space_path}: space: a trial with {named} is refused: {error}"
            ) from None


def check_resumable_dimensions(base: dict[str, Any], config: Any, dimensions: Any) -> None:
    """Population-based training changes a trial's values as it resumes from a checkpoint:
    each value of a searched key (a range's ends, every choice) must leave the policy actor's
    architecture and semantics and the algorithm's ``resume_fixed_params`` (the other networks'
    shapes) as the config's own, which a resume requires.

    Raises:
        ConfigError: ``space.<key>``, naming the value.
    """
    from drlcli.envs import env_facts, make_task_env
    from drlcli.runtime.nodes import import_py_modules_here
    from drlcli.runtime.probe import probe_actor

    import_py_modules_here(config.runtime_env)
    env = make_task_env(config.env)
    facts = env_facts(env)
    env.close()
    algorithm = get_algorithm(config.algo)
    reference = probe_actor(algorithm, config, facts)
    for dimension in dimensions:
        name = dimension.key.removeprefix("algo_params.")
        if dimension.key.startswith("algo_params.") and name in algorithm.resume_ignored_params(
            config.algo_params
        ):
            raise ConfigError(
                f"space.{dimension.key}: a trial resuming from another's checkpoint does not "
                f"read {name} under this config ({algorithm.name} keeps what it started in the "
                "checkpoint: learning_rate_schedule adaptive_kl), so population-based training "
                "could not change it: search desired_kl, or use scheduler: asha or none"
            )
        ends = dimension.values if dimension.kind == "choice" else (dimension.low, dimension.high)
        for value in ends:
            varied = config_from_dict(
                with_values(base, {dimension.key: value}), refuse_unread_settings=False
            )
            probed = probe_actor(algorithm, varied, facts)
            changed = [
                what
                for what, same in (
                    ("architecture", probed.tensor_shapes == reference.tensor_shapes),
                    ("semantics", probed.semantics == reference.semantics),
                )
                if not same
            ]
            if changed:
                raise ConfigError(
                    f"space.{dimension.key}: {value!r} changes the policy actor's "
                    f"{' and '.join(changed)}, which population-based training cannot do as a "
                    "trial resumes from a checkpoint: search this key with scheduler: asha or "
                    "none"
                )
            fixed = [
                name
                for name in algorithm.resume_fixed_params
                if getattr(varied.algo_params, name) != getattr(config.algo_params, name)
            ]
            if fixed:
                raise ConfigError(
                    f"space.{dimension.key}: {value!r} changes {algorithm.name}'s "
                    f"{' and '.join(fixed)} (a network beyond the policy actor), which a trial "
                    "resuming from another's checkpoint cannot take: search this key with "
                    "scheduler: asha or none"
                )


def run_search(
    plan: TrialPlan,
    folder: Path,
    *,
    resume: bool = False,
    address: str | None = None,
    quiet: bool = False,
) -> SearchSummary:
    """Run the search's trials, re-train the best ``retrain_top`` on the re-training seeds,
    and write ``results.csv`` and ``winner.yaml`` into ``folder``.

    Args:
        resume: continue the search ``folder`` holds (its trials from their last reported
            checkpoints, by drl's exact resume); without it, ``folder`` must hold no search.

    Raises:
        UsageError: ``resume`` without a search in ``folder``, or a search there without it.
        SearchInterrupted: Ctrl-C or SIGTERM; the trials' checkpoints are kept.
        TrainingError: no trial finished an evaluation.
    """
    from ray import tune

    from drlcli.runtime.ray_session import ray_session

    settings = plan.settings
    folder = Path(folder).resolve()
    searched = folder / "trials"
    if resume and not searched.exists():
        raise UsageError(f"{folder}: no search to resume here; start one without --resume")
    if not resume and searched.exists():
        raise UsageError(
            f"{folder} already holds a search: continue it with --resume, or choose another "
            "folder with --output"
        )
    folder.mkdir(parents=True, exist_ok=True)
    if not resume:
        write_search_file(plan, folder / SEARCH_FILE)
    one_run = plan.trial_config({}, folder, 0)
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, plan=plan, experiment_folder=searched),
        trial_resources(one_run, settings, settings.seeds_per_trial),
    )
    with ray_session(address, num_cpus=os.cpu_count() or 1):
        # Trial numbers from 1: Optuna's searcher counts from 1, the random one from 0.
        trial_name = functools.partial(_trial_name, first=int(settings.searcher == "random"))
        if resume:
            tuner = tune.Tuner.restore(str(searched), trainable, resume_unfinished=True)
        else:
            tuner = tune.Tuner(
                trainable,
                param_space=tune_space(plan.dimensions),
                tune_config=tune.TuneConfig(
                    metric=OBJECTIVE,
                    mode="max",
                    num_samples=settings.trials,
                    search_alg=_searcher(settings),
                    scheduler=_scheduler(plan),
                    trial_name_creator=trial_name,
                    trial_dirname_creator=trial_name,
                ),
                run_config=_run_config(folder, "trials", quiet, settings.scheduler == "pbt"),
            )
        results = _fit(tuner, folder, quiet)
        rows, ranked = [], []
        for result in results:
            values = decode_values(result.config, plan.dimensions)
            metrics = result.metrics or {}
            trial = Path(result.path).name
            row = {"trial": trial, **{key: _plain(value) for key, value in values.items()}}
            row.update(
                objective=metrics.get(OBJECTIVE),
                last_evaluation_return=metrics.get("evaluation_return"),
                env_steps=metrics.get("env_steps"),
                state="error" if result.error else _state(metrics, plan),
                error=_last_line(result.error) if result.error else "",
                folder=str(result.path),
            )
            if settings.scheduler == "pbt":  # the values above are the trial's last ones
                row["exploits"] = _exploit_count(Path(result.path))
            rows.append(row)
            if result.error is None and metrics.get(OBJECTIVE) is not None:
                ranked.append((float(metrics[OBJECTIVE]), trial, values))
        ranked.sort(key=lambda item: -item[0])
        results_csv = folder / "results.csv"
        write_results_csv(results_csv, by_objective(rows))
        if not ranked:
            raise TrainingError(
                f"no trial of the search finished an evaluation; see {results_csv} and the "
                f"trials' logs under {folder / 'trials'}"
            )
        resources = trial_resources(one_run, settings)  # one seed per re-training trial
        candidates = _retrain(plan, ranked[: settings.retrain_top], folder, resources, quiet)
    winner_values = candidates[0].values if candidates else ranked[0][2]
    winner_yaml = folder / "winner.yaml"
    winner = without_unread(
        with_values(plan.base, {**winner_values, "name": f"{plan.base['name']}_tuned"})
    )
    winner_yaml.write_text(
        "# drl tune's winner: drl train "
        + str(winner_yaml)
        + "\n"
        + yaml.safe_dump(winner, sort_keys=False)
    )
    return SearchSummary(folder, results_csv, winner_yaml, winner_values, candidates)


def write_search_file(plan: TrialPlan, path: Path) -> None:
    """What the search is (its config, space and settings): a record of it, and what marks
    its folder as a search's (the dashboard groups its trials)."""
    space = {
        dimension.key: {
            dimension.kind: list(dimension.values)
            if dimension.kind == "choice"
            else [dimension.low, dimension.high]
        }
        for dimension in plan.dimensions
    }
    settings = dataclasses.asdict(plan.settings)
    settings["retrain_seeds"] = list(settings["retrain_seeds"])
    record = {"config": plan.base, "space": space, "search": settings}
    path.write_text(yaml.safe_dump(record, sort_keys=False))


def by_objective(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results rows, best objective first; those without one (None) last. An objective
    of exactly 0.0 is one."""
    return sorted(rows, key=lambda row: (row["objective"] is None, -(row["objective"] or 0.0)))


def _retrain(plan: TrialPlan, top, folder: Path, resources: Any, quiet: bool) -> list:
    """Each of the ``top`` trials trained again on every re-training seed (a grid of Ray Tune
    trials, no pruning); candidates by median final return, then interquartile mean."""
    if not top:
        return []
    from ray import tune

    seeds = list(plan.settings.retrain_seeds)
    grid = [{"trial": trial, "values": values} for _, trial, values in top]
    trainable = tune.with_resources(
        tune.with_parameters(_retrain_trial, plan=plan, experiment_folder=folder / "retrain"),
        resources,
    )
    if (folder / "retrain").exists():  # a resumed search that had begun re-training
        tuner = tune.Tuner.restore(str(folder / "retrain"), trainable, resume_unfinished=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={"candidate": tune.grid_search(grid), "seed": tune.grid_search(seeds)},
            tune_config=tune.TuneConfig(
                metric=OBJECTIVE,
                mode="max",
                trial_name_creator=_retrain_name,
                trial_dirname_creator=_retrain_name,
            ),
            run_config=_run_config(folder, "retrain", quiet),
        )
    returns: dict[str, dict[int, float]] = {trial: {} for _, trial, _ in top}
    for result in _fit(tuner, folder, quiet):
        if result.error is not None:
            raise TrainingError(f"a re-training trial failed: {_last_line(result.error)}")
        final = (result.metrics or {}).get("evaluation_return")
        returns[result.config["candidate"]["trial"]][result.config["seed"]] = float(final)
    candidates = [
        Candidate(trial, values, objective, returns[trial]) for objective, trial, values in top
    ]
    return sorted(candidates, key=lambda candidate: (-candidate.median, -candidate.iqm))


def _run_config(folder: Path, name: str, quiet: bool, keep_every_checkpoint: bool = False) -> Any:
    """Where the trials' state goes; ``keep_every_checkpoint``: population-based training,
    whose exploit step may restore a checkpoint a trial reported several evaluations ago."""
    from ray import tune

    return tune.RunConfig(
        storage_path=str(folder),
        name=name,
        verbose=0 if quiet else 1,
        log_to_file=True,
        # The latest is what a resumed trial continues from; one more in case it is damaged.
        checkpoint_config=tune.CheckpointConfig(num_to_keep=None if keep_every_checkpoint else 2),
    )


def _fit(tuner: Any, folder: Path, quiet: bool) -> Any:
    """``tuner.fit()``, where Ctrl-C or SIGTERM ends the experiment as Ray Tune's own stop
    signal (SIGUSR1) does, its state saved for ``Tuner.restore``: ``SearchInterrupted``. A
    second signal stops at once. (Ray Tune marks the trials it stopped as terminated, so the
    signal itself is what tells an interrupted search from a finished one.) ``quiet``: Ray
    Tune prints nothing (its newer output prints a header and a TensorBoard hint at any
    verbosity; the older one, at verbosity 0, nothing)."""
    with _environment(RAY_AIR_NEW_OUTPUT="0" if quiet else None):
        return _fit_with_signals(tuner, folder)


@contextlib.contextmanager
def _environment(**values: str | None):
    """Environment variables set (None: left as they are) for the block, then restored."""
    previous = {name: os.environ.get(name) for name, value in values.items() if value is not None}
    os.environ.update({name: value for name, value in values.items() if value is not None})
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _fit_with_signals(tuner: Any, folder: Path) -> Any:
    import signal
    import threading

    received: list[signal.Signals] = []

    def on_signal(signum: int, frame: Any) -> None:
        if received:
            raise KeyboardInterrupt
        received.append(signal.Signals(signum))
        os.kill(os.getpid(), signal.SIGUSR1)

    # A hint for Ray's class trainables; drl's trials are functions that resume exactly.
    warnings.filterwarnings("ignore", message="Consider boosting PBT performance")
    if threading.current_thread() is not threading.main_thread():
        return tuner.fit()
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # ours passes it on, and remembers it
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        results = tuner.fit()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        raise SearchInterrupted(received[0].name, int(received[0]), folder)
    return results


def _trial_name(trial: Any, first: int) -> str:
    """``trial_<n>``: the search's trial number (the start of Ray Tune's experiment tag, which
    counts from 0 or 1 by searcher: ``first`` shifts it to 1)."""
    return f"trial_{int(trial.experiment_tag.split('_', 1)[0]) + first:03d}"


def _retrain_name(trial: Any) -> str:
    return seeded_name(trial.config["candidate"]["trial"], trial.config["seed"])


def _retrain_trial(params: dict[str, Any], plan: TrialPlan, experiment_folder: Path) -> None:
    values = {"values": params["candidate"]["values"], "seed": params["seed"]}
    run_trial(values, plan, experiment_folder, "seed")


def _searcher(settings):
    if settings.searcher == "random":
        from ray.tune.search.basic_variant import BasicVariantGenerator

        return BasicVariantGenerator(random_state=settings.seed)
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(logging.WARNING)
    return OptunaSearch(sampler=optuna.samplers.TPESampler(seed=settings.seed))


def _scheduler(plan: TrialPlan):
    if plan.settings.scheduler == "none":
        return None
    if plan.settings.scheduler == "pbt":
        return _population_based_training(plan)
    from drlcli.tune.schedulers import ResumableASHAScheduler

    return ResumableASHAScheduler(
        time_attr="env_steps",
        max_t=plan.env_steps,
        grace_period=plan.evaluation_interval * plan.settings.grace_evaluations,
        reduction_factor=2,
    )


def _exploit_count(trial_folder: Path) -> int:
    record = trial_folder / EXPLOITS_FILE
    return len(record.read_text().splitlines()) - 1 if record.exists() else 0


def _state(metrics: dict[str, Any], plan: TrialPlan) -> str:
    steps = metrics.get("env_steps") or 0
    return "finished" if steps >= plan.env_steps else "stopped early"


def _plain(value: Any) -> Any:
    return value if isinstance(value, PRIMITIVE) else str(value)


def _last_line(error: Any) -> str:
    """A trial's error in one line: the last of Ray's traceback, which names the error."""
    text = str(error).strip()
    return text.splitlines()[-1] if text else type(error).__name__


def _population_based_training(plan: TrialPlan):
    """Ray Tune's PBT over every searched key: at a perturbation, a value is drawn again from
    its distribution (a quarter of the time) or moved (a range: times 0.8 or 1.2, kept inside
    the range; a choice: to a neighbouring choice), each draw from the search's seed. A resumed
    search's scheduler takes up where its trials stopped (``drlcli.tune.schedulers``)."""
    from drlcli.tune.schedulers import ResumablePopulationBasedTraining

    space = tune_space(plan.dimensions)
    mutations = {
        dimension.key: (
            list(space[dimension.key].categories)
            if dimension.kind == "choice"
            else space[dimension.key]
        )
        for dimension in plan.dimensions
    }
    return ResumablePopulationBasedTraining(
        time_attr="env_steps",
        perturbation_interval=plan.evaluation_interval * plan.settings.perturbation_evaluations,
        hyperparam_mutations=mutations,
        quantile_fraction=plan.settings.quantile_fraction,
        custom_explore_fn=functools.partial(clip_to_space, dimensions=plan.dimensions),
        synch=plan.settings.synchronous,
        seed=plan.settings.seed,
        end=plan.env_steps,
    )


def clip_to_space(values: dict[str, Any], dimensions: Any) -> dict[str, Any]:
    """Population-based training's perturbed values, each range's kept inside it."""
    for dimension in dimensions:
        if dimension.kind != "choice":
            clipped = min(max(values[dimension.key], dimension.low), dimension.high)
            values[dimension.key] = int(clipped) if dimension.kind == "int" else clipped
    return values

"""The ``search:`` section of a space file: how ``drl tune`` searches. Pure: no Ray."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from drlcli.config import Config, build_section
from drlcli.config_fields import in_range, one_of, positive
from drlcli.errors import ConfigError
from drlcli.seed_statistics import default_aggregate


@dataclass(frozen=True)
class SearchSettings:
    """How a search runs (the ``search:`` section of the space file; every key optional)."""

    trials: int = field(default=8, metadata=positive())
    """Trials sampled from the space."""
    trial_env_steps: int | None = field(default=None, metadata=positive())
    """Each trial's budget in env steps; null: the config's total_env_steps."""
    evaluations_per_trial: int = field(default=10, metadata=positive())
    """Deterministic evaluations spread over a trial (the config's own interval wins when it
    sets one); the objective and the pruning decisions are taken at these points."""
    objective_evaluations: int = field(default=3, metadata=positive())
    """The objective: the mean return of a trial's last this many evaluations (its final one
    included), not of one noisy evaluation; unset, at most ``evaluations_per_trial``."""
    seeds_per_trial: int = field(default=1, metadata=positive())
    """Seeds each trial trains its values on, side by side in the trial's CPUs: the config's
    env.seed and the next ones. The objective is then ``objective_aggregate`` over the seeds
    of each seed's objective, at each evaluation point once every seed reached it."""
    objective_aggregate: str | None = field(default=None, metadata=one_of("iqm", "mean", "median"))
    """How the seeds' objectives make the trial's: iqm (the interquartile mean), mean or
    median; null: iqm from 4 seeds, else mean."""
    searcher: str = field(default="optuna", metadata=one_of("optuna", "random"))
    """optuna: Optuna's TPE sampler; random: independent uniform draws (the default, and the
    only one, under population-based training, which samples its population at once)."""
    scheduler: str = field(default="asha", metadata=one_of("asha", "pbt", "none"))
    """asha: stop trials below the better half at each rung (successive halving, asynchronous);
    pbt: population-based training (Jaderberg et al. 2017): every ``perturbation_evaluations``
    a trial in the bottom ``quantile_fraction`` continues from the checkpoint of one in the top
    (drl's exact resume) with its values perturbed; none: every trial runs its whole budget."""
    grace_evaluations: int = field(default=3, metadata=positive())
    """ASHA: no trial is stopped before this many evaluations."""
    perturbation_evaluations: int = field(default=2, metadata=positive())
    """PBT: evaluations between a trial's perturbations."""
    quantile_fraction: float = field(default=0.25, metadata=in_range(0.0, 0.5, low_open=True))
    """PBT: the fraction of trials at the bottom that exploit one of the same fraction at the
    top."""
    synchronous: bool = False
    """PBT: perturb the population together once every trial reached the point (repeatable;
    each trial waits there, and resumes from its checkpoint); false: each trial as it reaches
    it, against the others' latest results."""
    cpus_per_trial: float = field(default=1.0, metadata=in_range(0.0, low_open=True))
    """CPUs Ray reserves for each trial, shared by its rollout actors, learners and evaluator;
    trials run in parallel as the cluster's CPUs allow."""
    seed: int = field(default=0, metadata=in_range(0))
    """The searcher's seed (the trials train on the config's env.seed)."""
    retrain_top: int = field(default=2, metadata=in_range(0))
    """The best this many trials are trained again on ``retrain_seeds`` before a winner is
    named; 0: the winner is the best trial as searched."""
    retrain_seeds: tuple[int, ...] = field(default=(1000, 1001, 1002), metadata=in_range(0))
    """Seeds for the re-training, never the one the search trained on."""


def parse_search_settings(raw: Any, config: Config, where: str = "search") -> SearchSettings:
    """Check a ``search:`` mapping (None: all defaults) against the config it searches.

    Raises:
        ConfigError: naming ``where.key``.
    """
    raw = {} if raw is None else raw
    population_based = isinstance(raw, dict) and raw.get("scheduler") == "pbt"
    if population_based and raw.get("searcher", "random") != "random":
        raise ConfigError(
            f"{where}.searcher: population-based training samples its whole population at "
            "once, which a searcher that proposes trials one by one cannot do: leave searcher "
            "out or set it to random"
        )
    settings = build_section(
        SearchSettings, {"searcher": "random", **raw} if population_based else raw, where
    )
    if isinstance(raw, dict) and "objective_evaluations" not in raw:  # the default, at most
        settings = dataclasses.replace(
            settings,
            objective_evaluations=min(
                settings.objective_evaluations, settings.evaluations_per_trial
            ),
        )
    if settings.objective_aggregate is None:
        settings = dataclasses.replace(
            settings, objective_aggregate=default_aggregate(settings.seeds_per_trial)
        )
    if settings.retrain_top and not settings.retrain_seeds:
        raise ConfigError(f"{where}.retrain_seeds: give seeds to re-train on, or retrain_top: 0")
    searched = search_seeds(config.env.seed, settings.seeds_per_trial)
    seen = [seed for seed in settings.retrain_seeds if seed in searched]
    if seen:
        which = (
            "the config's env.seed"
            if len(searched) == 1
            else f"one of the seeds the trials train on ({searched[0]}-{searched[-1]})"
        )
        raise ConfigError(
            f"{where}.retrain_seeds: {seen[0]} is {which}, which the search trains on; "
            "re-training must use seeds the search never saw"
        )
    if len(set(settings.retrain_seeds)) != len(settings.retrain_seeds):
        raise ConfigError(f"{where}.retrain_seeds: a seed is repeated")
    if settings.objective_evaluations > settings.evaluations_per_trial:
        raise ConfigError(
            f"{where}.objective_evaluations: {settings.objective_evaluations} is more than "
            f"evaluations_per_trial ({settings.evaluations_per_trial})"
        )
    return settings


def search_seeds(first: int, count: int) -> tuple[int, ...]:
    """The seeds every trial trains on: ``first`` (the config's env.seed) and the next ones."""
    return tuple(range(first, first + count))

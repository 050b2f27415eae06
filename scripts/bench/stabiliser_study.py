"""Do PPO's stabilisers save the seeds a preset loses? hopper_ppo and walker2d_ppo against each
stabiliser alone and the best combination, on seeds the presets were never chosen on.

    python scripts/bench/stabiliser_study.py hopper --hours 2 --commit   # what fits in 2 hours
    python scripts/bench/stabiliser_study.py hopper --variants combination
    python scripts/bench/stabiliser_study.py hopper --report             # the table, no training
    drl compare docs/results/data/stabilisers/hopper                     # IQM curves, P(improve)

Variants, each the preset (``hopper_ppo``, ``walker2d_ppo``: 1M env steps, its evaluations)
with one change:

- ``preset``: unchanged;
- ``normalize_value``: value targets standardised by running statistics (rl_games);
- ``adaptive_kl``: ``learning_rate_schedule: adaptive_kl``, ``desired_kl: 0.01`` (rsl_rl);
- ``last_layer``: ``policy_last_layer_scale: 0.01`` (Andrychowicz et al. 2021);
- ``recompute``: ``recompute_advantages_per_epoch: true`` (Tianshou);
- ``rpo``: ``rpo_alpha: 0.5`` (CleanRL's ``rpo_continuous_action``);
- ``combination``: every single stabiliser whose IQM over the recorded seeds is above the
  preset's (decided from the record when it is run; refused before those seeds are recorded).

Seeds 5000-5004 by default (the presets were chosen on 0-4 and measured on 1000-1004; 6000-6004
are kept for the interval rule's confirmation). Runs go seed by seed, every variant of a seed
before the next, so a study cut short compares the variants on the same seeds. Each finished
run is recorded under ``docs/results/data/stabilisers/<task>/`` (``study_runs.StudyRecord``;
``--commit`` commits it at once); a recorded run is skipped, so a second sitting goes on where
the first stopped. ``--hours`` starts no run that the record's median run time says would
end after the deadline.

``--report`` prints per variant the seeds, the IQM with its 95% stratified-bootstrap interval
(``drl compare``'s), the worst seed and the fraction of seeds under 2500, as a Markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from study_runs import REPOSITORY, Deadline, StudyRecord, run_drl

TASKS = {"hopper": "hopper_ppo", "walker2d": "walker2d_ppo"}
SINGLES: dict[str, dict[str, Any]] = {
    "normalize_value": {"normalize_value": True},
    "adaptive_kl": {"learning_rate_schedule": "adaptive_kl", "desired_kl": 0.01},
    "last_layer": {"policy_last_layer_scale": 0.01},
    "recompute": {"recompute_advantages_per_epoch": True},
    "rpo": {"rpo_alpha": 0.5},
}
VARIANTS = ("preset", *SINGLES, "combination")
FAILED_BELOW = 2500.0
STUDY_SEEDS = [5000, 5001, 5002, 5003, 5004]


def combination(record: StudyRecord, seeds: list[int]) -> list[str]:
    """The single stabilisers whose IQM over ``seeds`` is above the preset's.

    Raises:
        SystemExit: a single variant or the preset lacks one of ``seeds``.
    """
    from drlcli.seed_statistics import interquartile_mean

    iqm = {}
    for variant in ("preset", *SINGLES):
        returns = record.returns(variant)
        missing = [seed for seed in seeds if seed not in returns]
        if missing:
            sys.exit(f"combination: {variant} lacks seeds {missing}; run the singles first")
        iqm[variant] = float(interquartile_mean([returns[seed] for seed in seeds]))
    return [name for name in SINGLES if iqm[name] > iqm["preset"]]


def variant_config(task: str, variant: str, seed: int, output: Path, changes: dict[str, Any]):
    """The preset's config with ``changes`` to its ``algo_params``, on ``seed``."""
    from drlcli.preset_catalog import find_preset

    base = find_preset(TASKS[task]).config()
    name = f"{task}_{variant}_seed{seed}"
    return dataclasses.replace(
        base,
        name=name,
        env=dataclasses.replace(base.env, seed=seed),
        algo_params=dataclasses.replace(base.algo_params, **changes),
        output_dir=str(output),
        metrics_path=str(output / f"metrics_{name}.csv"),
    )


def report(record: StudyRecord) -> str:
    """The Markdown table of every recorded variant."""
    from drlcli.seed_statistics import bootstrap_interval, interquartile_mean

    lines = [
        "| variant | seeds | IQM [95% interval] | worst seed | under 2500 |",
        "|---|---|---|---|---|",
    ]
    for variant in VARIANTS:
        returns = record.returns(variant)
        if not returns:
            continue
        values = list(returns.values())
        worst_seed = min(returns, key=returns.get)
        iqm = float(interquartile_mean(values))
        if len(values) >= 2:
            interval = bootstrap_interval([values])
            figure = f"{iqm:.0f} [{interval.low:.0f}, {interval.high:.0f}]"
        else:
            figure = f"{iqm:.0f}"
        failed = sum(value < FAILED_BELOW for value in values)
        lines.append(
            f"| {variant} | {len(values)} | {figure} | {returns[worst_seed]:.0f} "
            f"(seed {worst_seed}) | {failed}/{len(values)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=STUDY_SEEDS)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["preset", *SINGLES])
    parser.add_argument("--hours", type=float, default=None, help="start no run past this")
    parser.add_argument("--steps", type=int, default=None, help="override the presets' budget")
    parser.add_argument("--commit", action="store_true", help="git commit each recorded run")
    parser.add_argument("--report", action="store_true", help="print the table; train nothing")
    parser.add_argument("--output-dir", type=Path, default=Path("output/stabiliser_study"))
    parser.add_argument(
        "--results",
        type=Path,
        default=REPOSITORY / "docs/results/data/stabilisers",
        help="where the finished runs are recorded (a smoke test's: elsewhere)",
    )
    args = parser.parse_args()
    record = StudyRecord(args.results / args.task, commit_each_run=args.commit)
    if args.report:
        print(report(record))
        return
    output = args.output_dir / args.task
    output.mkdir(parents=True, exist_ok=True)
    deadline = Deadline(args.hours, first_guess_s=600.0)
    for seed in args.seeds:
        for variant in args.variants:
            if (variant, seed) in record.done():
                print(f"{variant} seed {seed}: recorded, skipped", flush=True)
                continue
            if not deadline.allows(record):
                print(f"deadline: {variant} seed {seed} and later runs left for another sitting")
                print(report(record))
                return
            extra: dict[str, Any] = {}
            if variant == "combination":
                extra["stabilisers"] = combination(record, args.seeds)
                changes = {
                    key: value
                    for name in extra["stabilisers"]
                    for key, value in SINGLES[name].items()
                }
            else:
                changes = SINGLES.get(variant, {})
            config = variant_config(args.task, variant, seed, output, changes)
            if args.steps is not None:
                config = dataclasses.replace(config, total_env_steps=args.steps)
            record.add(variant, seed, run_drl(config), **extra)
    print(report(record))


if __name__ == "__main__":
    main()

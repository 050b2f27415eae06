"""Learning evidence: train a preset for a budget and several seeds, then evaluate.

    python scripts/bench/learning.py configs/quickstart.yaml --seeds 0 1 2
    python scripts/bench/learning.py configs/hopper_ppo.yaml --steps 1000000 --seeds 0 1 2

For each seed: train (local Ray), then run the final checkpoint and the best one (chosen by
the run's periodic evaluations, or by training return without them) deterministically
(transform(mean)) for --episodes episodes on environments seeded apart from the run's own
evaluations. Prints per-seed returns and wall-clock, then, for the final policy, the best
checkpoint and the run's own final evaluation (the figure ``drl tune`` ranks its re-trained
candidates by), the median, the interquartile mean with its 95% bootstrap interval (from 2 seeds)
and the worst seed.
``drl compare OUTPUT_DIR`` draws the runs' curves afterwards (with --output-dir).
Outputs go to a temporary folder unless --output-dir is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from drlcli.checkpoints.policy import load_play_actor
from drlcli.config import load_config, with_seed
from drlcli.evaluation import run_episodes
from drlcli.runtime.training import train
from drlcli.seed_statistics import bootstrap_interval, interquartile_mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="override total_env_steps")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes")
    parser.add_argument("--output-dir", type=Path, default=None)
    args = parser.parse_args()

    base = load_config(args.config)
    output_root = args.output_dir or Path(tempfile.mkdtemp(prefix="drl-bench-"))
    console = Console()
    rows = []
    base = dataclasses.replace(
        base, total_env_steps=args.steps or base.total_env_steps, output_dir=str(output_root)
    )
    base = dataclasses.replace(base, metrics_path=base.default_metrics_path)
    for seed in args.seeds:
        config = with_seed(base, seed)  # drl train --seed's: env.seed, <name>_seed<N>
        started = time.perf_counter()
        summary = train(config, quiet=True, console=Console(quiet=True))
        wall = time.perf_counter() - started
        final_return = _evaluate(summary.checkpoint_path, args.episodes, seed)
        best_path = summary.best_checkpoint_path
        best_return = (
            final_return if best_path is None else _evaluate(best_path, args.episodes, seed)
        )
        # The run's own final evaluation (its evaluation seeds): what drl tune ranks by.
        run_final = summary.final_evaluation.return_mean
        rows.append((seed, wall, final_return, best_return, run_final))
        console.print(
            f"seed {seed}: {summary.env_steps} env steps in {wall:.1f} s (Ray start included); "
            f"last training return {summary.last_return:.1f}; deterministic evaluation over "
            f"{args.episodes} episodes: final policy {final_return:.1f}, best checkpoint "
            f"({summary.best_criterion}) {best_return:.1f}; the run's final evaluation "
            f"{run_final:.1f}",
            highlight=False,
        )
    seeds = [row[0] for row in rows]
    columns = (("final policy", 2), ("best checkpoint", 3), ("run's final evaluation", 4))
    for label, column in columns:
        returns = [row[column] for row in rows]
        worst = min(range(len(rows)), key=lambda i: returns[i])
        interval = f" {bootstrap_interval([returns])}" if len(returns) > 1 else ""
        console.print(
            f"{base.name} ({base.env.id}), {label}: median deterministic evaluation return "
            f"{statistics.median(returns):.1f}, IQM {float(interquartile_mean(returns)):.1f}"
            f"{interval}, worst {returns[worst]:.1f} (seed {seeds[worst]}), "
            f"returns {' / '.join(f'{r:.0f}' for r in returns)} over seeds {seeds}",
            highlight=False,
        )
    console.print(
        f"median wall-clock {statistics.median(row[1] for row in rows):.1f} s", highlight=False
    )


def _evaluate(checkpoint: Path, episodes: int, seed: int) -> float:
    """Mean return of ``episodes`` deterministic episodes, seeded apart from training's own."""
    policy = load_play_actor(checkpoint)
    results = run_episodes(policy, episodes, seed=10_000 + seed, deterministic=True)
    return statistics.fmean(result.episode_return for result in results)


if __name__ == "__main__":
    main()

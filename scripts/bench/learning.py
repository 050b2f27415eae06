"""Learning evidence: train a preset for a budget and several seeds, then evaluate.

    python scripts/bench/learning.py configs/quickstart.yaml --seeds 0 1 2
    python scripts/bench/learning.py configs/hopper_ppo.yaml --steps 1000000 --seeds 0 1 2

For each seed: train (local Ray), then run the final checkpoint deterministically
(transform(mean)) for --episodes episodes. Prints per-seed return and wall-clock, then the
median over seeds. Outputs go to a temporary folder unless --output-dir is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from drlcli.config import load_config
from drlcli.play import load_play_actor, run_episodes
from drlcli.runtime.training import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    for seed in args.seeds:
        name = f"{base.name}_seed{seed}"
        config = dataclasses.replace(
            base,
            name=name,
            env=dataclasses.replace(base.env, seed=seed),
            total_env_steps=args.steps or base.total_env_steps,
            output_dir=str(output_root),
            metrics_path=str(output_root / f"metrics_{name}.csv"),
        )
        started = time.perf_counter()
        summary = train(config, quiet=True, console=Console(quiet=True))
        wall = time.perf_counter() - started
        policy = load_play_actor(summary.checkpoint_path)
        results = run_episodes(policy, args.episodes, seed=10_000 + seed, deterministic=True)
        mean_return = statistics.fmean(r.episode_return for r in results)
        rows.append((seed, summary.env_steps, wall, summary.last_return, mean_return))
        console.print(
            f"seed {seed}: {summary.env_steps} env steps in {wall:.1f} s (Ray start included); "
            f"last training return {summary.last_return:.1f}; deterministic evaluation "
            f"return {mean_return:.1f} over {args.episodes} episodes",
            highlight=False,
        )
    console.print(
        f"{base.name} ({base.env.id}): median deterministic evaluation return "
        f"{statistics.median(r[4] for r in rows):.1f}, median wall-clock "
        f"{statistics.median(r[2] for r in rows):.1f} s over seeds {args.seeds}",
        highlight=False,
    )


if __name__ == "__main__":
    main()

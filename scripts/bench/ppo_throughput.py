"""PPO training throughput against the raw env.step rate of the same environment.

    python scripts/bench/ppo_throughput.py                 # Hopper-v5, configs/hopper_ppo.yaml
    python scripts/bench/ppo_throughput.py --rounds 20 --repeats 3

Measures, in one run: (1) the single-process ``env.step`` rate of the env with random actions
(the baseline), (2) env steps per second of full PPO training with the preset (64x64 tanh,
2048 env steps per round, 10 epochs, 32 minibatches): the steady-state rate, from the end of
the first round to the end of the last (metrics and checkpoint writes between rounds count),
and the end-to-end rate including Ray start-up. Prints the ratio of the steady-state training
SPS to the raw step rate of the same repeat; with --repeats the medians over repeats.
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
from drlcli.envs import make_env
from drlcli.metrics import read_metrics
from drlcli.runtime.training import train


def raw_step_rate(env_id: str, steps: int, seed: int) -> float:
    env = make_env(env_id)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    started = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - started)
    env.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/hopper_ppo.yaml"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--raw-steps", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    console = Console()
    base = load_config(args.config)
    out = Path(tempfile.mkdtemp(prefix="drl-throughput-"))
    per_round = base.num_actors * base.env.num_envs * base.rollout_length
    raw_rates, steady_rates, overall_rates = [], [], []
    for repeat in range(args.repeats):
        raw_rates.append(raw_step_rate(base.env.id, args.raw_steps, seed=repeat))
        config = dataclasses.replace(
            base,
            name=f"throughput{repeat}",
            total_env_steps=per_round * args.rounds,
            output_dir=str(out),
            metrics_path=str(out / f"metrics{repeat}.csv"),
        )
        started = time.perf_counter()
        train(config, quiet=True, console=Console(quiet=True))
        overall_rates.append(config.total_env_steps / (time.perf_counter() - started))
        rows = read_metrics(config.metrics_path)
        steps = float(rows[-1]["env_steps"]) - float(rows[0]["env_steps"])
        seconds = float(rows[-1]["wall_time_s"]) - float(rows[0]["wall_time_s"])
        steady_rates.append(steps / seconds)
        console.print(
            f"repeat {repeat}: raw env.step {raw_rates[-1]:.0f}/s; training steady "
            f"{steady_rates[-1]:.0f} SPS (ratio {steady_rates[-1] / raw_rates[-1]:.2f}); "
            f"end to end with Ray start-up {overall_rates[-1]:.0f} SPS",
            highlight=False,
        )
    raw, steady = statistics.median(raw_rates), statistics.median(steady_rates)
    ratio = statistics.median(s / r for s, r in zip(steady_rates, raw_rates, strict=True))
    console.print(
        f"{base.env.id}, {per_round} env steps/round, {base.num_actors} rollout actors x "
        f"{base.env.num_envs} envs: median raw {raw:.0f} steps/s, median training {steady:.0f} "
        f"SPS, median ratio {ratio:.2f} (target >= 0.50); end to end "
        f"{statistics.median(overall_rates):.0f} SPS",
        highlight=False,
    )


if __name__ == "__main__":
    main()

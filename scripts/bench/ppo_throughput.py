"""PPO training throughput against the bare env.step loop of the same environment.

    python scripts/bench/ppo_throughput.py                 # Hopper-v5, configs/hopper_ppo.yaml
    python scripts/bench/ppo_throughput.py --rounds 20 --repeats 3

Measures, in one run: (1) the single-process ``env.step`` rate with actions drawn before the
timed loop (the baseline: the bare step loop, nothing else in it), (2) env steps per second of
full PPO training with the preset (64x64 tanh policy, 256x256 value network, 2048 env steps per
round, 10 epochs, 32 minibatches; --config for another), with periodic evaluation off and on
(every --eval-every rounds, the preset's episodes): the steady-state rate, from the end of the
first round to the end of the last (metrics and checkpoint writes between rounds count), and the
end-to-end rate including Ray start-up and the final evaluation. Prints the ratio of the steady
training SPS to the bare step rate of the same repeat, and of evaluation on to off; with
--repeats the medians.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from drlcli.config import load_config
from drlcli.envs import make_env
from drlcli.metrics.csv_file import read_metrics
from drlcli.runtime.training import train


def raw_step_rate(env_id: str, steps: int, seed: int) -> float:
    """Steps per second of a bare ``env.step`` loop; the actions are drawn before it."""
    env = make_env(env_id)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    actions = [env.action_space.sample() for _ in range(steps)]
    started = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - started)
    env.close()
    return rate


def train_rates(config: Any) -> tuple[float, float]:
    """(steady-state SPS from the CSV, end-to-end SPS with Ray start-up) of one training."""
    started = time.perf_counter()
    train(config, quiet=True, console=Console(quiet=True))
    overall = config.total_env_steps / (time.perf_counter() - started)
    rows = read_metrics(config.metrics_path)
    steps = float(rows[-1]["env_steps"]) - float(rows[0]["env_steps"])
    seconds = float(rows[-1]["wall_time_s"]) - float(rows[0]["wall_time_s"])
    return steps / seconds, overall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/hopper_ppo.yaml"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--raw-steps", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eval-every", type=int, default=5, help="rounds between evaluations")
    args = parser.parse_args()
    console = Console()
    base = load_config(args.config)
    out = Path(tempfile.mkdtemp(prefix="drl-throughput-"))
    per_round = base.num_actors * base.env.num_envs * base.rollout_length
    raw_rates, ratios, eval_ratios, overall_rates = [], [], [], []
    for repeat in range(args.repeats):
        raw_rates.append(raw_step_rate(base.env.id, args.raw_steps, seed=repeat))
        rates = {}
        for label, interval in (("off", None), ("on", per_round * args.eval_every)):
            config = dataclasses.replace(
                base,
                name=f"throughput{repeat}_eval_{label}",
                total_env_steps=per_round * args.rounds,
                output_dir=str(out),
                metrics_path=str(out / f"metrics{repeat}_eval_{label}.csv"),
                evaluation=dataclasses.replace(base.evaluation, interval_env_steps=interval),
            )
            rates[label] = train_rates(config)
        steady, overall = rates["off"]
        ratios.append(steady / raw_rates[-1])
        eval_ratios.append(rates["on"][0] / steady)
        overall_rates.append(overall)
        console.print(
            f"repeat {repeat}: bare env.step {raw_rates[-1]:.0f}/s; training steady {steady:.0f} "
            f"SPS (ratio {ratios[-1]:.2f}); with evaluation every {args.eval_every} rounds "
            f"{rates['on'][0]:.0f} SPS ({eval_ratios[-1]:.2f} of without); end to end with Ray "
            f"start-up {overall:.0f} SPS",
            highlight=False,
        )
    console.print(
        f"{base.env.id}, {per_round} env steps/round, {base.num_actors} rollout actors x "
        f"{base.env.num_envs} envs: median bare step loop {statistics.median(raw_rates):.0f} "
        f"steps/s, median training/bare ratio {statistics.median(ratios):.2f}, evaluation on/off "
        f"{statistics.median(eval_ratios):.2f}, end to end {statistics.median(overall_rates):.0f} "
        "SPS",
        highlight=False,
    )


if __name__ == "__main__":
    main()

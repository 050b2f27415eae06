"""FlashSAC gradient updates per second for the network sizes of one or more configs.

    python scripts/bench/flash_sac_updates.py configs/hopper_flash_sac_cpu.yaml \\
        configs/hopper_flash_sac.yaml --repeats 3

For each config: build its learner for the config's environment, fill a replay buffer with
random transitions, run warm-up updates, then time --updates updates (one learner iteration
each: critic every time, actor and temperature every actor_update_period) and print the
median updates/s over --repeats, with torch's thread count.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from drlcli.algos.entry_types import LearnerContext, RoundPlan
from drlcli.algos.flash_sac.algorithm import flash_sac_actor_spec
from drlcli.algos.flash_sac.learner import FlashSACLearner
from drlcli.config import Config, load_config
from drlcli.envs import env_facts, make_env
from drlcli.off_policy.replay import TransitionReplay


def random_learner(
    config: Config, total_updates: int, learners: int = 1, seed: int = 0
) -> tuple[FlashSACLearner, TransitionReplay]:
    """A CPU learner of ``config``'s sizes (initialised from seed 0, the same in every call) and
    a replay buffer of random transitions for it, drawn from ``seed``."""
    params = config.algo_params
    facts = env_facts(make_env(config.env.id))
    spec = flash_sac_actor_spec(params, facts.action_low, facts.action_high)
    # The run's env steps that plan ``total_updates`` updates for each of ``learners``.
    env_steps = math.ceil(total_updates * learners / params.updates_per_env_step)
    context = LearnerContext(
        spec, facts, params, config.gamma, env_steps, learners, "cpu", 0, RoundPlan(1, env_steps)
    )
    learner = FlashSACLearner(context)
    rng = np.random.default_rng(seed)
    size = max(params.batch_size * 4, 4096)
    replay = TransitionReplay(size, facts.obs_dim, facts.action_dim, seed)
    replay.add(
        rng.normal(size=(size, facts.obs_dim)),
        rng.uniform(facts.action_low, facts.action_high, (size, facts.action_dim)),
        rng.normal(size=size),
        rng.normal(size=(size, facts.obs_dim)),
        rng.random(size) < 0.01,
    )
    return learner, replay


def measure(path: Path, updates: int, threads: int) -> float:
    config = load_config(path)
    batch_size = config.algo_params.batch_size
    learner, replay = random_learner(config, total_updates=10 * updates)
    torch.set_num_threads(threads)
    for _ in range(4):
        learner.update(replay.sample(batch_size, 1.0, learner.device))
    started = time.perf_counter()
    for _ in range(updates):
        learner.update(replay.sample(batch_size, 1.0, learner.device))
    return updates / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", type=Path, nargs="+")
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    for path in args.configs:
        rates = [measure(path, args.updates, args.threads) for _ in range(args.repeats)]
        params = load_config(path).algo_params
        print(
            f"{path}: actor {params.actor_num_blocks}x{params.actor_hidden_dim}, critic "
            f"{params.critic_num_blocks}x{params.critic_hidden_dim}, batch {params.batch_size}: "
            f"median {statistics.median(rates):.1f} updates/s over {args.repeats} repeats "
            f"({', '.join(f'{r:.1f}' for r in rates)}), {args.threads} torch thread(s)"
        )


if __name__ == "__main__":
    main()

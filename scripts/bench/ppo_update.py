"""PPO's update, one lever at a time: autograd, autograd with the direct Adam kernel, and the
closed-form numpy gradient (what the built-in networks train with).

    python scripts/bench/ppo_update.py                     # configs/hopper_ppo.yaml's sizes
    python scripts/bench/ppo_update.py --repeats 7 --obs-dim 17 --action-dim 6

Each way runs ``Learner.train_step`` in this process, one torch thread, on the same random
round of ``num_actors x num_envs x rollout_length`` transitions (the preset's epochs and
minibatches), after one warm-up round; it prints the median milliseconds per update and per
minibatch step, and each way's speed-up over autograd with ``torch.optim.Adam.step``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from drlcli.algos.ppo.algorithm import gaussian_actor_spec
from drlcli.algos.ppo.learner import Learner
from drlcli.config import load_config


def random_round(size: int, obs_dim: int, action_dim: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((size, obs_dim)).astype(np.float32),
        "act": rng.standard_normal((size, action_dim)).astype(np.float32),
        "logp": (rng.standard_normal(size) - 3.0).astype(np.float32),
        "value": rng.standard_normal(size).astype(np.float32),
        "adv": rng.standard_normal(size).astype(np.float32),
        "ret": rng.standard_normal(size).astype(np.float32),
    }


def update_seconds(learner: Learner, size: int, obs_dim: int, action_dim: int, repeats: int):
    """Median seconds of ``train_step`` over ``repeats`` rounds (after a warm-up round)."""
    seconds = []
    for repeat in range(repeats + 1):
        learner.add(random_round(size, obs_dim, action_dim, seed=repeat))
        started = time.perf_counter()
        learner.train_step(0.1)
        if repeat:
            seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/hopper_ppo.yaml"))
    parser.add_argument("--obs-dim", type=int, default=11, help="Hopper-v5's")
    parser.add_argument("--action-dim", type=int, default=3, help="Hopper-v5's")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the learner process runs
    config = load_config(args.config)
    params = config.algo_params
    size = config.num_actors * config.env.num_envs * config.rollout_length
    steps = params.num_epochs * params.num_minibatches
    spec = gaussian_actor_spec(params, [-1.0] * args.action_dim, [1.0] * args.action_dim)

    def learner(closed_form: bool, adam_kernel: bool) -> Learner:
        built = Learner(spec, args.obs_dim, args.action_dim, params, closed_form=closed_form)
        if not adam_kernel:
            built.flat.adam_step = lambda optimizer: optimizer.step()
        return built

    ways = {
        "autograd, torch.optim.Adam.step": learner(closed_form=False, adam_kernel=False),
        "autograd, direct fused-Adam kernel": learner(closed_form=False, adam_kernel=True),
        "closed form (numpy), direct kernel": learner(closed_form=True, adam_kernel=True),
    }
    baseline = None
    for name, built in ways.items():
        seconds = update_seconds(built, size, args.obs_dim, args.action_dim, args.repeats)
        baseline = baseline or seconds
        print(
            f"{name:36s} {seconds * 1000:6.1f} ms/update {seconds / steps * 1e6:5.0f} "
            f"us/minibatch step  x{baseline / seconds:.2f}"
        )
    print(
        f"{size} transitions, {params.num_epochs} epochs x {params.num_minibatches} minibatches, "
        f"policy {list(params.hidden_sizes)}, value {list(params.value_network_hidden_sizes)} "
        f"{params.activation}, median of {args.repeats}"
    )


if __name__ == "__main__":
    main()

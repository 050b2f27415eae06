"""A user's own MuJoCo robot (``tests.user_robot:PuckReach-v0``, registered from this test
package, not a Gymnasium built-in) learns with drl's PPO defaults in a short budget.

Its observation mixes centimetres, metres per second and millimetres, as a robot's sensors do:
the case drl's observation statistics exist for. The quickstart's settings otherwise, 16384 env
steps (8 rounds); the final deterministic evaluation of 10 episodes is the figure. Measured here
(seeds 0-2): defaults about -12 (median), without observation normalisation about -30, a uniformly
random policy about -67, a hand-written proportional controller about -8.
"""

from __future__ import annotations

import os
import statistics

import gymnasium
import numpy as np
import pytest
from rich.console import Console

from drlcli.config import config_from_dict
from drlcli.runtime.training import train
from drlcli.topology import AvailableDevices
from tests import user_robot

pytestmark = pytest.mark.usefixtures("ray_cluster")
ENV_ID = f"tests.user_robot:{user_robot.ENV_ID}"
SEEDS = (0, 1, 2)


def random_policy_return(episodes: int = 10) -> float:
    env = gymnasium.make(ENV_ID)
    env.action_space.seed(0)
    returns = []
    for episode in range(episodes):
        env.reset(seed=1000 + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def final_evaluation(tmp_path, seed: int, **algo_params) -> float:
    config = config_from_dict(
        {
            "algo": "ppo",
            "env": {"id": ENV_ID, "num_envs": 4, "seed": seed},
            "total_env_steps": 16384,
            "rollout_length": 512,
            "output_dir": str(tmp_path / f"seed{seed}_{sorted(algo_params.items())}"),
            "algo_params": algo_params,
        },
        default_name=f"puck{seed}",
    )
    with open(os.devnull, "w") as sink:
        summary = train(
            config,
            quiet=True,
            console=Console(file=sink),
            devices=AvailableDevices(cuda_devices=0, mps=False),
        )
    assert summary.final_evaluation is not None
    return summary.final_evaluation.return_mean


def test_a_users_robot_learns_with_the_defaults_on_every_seed(tmp_path):
    random_return = random_policy_return()
    assert random_return < -50  # the task is not solved by chance
    defaults = [final_evaluation(tmp_path, seed) for seed in SEEDS]
    raw = [final_evaluation(tmp_path, seed, normalize_observations=False) for seed in SEEDS]
    # Well above a random policy on every seed, and by far on the median seed.
    assert min(defaults) > 0.7 * random_return, (defaults, random_return)
    assert statistics.median(defaults) > 0.4 * random_return, (defaults, random_return)
    # The statistics help on a robot whose sensors differ in scale; they must never hurt.
    assert statistics.median(defaults) >= statistics.median(raw), (defaults, raw)

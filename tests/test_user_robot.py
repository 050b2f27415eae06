"""A user's own MuJoCo robot (``tests.user_robot:PuckReach-v0``, registered from this test
package, not a Gymnasium built-in) trains with drl's PPO defaults.

Its observation mixes centimetres, metres per second and millimetres, as a robot's sensors do:
the case drl's observation statistics exist for. That it learns in 16384 env steps on every seed
(about -12 against -67 for a random policy; -30 without the statistics) is a learning claim,
checked by ``scripts/bench/learning_claims.py user-robot``; here one round trains, and the
statistics it records hold the sensors' scales apart.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from rich.console import Console

from drlcli.checkpoints.audit import audit_checkpoint
from drlcli.checkpoints.files import read_checkpoint
from drlcli.config import config_from_dict
from drlcli.runtime.training import train
from drlcli.topology import AvailableDevices
from tests import user_robot

ENV_ID = f"tests.user_robot:{user_robot.ENV_ID}"


def test_a_random_policy_does_not_solve_the_task():
    assert user_robot.random_policy_return(episodes=5) < -50


@pytest.mark.usefixtures("ray_cluster")
def test_a_users_robot_runs_a_round_with_the_defaults_and_its_statistics_see_each_sensors_scale(
    tmp_path,
):
    config = config_from_dict(
        {
            "algo": "ppo",
            "env": {"id": ENV_ID, "num_envs": 4, "seed": 0},
            "total_env_steps": 2048,
            "rollout_length": 512,
            "output_dir": str(tmp_path / "out"),
        },
        default_name="puck",
    )
    with open(os.devnull, "w") as sink:
        summary = train(
            config,
            quiet=True,
            console=Console(file=sink),
            devices=AvailableDevices(cuda_devices=0, mps=False),
        )
    assert summary.rounds == 1 and summary.final_evaluation is not None
    assert math.isfinite(summary.final_evaluation.return_mean)
    assert not audit_checkpoint(config.checkpoint_path).failed
    # The range to the target in mm against the velocity in m/s: the standard
    # deviations the policy's inputs are divided by differ by orders of magnitude.
    std = np.sqrt(np.asarray(read_checkpoint(config.checkpoint_path).obs_rms_state["var"]))
    assert std[8] > 100 * std[2:4].max(), std

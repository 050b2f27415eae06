"""A user's own MuJoCo robot, outside gymnasium's built-ins: ``tests.user_robot:PuckReach-v0``.

Two motors push a puck on a table towards a target placed at random on each reset. The
observation mixes units as a robot's sensors do (position in centimetres, velocity in metres per
second, the range to the target in millimetres), so its features differ in scale by a factor of
several hundred; reward ``-distance [m] - 0.05 |a|^2`` per step, 200-step episodes. Importing this
module registers the id (gymnasium imports it for the ``module:`` prefix, in every process).
"""

from __future__ import annotations

from pathlib import Path

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

ENV_ID = "PuckReach-v0"
MODEL = Path(__file__).with_name("puck.xml")


class PuckReachEnv(MujocoEnv):
    metadata = {"render_modes": ["human", "rgb_array", "depth_array"], "render_fps": 50}

    def __init__(self, render_mode: str | None = None, target_range: float = 0.35) -> None:
        self.target_range = target_range
        observation_space = spaces.Box(-np.inf, np.inf, shape=(9,), dtype=np.float64)
        super().__init__(str(MODEL), 1, observation_space, render_mode=render_mode)

    def _target(self) -> np.ndarray:
        return self.data.mocap_pos[0, :2]

    def _get_obs(self) -> np.ndarray:
        position_cm = self.data.qpos[:2] * 100.0
        target_cm = self._target() * 100.0
        range_mm = np.linalg.norm(self.data.qpos[:2] - self._target()) * 1000.0
        return np.concatenate(
            [position_cm, self.data.qvel[:2], target_cm, target_cm - position_cm, [range_mm]]
        )

    def step(self, action):
        action = np.clip(action, -1.0, 1.0)
        self.do_simulation(action, self.frame_skip)
        distance = float(np.linalg.norm(self.data.qpos[:2] - self._target()))
        reward = -distance - 0.05 * float(np.square(action).sum())
        return self._get_obs(), reward, False, False, {"distance": distance}

    def reset_model(self) -> np.ndarray:
        qpos = self.init_qpos + self.np_random.uniform(-0.05, 0.05, size=self.model.nq)
        self.set_state(qpos, np.zeros(self.model.nv))
        target = self.np_random.uniform(-self.target_range, self.target_range, size=2)
        self.data.mocap_pos[0, :2] = target
        return self._get_obs()


def random_policy_return(episodes: int) -> float:
    """Mean return of uniformly random actions over ``episodes`` seeded episodes: what a
    policy must beat to have learned anything."""
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


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=PuckReachEnv, max_episode_steps=200)

"""A task whose observation is a nested ``Dict``, as robotics packages report theirs.

``drltest/DictReach-v0``: a point mass in the plane pushed by its action toward a target.
Observation ``{"agent": {"position": [2], "velocity": [2]}, "target": [2], "time_left": []}``
(a scalar part too, as dm_control has); reward ``-|position - target|``; episodes of 40 steps;
``info["is_success"]`` once the mass is within 0.1 of the target. Imported by the tests that
need it (registration is per process).
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

DICT_REACH_ID = "drltest/DictReach-v0"
EPISODE_STEPS = 40


class DictReachEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, render_mode: str | None = None) -> None:
        plane = spaces.Box(-5.0, 5.0, shape=(2,), dtype=np.float64)
        self.observation_space = spaces.Dict(
            {
                "target": plane,
                "agent": spaces.Dict({"velocity": plane, "position": plane}),
                "time_left": spaces.Box(0.0, 1.0, shape=(), dtype=np.float64),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.position, self.velocity, self.target = np.zeros(2), np.zeros(2), np.zeros(2)
        self.steps = 0

    def _observation(self) -> dict:
        return {
            "target": self.target.copy(),
            "agent": {"velocity": self.velocity.copy(), "position": self.position.copy()},
            "time_left": np.array(1.0 - self.steps / EPISODE_STEPS),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1.0, 1.0, size=2)
        self.velocity = np.zeros(2)
        self.target = self.np_random.uniform(-1.0, 1.0, size=2)
        self.steps = 0
        return self._observation(), {}

    def step(self, action):
        self.steps += 1
        self.velocity = 0.8 * self.velocity + 0.1 * np.clip(np.asarray(action, np.float64), -1, 1)
        self.position = np.clip(self.position + self.velocity, -5.0, 5.0)
        distance = float(np.linalg.norm(self.position - self.target))
        info = {"is_success": distance < 0.1}
        return self._observation(), -distance, False, self.steps >= EPISODE_STEPS, info


if DICT_REACH_ID not in gymnasium.registry:
    gymnasium.register(DICT_REACH_ID, entry_point=DictReachEnv)

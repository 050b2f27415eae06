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


HIDDEN_BONUS_ID = "drltest/HiddenBonus-v0"
BONUS_EPISODE_STEPS = 4


class HiddenBonusEnv(gymnasium.Env):
    """A task where a privileged critic helps: match a target with the action, reward
    ``-(action - target)^2`` plus a per-episode ``bonus`` (uniform in ``[-bonus_scale,
    bonus_scale]``, the same at every step) that no action changes; episodes end (terminate)
    after ``episode_steps``. Observation ``{"target": [1], "bonus": [1], "time_left": [1]}``: a
    policy that reads the target alone can act perfectly, but a critic that does not see the
    bonus cannot explain it in any return, so its advantages are mostly noise."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        render_mode: str | None = None,
        bonus_scale: float = 10.0,
        episode_steps: int = BONUS_EPISODE_STEPS,
    ) -> None:
        self.bonus_scale, self.episode_steps = bonus_scale, episode_steps
        self.observation_space = spaces.Dict(
            {
                "target": spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float64),
                "bonus": spaces.Box(-bonus_scale, bonus_scale, shape=(1,), dtype=np.float64),
                "time_left": spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float64),
            }
        )
        # Wide bounds: a Gaussian policy's clipped samples would otherwise move its best mean
        # past the target.
        self.action_space = spaces.Box(-3.0, 3.0, shape=(1,), dtype=np.float32)
        self.target, self.bonus, self.steps = np.zeros(1), np.zeros(1), 0

    def _observation(self) -> dict:
        time_left = np.array([1.0 - self.steps / self.episode_steps])
        return {"target": self.target.copy(), "bonus": self.bonus.copy(), "time_left": time_left}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.bonus = self.np_random.uniform(-self.bonus_scale, self.bonus_scale, size=1)
        self.target = self.np_random.uniform(-1.0, 1.0, size=1)
        self.steps = 0
        return self._observation(), {}

    def step(self, action):
        self.steps += 1
        error = float(np.clip(np.asarray(action, np.float64), -3, 3)[0] - self.target[0])
        reward = -(error**2) + float(self.bonus[0])
        self.target = self.np_random.uniform(-1.0, 1.0, size=1)
        return self._observation(), reward, self.steps >= self.episode_steps, False, {}


if HIDDEN_BONUS_ID not in gymnasium.registry:
    gymnasium.register(HIDDEN_BONUS_ID, entry_point=HiddenBonusEnv)

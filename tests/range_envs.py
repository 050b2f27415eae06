"""A small continuous-control task with a configurable action box, for action-range tests.

``gymnasium.make("drltest/Ranged-v0", low=[...], high=[...])``: 3 observations, reward
``-|a - centre|``, episodes of 50 steps. Imported by the tests that need it (registration is
per process).
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

ENV_ID = "drltest/Ranged-v0"


class RangedEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, low: list[float], high: list[float], render_mode: str | None = None) -> None:
        self.action_space = spaces.Box(np.float32(low), np.float32(high), dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float64)
        self.centre = (np.float64(low) + np.float64(high)) / 2
        self.state = np.zeros(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.normal(size=3)
        return self.state.copy(), {}

    def step(self, action):
        self.state = 0.9 * self.state + self.np_random.normal(scale=0.1, size=3)
        reward = -float(np.abs(np.asarray(action) - self.centre).sum())
        return self.state.copy(), reward, False, False, {}


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=RangedEnv, max_episode_steps=50)


NAN_ENV_ID = "drltest/NaNAfter-v0"


class NaNAfterEnv(gymnasium.Env):
    """Emits a NaN observation or reward from its ``after``-th step on (a broken simulator), or
    with ``what: reset`` a NaN first observation."""

    metadata = {"render_modes": []}

    def __init__(self, after: int, what: str, render_mode: str | None = None) -> None:
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float64)
        self.after, self.what, self.steps = after, what, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        obs = self.np_random.normal(size=3)
        if self.what == "reset":
            obs[2] = np.nan
        return obs, {}

    def step(self, action):
        self.steps += 1
        obs, reward = self.np_random.normal(size=3), 1.0
        if self.steps >= self.after:
            if self.what == "obs":
                obs[1] = np.nan
            else:
                reward = float("nan")
        return obs, reward, False, self.steps % 25 == 0, {}


if NAN_ENV_ID not in gymnasium.registry:
    gymnasium.register(NAN_ENV_ID, entry_point=NaNAfterEnv)


DIE_ENV_ID = "drltest/DieAt-v0"


def _claim(path: str) -> bool:
    """Create ``path``; False where another process already did."""
    import os

    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class _AtStepEnv(gymnasium.Env):
    """3 noise observations, reward ``-|a|``, truncated every 25 steps; ``at_step_reached`` runs
    at its ``at_step``-th step, counted from when it was made (its process's start): the fault
    of the subclasses below."""

    metadata = {"render_modes": []}

    def __init__(self, at_step: int) -> None:
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float64)
        self.at_step, self.steps = at_step, 0

    def at_step_reached(self) -> None:
        raise NotImplementedError

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.normal(size=3), {}

    def step(self, action):
        self.steps += 1
        if self.steps == self.at_step:
            self.at_step_reached()
        reward = -float(np.abs(action).sum())
        return self.np_random.normal(size=3), reward, False, self.steps % 25 == 0, {}


class DieAtEnv(_AtStepEnv):
    """Kills its own process with SIGKILL at its ``at_step``-th step: a rollout actor that dies
    in the middle of a round. With ``marker`` (a file path) only the first process to get there
    dies (it creates the file); without, every process that gets there dies."""

    def __init__(self, at_step: int, marker: str | None = None, render_mode=None) -> None:
        super().__init__(at_step)
        self.marker = marker

    def at_step_reached(self) -> None:
        import os
        import signal

        if self.marker is None or _claim(self.marker):
            os.kill(os.getpid(), signal.SIGKILL)


if DIE_ENV_ID not in gymnasium.registry:
    gymnasium.register(DIE_ENV_ID, entry_point=DieAtEnv)


IMPROVING_ENV_ID = "drltest/Improving-v0"


class ImprovingEnv(gymnasium.Env):
    """Reward ``steps / 100`` where ``steps`` counts this instance's steps since it was made:
    every round's mean training return is higher than the previous one's (each round a best);
    after ``peak_step`` steps the reward is -1 (every later round is worse than all before).
    Episodes of 8 steps."""

    metadata = {"render_modes": []}

    def __init__(self, peak_step: int | None = None, render_mode: str | None = None) -> None:
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float64)
        self.steps, self.peak_step = 0, peak_step

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.normal(size=3), {}

    def step(self, action):
        self.steps += 1
        past_peak = self.peak_step is not None and self.steps > self.peak_step
        reward = -1.0 if past_peak else self.steps / 100.0
        return self.np_random.normal(size=3), reward, False, False, {}


if IMPROVING_ENV_ID not in gymnasium.registry:
    gymnasium.register(IMPROVING_ENV_ID, entry_point=ImprovingEnv, max_episode_steps=8)


DIE_TWICE_ENV_ID = "drltest/DieTwice-v0"


class DieTwiceEnv(_AtStepEnv):
    """Kills its process with SIGKILL twice: at its ``at_step``-th step (the first process to
    get there, marker ``<marker_dir>/first``), then when the next process makes it (marker
    ``second``): a rollout actor that dies, then dies again while it is being restarted and
    restored. Steps count from the process's start."""

    def __init__(self, at_step: int, marker_dir: str, render_mode=None) -> None:
        import os
        import signal

        super().__init__(at_step)
        self.marker_dir = marker_dir
        if os.path.exists(os.path.join(marker_dir, "first")) and _claim(
            os.path.join(marker_dir, "second")
        ):
            os.kill(os.getpid(), signal.SIGKILL)

    def at_step_reached(self) -> None:
        import os
        import signal

        if _claim(os.path.join(self.marker_dir, "first")):
            os.kill(os.getpid(), signal.SIGKILL)


if DIE_TWICE_ENV_ID not in gymnasium.registry:
    gymnasium.register(DIE_TWICE_ENV_ID, entry_point=DieTwiceEnv)


PAUSE_ENV_ID = "drltest/PauseAt-v0"


class PauseAtEnv(_AtStepEnv):
    """At its ``at_step``-th step (counted from its process's start) creates
    ``<marker_dir>/reached-<pid>`` and waits until ``<marker_dir>/release`` exists (at most
    120 s): a rollout actor held in the middle of a round while a test breaks something."""

    def __init__(self, at_step: int, marker_dir: str, render_mode=None) -> None:
        super().__init__(at_step)
        self.marker_dir = marker_dir

    def at_step_reached(self) -> None:
        import os
        import time

        open(os.path.join(self.marker_dir, f"reached-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + 120
        release = os.path.join(self.marker_dir, "release")
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)


if PAUSE_ENV_ID not in gymnasium.registry:
    gymnasium.register(PAUSE_ENV_ID, entry_point=PauseAtEnv)


SLOW_EVALUATION_ENV_ID = "drltest/SlowEvaluation-v0"


class SlowEvaluationEnv(ImprovingEnv):
    """``ImprovingEnv`` whose episodes seeded as drl's evaluations seed them (from
    ``EVALUATION_SEED_OFFSET``) each wait ``reset_delay_s`` at reset: evaluations that take
    several rounds of training."""

    def __init__(self, reset_delay_s: float = 0.5, render_mode: str | None = None) -> None:
        super().__init__()
        self.reset_delay_s = reset_delay_s

    def reset(self, *, seed=None, options=None):
        import time

        from drlcli.evaluation import EVALUATION_SEED_OFFSET

        if seed is not None and seed >= EVALUATION_SEED_OFFSET:
            time.sleep(self.reset_delay_s)
        return super().reset(seed=seed, options=options)


if SLOW_EVALUATION_ENV_ID not in gymnasium.registry:
    gymnasium.register(SLOW_EVALUATION_ENV_ID, entry_point=SlowEvaluationEnv, max_episode_steps=8)


DIE_IN_STATE_ENV_ID = "drltest/DieInState-v0"


class DieInStateEnv(_AtStepEnv):
    """Kills its process with SIGKILL when its state is read (``drlcli.env_state.env_state``,
    which asks for ``unwrapped``) once it has made ``at_step`` steps: a rollout actor that dies
    while the driver collects its state for the round's checkpoint. Only the first process to
    get there dies (it creates ``marker``)."""

    def __init__(self, at_step: int, marker: str, render_mode=None) -> None:
        super().__init__(at_step)
        self.marker = marker

    def at_step_reached(self) -> None:
        pass

    @property
    def unwrapped(self):
        import os
        import signal

        if self.steps >= self.at_step and _claim(self.marker):
            os.kill(os.getpid(), signal.SIGKILL)
        return self


if DIE_IN_STATE_ENV_ID not in gymnasium.registry:
    gymnasium.register(DIE_IN_STATE_ENV_ID, entry_point=DieInStateEnv)


DIE_IN_RESTORE_ENV_ID = "drltest/DieInRestore-v0"


class DieInRestoreEnv(_AtStepEnv):
    """Kills its process with SIGKILL when a stored state is put back into it
    (``drlcli.env_state.load_env_state`` sets ``np_random``; Gymnasium's seeded reset does not):
    a rollout actor or env stepper that dies while a resumed run restores it. Only the first
    process to get there dies (it creates ``marker``)."""

    def __init__(self, marker: str, render_mode=None) -> None:
        super().__init__(at_step=0)
        self.marker = marker

    def at_step_reached(self) -> None:
        pass

    @property
    def np_random(self):
        return gymnasium.Env.np_random.fget(self)

    @np_random.setter
    def np_random(self, value) -> None:
        import os
        import signal

        if _claim(self.marker):
            os.kill(os.getpid(), signal.SIGKILL)
        gymnasium.Env.np_random.fset(self, value)


if DIE_IN_RESTORE_ENV_ID not in gymnasium.registry:
    gymnasium.register(DIE_IN_RESTORE_ENV_ID, entry_point=DieInRestoreEnv)


SUCCESS_PATTERN_ENV_ID = "drltest/SuccessPattern-v0"


class SuccessPatternEnv(ImprovingEnv):
    """``ImprovingEnv`` (episodes of 8 steps) that reports success in ``info[key]``: true at the
    4th step of every episode, and at the last step of the even episodes of this instance
    (counted from 0). By ``success_when``: ``any_step`` every episode succeeded,
    ``final_step`` episodes 0, 2, 4... did."""

    def __init__(self, key: str = "success", render_mode: str | None = None) -> None:
        super().__init__()
        self.key, self.episode, self.episode_step = key, -1, 0

    def reset(self, *, seed=None, options=None):
        self.episode, self.episode_step = self.episode + 1, 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.episode_step += 1
        last = self.episode_step == 8
        succeeded = self.episode_step == 4 or (last and self.episode % 2 == 0)
        return obs, reward, terminated, truncated, {**info, self.key: float(succeeded)}


if SUCCESS_PATTERN_ENV_ID not in gymnasium.registry:
    gymnasium.register(SUCCESS_PATTERN_ENV_ID, entry_point=SuccessPatternEnv, max_episode_steps=8)


BROKEN_PACKAGE_ENV_ID = "drltest/BrokenPackage-v0"


class BrokenPackageEnv(gymnasium.Env):
    """A task whose package fails while it is made, whatever it is given (Meta-World under a
    MuJoCo it does not support): the failure is the package's, not the user's ``env_name``."""

    def __init__(self, env_name: str = "reach-v3", render_mode: str | None = None) -> None:
        raise ValueError("could not broadcast input array from shape (39,) into shape (36,)")


if BROKEN_PACKAGE_ENV_ID not in gymnasium.registry:
    gymnasium.register(BROKEN_PACKAGE_ENV_ID, entry_point=BrokenPackageEnv)


FIXED_SIZE_RENDER_ENV_ID = "drltest/FixedSizeRender-v0"


def _fixed_size_render(render_mode: str | None = None):
    """InvertedPendulum whose ``make`` takes no ``width``/``height`` and renders 64 x 48 (as
    Shimmy's dm_control tasks render at their own size)."""
    from gymnasium.envs.mujoco.inverted_pendulum_v5 import InvertedPendulumEnv

    return InvertedPendulumEnv(render_mode=render_mode, width=64, height=48)


if FIXED_SIZE_RENDER_ENV_ID not in gymnasium.registry:
    gymnasium.register(
        FIXED_SIZE_RENDER_ENV_ID, entry_point=_fixed_size_render, max_episode_steps=20
    )


DIE_IN_EVALUATION_ENV_ID = "drltest/DieInEvaluation-v0"


class DieInEvaluationEnv(ImprovingEnv):
    """``ImprovingEnv`` (episodes of 8 steps) whose process dies by SIGKILL when an episode
    seeded as drl's evaluations seed them starts, twice: the first time (marker
    ``<marker_dir>/first``), then once more in the process that redoes the evaluation (marker
    ``second``): an evaluator that dies, then dies again in its re-evaluation."""

    def __init__(self, marker_dir: str, render_mode: str | None = None) -> None:
        super().__init__()
        self.marker_dir = marker_dir

    def reset(self, *, seed=None, options=None):
        import os
        import signal

        from drlcli.evaluation import EVALUATION_SEED_OFFSET

        if seed is not None and seed >= EVALUATION_SEED_OFFSET:
            for marker in ("first", "second"):
                if _claim(os.path.join(self.marker_dir, marker)):
                    os.kill(os.getpid(), signal.SIGKILL)
        return super().reset(seed=seed, options=options)


if DIE_IN_EVALUATION_ENV_ID not in gymnasium.registry:
    gymnasium.register(
        DIE_IN_EVALUATION_ENV_ID, entry_point=DieInEvaluationEnv, max_episode_steps=8
    )

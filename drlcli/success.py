"""Whether an episode succeeded, as the task reports it in ``info`` (Method.md, "Success").

Manipulation and goal-reaching tasks measure themselves by success, not return: Meta-World's
``info["success"]``, Gymnasium-Robotics' ``info["is_success"]``. An episode's outcome is read from
the key ``env.success_key`` names (null: ``success``, else ``is_success``, whichever the task
reports), by ``env.success_when``: ``any_step`` (Meta-World's measure: the flag was true at some
step of the episode) or ``final_step`` (Gymnasium-Robotics' and Stable-Baselines3's: true at its
last step). An episode in which the task never reported the key has no outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SUCCESS_KEYS = ("success", "is_success")  # looked for in this order when none is configured
ANY_STEP, FINAL_STEP = "any_step", "final_step"


def reported_key(info: Mapping[str, Any], configured: str | None) -> str | None:
    """The success key ``info`` holds: ``configured`` if given, else the first of
    ``SUCCESS_KEYS`` present; None when it holds none."""
    for key in (configured,) if configured is not None else SUCCESS_KEYS:
        if key in info:
            return key
    return None


def flag(value: Any) -> bool:
    """A reported success value (bool, 0/1 float, numpy scalar or 0-d array) as a bool."""
    return bool(np.any(np.asarray(value, dtype=np.float64) > 0.5))


class EpisodeSuccess:
    """The outcome so far of each of ``num_envs`` episodes in progress.

    ``seen[i]``: the task reported the key in episode ``i``; ``succeeded[i]``: its outcome by
    ``when`` so far (for ``final_step``, the latest step's flag).
    """

    def __init__(self, num_envs: int, configured: str | None, when: str) -> None:
        self.configured, self.when = configured, when
        self.seen = np.zeros(num_envs, dtype=bool)
        self.succeeded = np.zeros(num_envs, dtype=bool)

    def step(self, index: int, info: Mapping[str, Any]) -> None:
        """Record env ``index``'s step ``info``."""
        key = reported_key(info, self.configured)
        if key is None:
            return
        value = flag(info[key])
        self.succeeded[index] = value if self.when == FINAL_STEP else self.succeeded[index] | value
        self.seen[index] = True

    def finish(self, index: int) -> bool | None:
        """Env ``index``'s episode ended: its outcome (None: never reported), then forget it."""
        outcome = bool(self.succeeded[index]) if self.seen[index] else None
        self.seen[index] = self.succeeded[index] = False
        return outcome

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"seen": self.seen.copy(), "succeeded": self.succeeded.copy()}

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Continue the episodes a ``state_dict`` recorded (None: a checkpoint from before
        success was tracked; the episodes in progress start with no outcome)."""
        if state is None:
            self.seen[:] = self.succeeded[:] = False
            return
        self.seen = np.asarray(state["seen"], dtype=bool).copy()
        self.succeeded = np.asarray(state["succeeded"], dtype=bool).copy()


def first_step_reports(env: Any, seed: int) -> bool:
    """Whether ``env``'s first step, after a reset with ``seed``, at the centre of the action
    box, reports ``success`` or ``is_success``: how a run without ``env.success_key`` decides it
    has success columns."""
    env.reset(seed=seed)
    space = env.action_space
    centre = (np.asarray(space.low, np.float64) + np.asarray(space.high, np.float64)) / 2
    info = env.step(centre.astype(space.dtype))[4]
    return reported_key(info, None) is not None


def success_rate(outcomes: Sequence[bool | None]) -> float | None:
    """The fraction of episodes with an outcome that succeeded; None when none has one."""
    known = [outcome for outcome in outcomes if outcome is not None]
    return sum(known) / len(known) if known else None

"""The off-policy rollout actor: environments stepped with the actions the learner chose.

Numpy and the environments only: a stepper process does not import torch (seconds of start-up
and hundreds of MB per process saved; a restarted stepper is back sooner).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from drlcli.envs import EnvBatch
from drlcli.runtime.run_context import RolloutActorContext


class EnvStepper:
    """Rollout actor ``actor_id`` of an off-policy run: ``num_envs`` environments and no policy (the
    learner chooses its actions)."""

    def __init__(self, context: RolloutActorContext) -> None:
        self.envs = EnvBatch.for_rollout_actor(context.env, context.actor_id)

    def observations(self) -> np.ndarray:
        return self.envs.obs.astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """The episodes in progress (``EnvBatch.state_dict``), for an exact resume, and the
        ``process_id`` (which tells the caller a replaced process; it is not stored) and
        the current observations (``obs``: what a replaced process starts from)."""
        return {
            "envs": self.envs.state_dict(),
            "process_id": os.getpid(),
            "obs": self.observations(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Continue the episodes ``state_dict`` recorded; returns ``{process_id}``."""
        self.envs.load_state_dict(state["envs"])
        return {"process_id": os.getpid()}

    def step(self, actions: np.ndarray) -> dict[str, Any]:
        """Step every env; ``final_obs`` is the pre-reset observation (the transition's s').
        ``process_id`` tells the caller when Ray replaced a dead process between two steps."""
        step = self.envs.step(actions)
        return {
            "process_id": os.getpid(),
            "next_obs": step.next_obs.astype(np.float32),
            "final_obs": step.final_obs.astype(np.float32),
            "rewards": step.rewards,
            "terminated": step.terminated,
            "truncated": step.truncated,
            "finished_returns": step.finished_returns,
            "finished_lengths": step.finished_lengths,
            "finished_successes": step.finished_successes,
        }


class LocalStepperPool:
    """Env steppers in this process, stepped one after the other (tests, benchmarks)."""

    def __init__(self, steppers: Sequence[EnvStepper], num_envs: int) -> None:
        self.steppers, self.num_envs = list(steppers), num_envs
        self._pending: list[dict[str, Any]] = []

    def observations(self) -> np.ndarray:
        return np.concatenate([stepper.observations() for stepper in self.steppers])

    def step_async(self, actions: np.ndarray) -> None:
        n = self.num_envs
        self._pending = [s.step(actions[i * n : (i + 1) * n]) for i, s in enumerate(self.steppers)]

    def wait(self) -> list[dict[str, Any]]:
        return self._pending

    def state_dicts(self) -> list[dict[str, Any]]:
        return [stepper.state_dict() for stepper in self.steppers]

    def load_state_dicts(self, states: list[dict[str, Any]]) -> None:
        for stepper, state in zip(self.steppers, states, strict=True):
            stepper.load_state_dict(state)

    def replaced(self, position: int, process_id: int) -> bool:
        return False  # one process: nothing is restarted

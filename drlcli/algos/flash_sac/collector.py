"""FlashSAC's off-policy runtime: rollout actors that only step envs, and the learner process
that chooses every action with ``learner.actor.explore`` (the one instance it optimises).

Per environment step of a round, in the learner process:

1. actions for all envs of all its rollout actors in one batched ``explore`` call (uniform
   random actions until ``warmup_steps`` transitions were collected);
2. send each rollout actor its slice and let them step, *asynchronously*;
3. meanwhile run the gradient updates owed so far (``updates_per_env_step`` per transition,
   once the buffer holds ``max(warmup_steps, batch_size)``): updates and env steps overlap;
4. receive the steps and add the transitions to the replay buffer.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from drlcli.actors.spec import ActorSpec
from drlcli.algos.flash_sac.critic import ReturnScaler
from drlcli.algos.flash_sac.learner import FlashSACLearner, ReplayBuffer
from drlcli.config import EnvConfig, FlashSACParams
from drlcli.envs import EnvBatch


class EnvStepper:
    """Rollout actor ``actor_id`` of FlashSAC: ``num_envs`` environments, no policy."""

    def __init__(self, actor_id: int, env_config: EnvConfig) -> None:
        self.envs = EnvBatch.for_rollout_actor(env_config, actor_id)

    def observations(self) -> np.ndarray:
        return self.envs.obs.astype(np.float32)

    def step(self, actions: np.ndarray) -> dict[str, Any]:
        """Step every env; ``final_obs`` is the pre-reset observation (the transition's s')."""
        step = self.envs.step(actions)
        return {
            "next_obs": step.next_obs.astype(np.float32),
            "final_obs": step.final_obs.astype(np.float32),
            "rewards": step.rewards,
            "terminated": step.terminated,
            "truncated": step.truncated,
            "finished_returns": step.finished_returns,
            "finished_lengths": step.finished_lengths,
        }


class FlashSACWorker:
    """One FlashSAC learner process with its rollout actors (Ray handles of EnvStepper)."""

    def __init__(
        self,
        actor_spec: ActorSpec,
        env_steppers: list[Any],
        obs_dim: int,
        action_dim: int,
        action_low: list[float],
        action_high: list[float],
        params: FlashSACParams,
        gamma: float,
        num_envs: int,
        total_updates: int,
        device: str,
        seed: int,
        torch_threads: int = 1,
    ) -> None:
        import ray

        # Ray would pin this process to one thread; FlashSAC's wider networks gain from more,
        # and the rollout actors sit mostly idle while the learner updates.
        torch.set_num_threads(torch_threads)
        self.params = params
        self.steppers = env_steppers
        self.learner = FlashSACLearner(
            actor_spec,
            obs_dim,
            action_dim,
            action_low,
            action_high,
            params,
            gamma,
            total_updates,
            device,
            seed,
        )
        self.replay = ReplayBuffer(params.buffer_size, obs_dim, action_dim, seed)
        total_envs = num_envs * len(env_steppers)
        self.return_scaler = ReturnScaler(total_envs, gamma, params.normalized_return_max)
        self.low = np.asarray(action_low, dtype=np.float32)
        self.high = np.asarray(action_high, dtype=np.float32)
        self.rng = np.random.default_rng(seed)
        self.num_envs = num_envs
        self.transitions = 0
        self.update_budget = 0.0
        self.obs = np.concatenate(ray.get([s.observations.remote() for s in env_steppers]))
        self.dones = np.ones(total_envs, dtype=bool)  # every env starts an episode

    def _actions(self) -> np.ndarray:
        if self.transitions < self.params.warmup_steps:
            return self.rng.uniform(self.low, self.high, size=(len(self.obs), len(self.low)))
        obs = torch.as_tensor(self.obs, device=self.learner.device)
        dones = torch.as_tensor(self.dones, device=self.learner.device)
        return self.learner.actor.explore(obs, dones=dones).cpu().numpy()

    def run(self, steps: int) -> tuple[dict[str, Any], dict[str, float]]:
        """``steps`` steps of every env, with the updates owed interleaved.

        Returns ``(stats, metrics)``: finished episodes of the round, and the learner's
        diagnostics averaged over the round's updates (plus update counts and rates).
        """
        import ray

        p = self.params
        returns: list[float] = []
        lengths: list[int] = []
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        updates = 0
        update_seconds = 0.0
        ready = max(p.warmup_steps, p.batch_size)
        for _ in range(steps):
            actions = self._actions().astype(np.float32)
            futures = [
                stepper.step.remote(actions[i * self.num_envs : (i + 1) * self.num_envs])
                for i, stepper in enumerate(self.steppers)
            ]
            if len(self.replay) >= ready:
                # UTD: updates_per_env_step updates per transition collected once ready; the
                # fractional remainder carries over.
                self.update_budget += len(self.obs) * p.updates_per_env_step
                owed = int(self.update_budget)
                self.update_budget -= owed
                reward_scale = self.return_scaler.scale() if p.normalize_rewards else 1.0
                started = time.perf_counter()
                for _ in range(owed):
                    batch = self.replay.sample(p.batch_size, reward_scale, self.learner.device)
                    for name, value in self.learner.update(batch).items():
                        sums[name] = sums.get(name, 0.0) + value
                        counts[name] = counts.get(name, 0) + 1
                    updates += 1
                update_seconds += time.perf_counter() - started
            results = ray.get(futures)
            next_obs = np.concatenate([r["next_obs"] for r in results])
            final_obs = np.concatenate([r["final_obs"] for r in results])
            rewards = np.concatenate([r["rewards"] for r in results])
            terminated = np.concatenate([r["terminated"] for r in results])
            truncated = np.concatenate([r["truncated"] for r in results])
            self.replay.add(self.obs, actions, rewards, final_obs, terminated)
            self.return_scaler.update(rewards, terminated, truncated)
            self.transitions += len(rewards)
            self.obs, self.dones = next_obs, terminated | truncated
            for r in results:
                returns += r["finished_returns"]
                lengths += r["finished_lengths"]
        metrics = {name: sums[name] / counts[name] for name in sums}
        metrics["updates"] = float(updates)
        metrics["updates_per_second"] = updates / update_seconds if update_seconds > 0 else 0.0
        metrics["buffer_size"] = float(len(self.replay))
        stats = {
            "episodes": len(returns),
            "episode_returns": returns,
            "episode_len_sum": int(sum(lengths)),
        }
        return stats, metrics

    def network_state(self) -> dict[str, Any]:
        return self.learner.network_state()

    def load_network_state(self, state: dict[str, Any]) -> None:
        self.learner.load_network_state(state)

    def checkpoint_state(self) -> dict[str, Any]:
        """What resume needs: learner state, reward statistics, transition counter."""
        return {
            **self.learner.state_dict(),
            "return_scaler": self.return_scaler.state_dict(),
            "transitions": self.transitions,
        }

    def replay_arrays(self) -> dict[str, np.ndarray]:
        return self.replay.arrays()

    def load_replay_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.replay.load_arrays(arrays)

    def restore(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)
        self.return_scaler.load_state_dict(state["return_scaler"])
        self.transitions = int(state["transitions"])

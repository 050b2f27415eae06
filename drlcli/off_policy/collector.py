"""The off-policy collection every replay-based algorithm shares: rollout actors that only step
environments (``runtime/env_stepper.py``), and ``OffPolicyCollector``, the learner's side that
chooses every action with ``learner.actor.explore`` (the one policy instance the learner
optimises).

Per environment step of a round, in the learner process:

1. actions for all envs of all its rollout actors in one batched ``explore`` call (uniform
   random actions until ``warmup_steps`` transitions were collected);
2. start stepping them (``EnvStepperPool.step_async``: on Ray, each rollout actor its slice);
3. meanwhile run the gradient updates owed so far (``updates_per_env_step`` per transition,
   once the buffer holds ``max(warmup_steps, batch_size)``, every data-parallel learner's
   buffer): updates and env steps overlap;
4. receive the steps and add the transitions to the replay buffer.

The algorithm is the learner (``OffPolicyLearner``: FlashSAC's, SAC's); the collector owns the
replay buffer, the reward scaler, the warm-up and the update-to-data bookkeeping. Plain Python:
the runtime gives the collector a Ray-backed pool of env steppers; tests and benchmarks give it
a local one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from drlcli.normalization import RewardScaler
from drlcli.observations import GroupReader, ObservationGroups
from drlcli.off_policy.replay import TransitionReplay

if TYPE_CHECKING:
    from drlcli.off_policy.data_parallel import DataParallelGroup


class OffPolicyParams(Protocol):
    """The ``algo_params`` fields the collector reads (each algorithm's params declare them)."""

    batch_size: int  # transitions per update
    updates_per_env_step: float  # update-to-data ratio
    buffer_size: int  # replay capacity per learner, in transitions
    warmup_steps: int  # uniform random actions until this many transitions
    normalize_rewards: bool  # replayed rewards divided by the reward scaler's divisor
    normalized_return_max: float  # the largest discounted return magnitude after scaling


class OffPolicyLearner(Protocol):
    """What the collector asks of an off-policy learner."""

    actor: torch.nn.Module  # the policy actor it optimises; explore() chooses the actions
    device: torch.device
    data_parallel: DataParallelGroup | None  # the learners it updates together with, if any

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One gradient update on ``{obs, act, rew, next_obs, terminated}`` (rewards scaled);
        its scalar diagnostics."""
        ...

    def use_data_parallel(self, group: DataParallelGroup) -> None:
        """From now on make every update together with the other learners of ``group``."""
        ...

    def network_state(self) -> dict[str, Any]:
        """Its networks on the CPU (``OffPolicy.network_keys``): what learners share."""
        ...

    def load_network_state(self, state: dict[str, Any]) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        """Everything resume needs: networks, optimisers, counters."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class EnvStepperPool(Protocol):
    """The env steppers of one learner, stepped together: ``step_async`` then ``wait``."""

    def observations(self) -> np.ndarray:
        """Current observations of every env of every stepper, ``[total_envs, obs_dim]``."""
        ...

    def step_async(self, actions: np.ndarray) -> None:
        """Start one step of every env with ``actions [total_envs, action_dim]``."""
        ...

    def wait(self) -> list[dict[str, Any]]:
        """The ``EnvStepper.step`` results of the step started last, one per stepper. A result
        may carry ``lost [num_envs]`` (bool): those envs' transitions are unknown (their
        stepper's process was restarted; ``next_obs`` is the fresh episode's first)."""
        ...

    def state_dicts(self) -> list[dict[str, Any]]:
        """``EnvStepper.state_dict`` of every stepper (``envs``, ``process_id``, ``obs``)."""
        ...

    def load_state_dicts(self, states: list[dict[str, Any]]) -> None:
        """``EnvStepper.load_state_dict`` of every stepper, in order."""
        ...

    def replaced(self, position: int, process_id: int) -> bool:
        """Whether stepper ``position``'s process, which answered from ``process_id``, is not
        the one that made its last step (counted as a restart)."""
        ...


class OffPolicyCollector:
    """One off-policy learner with its replay buffer, reward scaler and env steppers.

    Args:
        learner: the algorithm's learner (built before: its initialisation draws from torch's
            global stream first).
        steppers: this learner's env steppers.
        params: the algorithm's params (``OffPolicyParams``).
        action_low, action_high: the env's bounds, ``[action_dim]`` (the warm-up's actions).
        obs_dim: observation size (of the training observation the replay stores).
        gamma: discount (the reward scaler's returns).
        seed: of the warm-up's actions and the replay's sampling.
        groups: a privileged critic's observation groups: the actor explores with the policy
            group of each observation; None: with all of it.
    """

    def __init__(
        self,
        learner: OffPolicyLearner,
        steppers: EnvStepperPool,
        params: OffPolicyParams,
        action_low: Sequence[float],
        action_high: Sequence[float],
        obs_dim: int,
        gamma: float,
        seed: int = 0,
        groups: ObservationGroups | None = None,
    ) -> None:
        self.params = params
        self.steppers = steppers
        self.learner = learner
        self.groups = GroupReader(groups)
        self.replay = TransitionReplay(params.buffer_size, obs_dim, len(action_low), seed)
        self.obs = steppers.observations()
        self.reward_scaler = RewardScaler(len(self.obs), gamma, params.normalized_return_max)
        self.low = np.asarray(action_low, dtype=np.float32)
        self.high = np.asarray(action_high, dtype=np.float32)
        self.rng = np.random.default_rng(seed)
        self.transitions = 0
        self.update_budget = 0.0
        self.updating = False  # once every learner's buffer is ready, for good
        self.dones = np.ones(len(self.obs), dtype=bool)  # every env starts an episode
        # Of a loaded collection: the stored buffer's (size, write position) and whether it
        # was updating, applied once its transitions come back (load_replay).
        self._replay_layout: tuple[int, int] | None = None
        self._stored_updating = False

    def _actions(self) -> np.ndarray:
        if self.transitions < self.params.warmup_steps:
            return self.rng.uniform(self.low, self.high, size=(len(self.obs), len(self.low)))
        obs = torch.as_tensor(self.groups.policy(self.obs), device=self.learner.device)
        dones = torch.as_tensor(self.dones, device=self.learner.device)
        return self.learner.actor.explore(obs, dones=dones).cpu().numpy()

    def _all_ready(self, ready: bool) -> bool:
        """Whether updates start: data-parallel learners start together (each update is a
        collective), which a restarted rollout actor's lost transitions could otherwise skew."""
        group = self.learner.data_parallel
        return ready if group is None else group.all_agree(ready, self.learner.device)

    def run(self, steps: int) -> tuple[dict[str, Any], dict[str, float]]:
        """``steps`` steps of every env, with the updates owed interleaved.

        Returns ``(stats, metrics)``: finished episodes of the round, and the learner's
        diagnostics averaged over the round's updates (plus update counts and rates).
        """
        p = self.params
        returns: list[float] = []
        lengths: list[int] = []
        successes: list[bool] = []
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        updates = 0
        update_seconds = 0.0
        ready = max(p.warmup_steps, p.batch_size)
        for _ in range(steps):
            actions = self._actions().astype(np.float32)
            self.steppers.step_async(actions)
            if not self.updating:
                self.updating = self._all_ready(len(self.replay) >= ready)
            if self.updating:
                # UTD: updates_per_env_step updates per transition collected once ready; the
                # fractional remainder carries over.
                self.update_budget += len(self.obs) * p.updates_per_env_step
                owed = int(self.update_budget)
                self.update_budget -= owed
                reward_scale = self.reward_scaler.divisor() if p.normalize_rewards else 1.0
                started = time.perf_counter()
                for _ in range(owed):
                    batch = self.replay.sample(p.batch_size, reward_scale, self.learner.device)
                    for name, value in self.learner.update(batch).items():
                        sums[name] = sums.get(name, 0.0) + value
                        counts[name] = counts.get(name, 0) + 1
                    updates += 1
                update_seconds += time.perf_counter() - started
            results = self.steppers.wait()
            next_obs = np.concatenate([r["next_obs"] for r in results])
            final_obs = np.concatenate([r["final_obs"] for r in results])
            rewards = np.concatenate([r["rewards"] for r in results])
            terminated = np.concatenate([r["terminated"] for r in results])
            truncated = np.concatenate([r["truncated"] for r in results])
            transition = (self.obs, actions, rewards, final_obs, terminated)
            if any("lost" in r for r in results):  # a restarted stepper: rare, so checked first
                lost = [r.get("lost", np.zeros(len(r["rewards"]), dtype=bool)) for r in results]
                kept = ~np.concatenate(lost)
                transition = tuple(part[kept] for part in transition)
            self.replay.add(*transition)
            self.reward_scaler.update(rewards, terminated | truncated)
            self.transitions += len(transition[0])
            self.obs, self.dones = next_obs, terminated | truncated
            for r in results:
                returns += r["finished_returns"]
                lengths += r["finished_lengths"]
                successes += r["finished_successes"]
        metrics = {name: sums[name] / counts[name] for name in sums}
        metrics["updates"] = float(updates)
        metrics["updates_per_second"] = updates / update_seconds if update_seconds > 0 else 0.0
        metrics["buffer_size"] = float(len(self.replay))
        stats = {
            "episodes": len(returns),
            "episode_returns": returns,
            "episode_len_sum": int(sum(lengths)),
            "episode_successes": successes,
        }
        return stats, metrics

    def state_dict(self) -> dict[str, Any]:
        """What resume needs: the learner's state, the reward statistics, the transitions;
        and what makes it exact (``collection``): the env steppers' episodes in progress, the
        random streams (torch's, the warm-up's, the replay's sampling), the held exploration
        noise, the replay ring's write position and the update budget's remainder."""
        from drlcli.env_state import generator_state

        return {
            **self.learner.state_dict(),
            "return_scaler": self.reward_scaler.state_dict(),
            "transitions": self.transitions,
            "collection": {
                "steppers": self._stepper_states(),
                "obs": self.obs.copy(),
                "dones": self.dones.copy(),
                "discounted_return": self.reward_scaler.discounted_return.copy(),
                "update_budget": float(self.update_budget),
                "updating": bool(self.updating),
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": (
                    torch.cuda.get_rng_state(self.learner.device)
                    if self.learner.device.type == "cuda"
                    else None
                ),
                "warmup_rng": generator_state(self.rng),
                "replay_rng": generator_state(self.replay._rng),
                "replay_next": int(self.replay._next),
                "replay_size": len(self.replay),
                "explore": exploration_state(self.learner.actor),
            },
        }

    def _stepper_states(self) -> list[dict[str, Any]]:
        """The steppers' states to store. A stepper whose process was replaced since its last
        step (its process id changed) starts fresh episodes: as after a step lost to a restart
        (``EnvStepperPool.wait``), its envs continue from the fresh observations, with their
        episodes and discounted returns ended, so that the checkpoint records what this run
        does next."""
        states = self.steppers.state_dicts()
        n = len(self.obs) // len(states)
        for position, state in enumerate(states):
            replaced = self.steppers.replaced(position, state.pop("process_id"))
            fresh = state.pop("obs")
            if replaced:
                envs = slice(position * n, (position + 1) * n)
                self.obs[envs] = fresh
                self.dones[envs] = True
                self.reward_scaler.discounted_return[envs] = 0.0
        return states

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)
        self.reward_scaler.load_state_dict(state["return_scaler"])
        self.transitions = int(state["transitions"])
        collection = state.get("collection")  # absent: resumed under another learner count
        if collection is not None and len(collection["obs"]) == len(self.obs):
            self._load_collection(collection)

    def _load_collection(self, collection: dict[str, Any]) -> None:
        from drlcli.env_state import generator_of

        self.steppers.load_state_dicts(collection["steppers"])
        self.obs = np.asarray(collection["obs"], dtype=np.float32).copy()
        self.dones = np.asarray(collection["dones"], dtype=bool).copy()
        self.reward_scaler.discounted_return = np.asarray(
            collection["discounted_return"], dtype=np.float64
        ).copy()
        self.update_budget = float(collection["update_budget"])
        # Updates go on at once only if the stored transitions come back (load_replay); else
        # they wait until the buffer is ready again.
        self._stored_updating = bool(collection["updating"])
        torch.set_rng_state(torch.as_tensor(collection["torch_rng"], dtype=torch.uint8))
        cuda_rng = collection.get("cuda_rng")
        if cuda_rng is not None and self.learner.device.type == "cuda":
            torch.cuda.set_rng_state(
                torch.as_tensor(cuda_rng, dtype=torch.uint8), self.learner.device
            )
        self.rng = generator_of(collection["warmup_rng"])
        self.replay._rng = generator_of(collection["replay_rng"])
        self._replay_layout = (int(collection["replay_size"]), int(collection["replay_next"]))
        load_exploration_state(self.learner.actor, collection["explore"])

    def load_replay(self, arrays: dict[str, np.ndarray]) -> None:
        """Refill the replay buffer; the transitions of the checkpoint's own buffer go back to
        the ring positions they held (uniform sampling then draws what it would have)."""
        layout = self._replay_layout
        count = len(arrays["obs"])
        own_buffer = layout is not None and layout[0] == count
        self.replay.load_arrays(arrays, next_index=layout[1] if own_buffer else None)
        if own_buffer:
            self.updating = self._stored_updating


def exploration_state(actor: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a policy actor keeps outside its parameters and buffers (the built-in
    actor's held noise and its remaining steps): what ``explore`` continues from."""
    return {
        name: value.detach().clone()
        for name, value in vars(actor).items()
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
    }


def load_exploration_state(actor: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    device = next(actor.parameters()).device
    for name, value in state.items():
        setattr(actor, name, torch.as_tensor(value).to(device).clone())

"""The learner processes of both algorithms: thin Ray shells around plain learner objects.

Both expose the same state methods under the same names: ``network_state`` /
``load_network_state`` (what parameter averaging mixes and broadcasts) and ``state_dict`` /
``load_state_dict`` (everything resume restores).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from drlcli.actors.spec import ActorSpec
from drlcli.algos.flash_sac.collector import FlashSACCollector
from drlcli.algos.flash_sac.data_parallel import DataParallelGroup, open_store
from drlcli.algos.flash_sac.learner import FlashSACLearner
from drlcli.algos.flash_sac.params import FlashSACParams
from drlcli.algos.ppo.learner import Learner
from drlcli.algos.ppo.params import PPOParams
from drlcli.evaluation import EvaluationHost
from drlcli.runtime.ray_session import (
    WorkerDied,
    get_or_raise,
    get_when_restarted,
    worker_error,
)
from drlcli.runtime.restarts import RestartCounter


class PPOLearnerWorker:
    """One PPO learner in its own process: add a round's trajectories, train, report."""

    def __init__(
        self,
        actor_spec: ActorSpec,
        obs_dim: int,
        action_dim: int,
        params: PPOParams,
        device: str,
        seed: int,
    ) -> None:
        torch.set_num_threads(1)  # 64x64 networks: more threads only add overhead
        self.learner = Learner(actor_spec, obs_dim, action_dim, params, device, seed)

    def train_round(
        self, fraction_done: float, *trajectories: dict[str, np.ndarray]
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """ReplayBuffer.add for each trajectory, then Learner.train_step."""
        self.learner.add(*trajectories)
        return self.learner.train_step(fraction_done)

    def network_state(self) -> dict[str, Any]:
        return self.learner.network_state()

    def load_network_state(self, state: dict[str, Any]) -> None:
        self.learner.load_network_state(state)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)


class RayStepperPool:
    """``EnvStepperPool`` over Ray handles of ``EnvStepper``: each steps its slice in its own
    process while the learner updates.

    A stepper whose process died is restarted by Ray with fresh episodes: the step in flight
    is lost (``lost`` rows, not stored) and the fresh observations carry on; ``restarts``
    counts, and stops the run past ``max_restarts``.
    """

    def __init__(
        self, handles: list[Any], num_envs_per_stepper: int, restarts: RestartCounter
    ) -> None:
        self.handles, self.num_envs = handles, num_envs_per_stepper
        self.restarts = restarts
        self._futures: list[Any] = []

    def observations(self) -> np.ndarray:
        import ray

        return np.concatenate(ray.get([handle.observations.remote() for handle in self.handles]))

    def step_async(self, actions: np.ndarray) -> None:
        n = self.num_envs
        self._futures = [
            handle.step.remote(actions[i * n : (i + 1) * n])
            for i, handle in enumerate(self.handles)
        ]

    def wait(self) -> list[dict[str, Any]]:
        import ray

        try:  # the common case: one batched get
            results = ray.get(self._futures)
        except ray.exceptions.RayActorError:
            results = [self._result_or_restart(position) for position in range(len(self.handles))]
        for position, result in enumerate(results):
            if "lost" not in result and self.restarts.restarted_unseen(
                position, result["process_id"]
            ):
                # The fresh process started new episodes: nothing of this step is a transition.
                results[position] = {**result, "lost": np.ones(self.num_envs, dtype=bool)}
        return results

    def _result_or_restart(self, position: int) -> dict[str, Any]:
        """Stepper ``position``'s step, or, where its process died, the fresh process's first
        observations with every env's transition ``lost``."""
        import ray

        try:
            return ray.get(self._futures[position])
        except ray.exceptions.RayActorError as error:
            self._count_death(position, worker_error(error))
        while True:  # a process that dies again before it answers is one restart more
            try:
                fresh = get_when_restarted(self.handles[position].observations.remote)
                break
            except WorkerDied as death:
                self._count_death(position, death)
        return {
            "next_obs": fresh,
            "final_obs": fresh,
            "rewards": np.zeros(self.num_envs),
            "terminated": np.zeros(self.num_envs, dtype=bool),
            "truncated": np.ones(self.num_envs, dtype=bool),
            "finished_returns": [],
            "finished_lengths": [],
            "lost": np.ones(self.num_envs, dtype=bool),
        }

    def state_dicts(self) -> list[dict[str, Any]]:
        return get_or_raise([handle.state_dict.remote() for handle in self.handles])

    def load_state_dicts(self, states: list[dict[str, Any]]) -> None:
        calls = [h.load_state_dict.remote(s) for h, s in zip(self.handles, states, strict=True)]
        for position, answer in enumerate(get_or_raise(calls)):
            self.restarts.restarted_unseen(position, answer["process_id"])  # the pid to watch

    def _count_death(self, position: int, death: Any) -> None:
        if not isinstance(death, WorkerDied) or death.init_failed:
            raise death
        self.restarts.died(position, death.reason)


class DataParallelMember:
    """The Ray-actor methods by which a process holding a FlashSAC learner
    (``flash_sac_learner``) joins its data-parallel learners (``form_data_parallel_group``)."""

    flash_sac_learner: FlashSACLearner
    _store: Any = None

    def open_data_parallel_store(self) -> tuple[str, int]:
        """Learner 0: the rendezvous of the data-parallel group, on this node: ``(host, port)``."""
        import ray

        host = ray.util.get_node_ip_address()
        self._store = open_store(host)
        return host, self._store.port

    def join_data_parallel(self, rank: int, world_size: int, host: str, port: int) -> None:
        """Join the data-parallel learners (blocks until all joined); from now on every
        update is made with them (data_parallel.py)."""
        learner = self.flash_sac_learner
        group = DataParallelGroup.join(
            rank, world_size, host, port, learner.device, store=self._store
        )
        learner.use_data_parallel(group)


def form_data_parallel_group(members: list[Any], roles: dict[str, str] | None = None) -> None:
    """Every ``DataParallelMember`` actor of ``members`` joins one group, ``members[0]``'s store
    first; member ``i`` is rank ``i``."""
    host, port = get_or_raise(members[0].open_data_parallel_store.remote(), roles)
    count = len(members)
    get_or_raise(
        [m.join_data_parallel.remote(i, count, host, port) for i, m in enumerate(members)], roles
    )


class FlashSACLearnerWorker(DataParallelMember, EvaluationHost):
    """One FlashSAC learner in its own process, driving its rollout actors (EnvStepper handles);
    learner 0 evaluates a run's final policy when the run has no evaluator (EvaluationHost)."""

    def __init__(
        self,
        actor_spec: ActorSpec,
        stepper_handles: list[Any],
        num_envs_per_stepper: int,
        obs_dim: int,
        action_dim: int,
        action_low: list[float],
        action_high: list[float],
        params: FlashSACParams,
        gamma: float,
        total_updates: int,
        device: str,
        seed: int,
        torch_threads: int = 1,
        restarts: RestartCounter | None = None,
        learners: int = 1,
    ) -> None:
        # Ray would pin this process to one thread; FlashSAC's wider networks gain from more,
        # and the rollout actors sit mostly idle while the learner updates.
        torch.set_num_threads(torch_threads)
        self.restarts = restarts or RestartCounter(0, list(range(len(stepper_handles))))
        self.collector = FlashSACCollector(
            actor_spec,
            RayStepperPool(stepper_handles, num_envs_per_stepper, self.restarts),
            obs_dim,
            action_dim,
            action_low,
            action_high,
            params,
            gamma,
            total_updates,
            device,
            seed,
            learners,
        )

    def run(self, steps: int) -> tuple[dict[str, Any], dict[str, float]]:
        stats, metrics = self.collector.run(steps)
        stats["rollout_actor_restarts"] = self.restarts.take_new_restarts()
        return stats, metrics

    @property
    def flash_sac_learner(self) -> FlashSACLearner:  # type: ignore[override]
        return self.collector.learner

    def network_state(self) -> dict[str, Any]:
        return self.collector.learner.network_state()

    def load_network_state(self, state: dict[str, Any]) -> None:
        self.collector.learner.load_network_state(state)

    def state_dict(self) -> dict[str, Any]:
        return self.collector.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.collector.load_state_dict(state)

    def replay_arrays(self) -> dict[str, np.ndarray]:
        return self.collector.replay.arrays()

    def load_replay_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.collector.load_replay(arrays)

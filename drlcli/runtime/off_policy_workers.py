"""The learner processes of the off-policy algorithms (FlashSAC, SAC): thin Ray shells around
the shared ``OffPolicyCollector`` and the algorithm's own learner, which the process builds from
one ``LearnerContext``; and the Ray-backed pool of its rollout actors (``EnvStepper``).

Their state methods have the names every learner process has: ``network_state`` /
``load_network_state`` and ``state_dict`` / ``load_state_dict`` (everything resume restores).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch

from drlcli.off_policy.collector import OffPolicyCollector, OffPolicyLearner
from drlcli.off_policy.data_parallel import DataParallelGroup, open_store
from drlcli.runtime.policy_evaluator import EvaluationHost
from drlcli.runtime.ray_errors import WorkerDied, get_or_raise
from drlcli.runtime.restarts import RestartCounter, get_when_restarted
from drlcli.runtime.run_context import OffPolicyWorkerContext


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
        try:
            return get_or_raise(self._futures[position])
        except WorkerDied as death:
            self._count_death(position, death)
        fresh = self._when_restarted(position, self.handles[position].observations.remote)
        return {
            "next_obs": fresh,
            "final_obs": fresh,
            "rewards": np.zeros(self.num_envs),
            "terminated": np.zeros(self.num_envs, dtype=bool),
            "truncated": np.ones(self.num_envs, dtype=bool),
            "finished_returns": [],
            "finished_lengths": [],
            "finished_successes": [],
            "lost": np.ones(self.num_envs, dtype=bool),
        }

    def replaced(self, position: int, process_id: int) -> bool:
        return self.restarts.replaced(position, process_id)

    def state_dicts(self) -> list[dict[str, Any]]:
        """Every stepper's state; one whose process died in the call is restarted and its
        fresh process's state returned (``replaced`` then tells the collector)."""
        return [
            self._answer(position, call, self.handles[position].state_dict.remote)
            for position, call in enumerate([h.state_dict.remote() for h in self.handles])
        ]

    def load_state_dicts(self, states: list[dict[str, Any]]) -> None:
        """Every stepper continues a stored state; one whose process dies meanwhile is
        restarted and given its state again (the resume stays exact)."""
        loads = [
            partial(h.load_state_dict.remote, s) for h, s in zip(self.handles, states, strict=True)
        ]
        calls = [load() for load in loads]
        for position, call in enumerate(calls):
            answer = self._answer(position, call, loads[position])
            self.restarts.restarted_unseen(position, answer["process_id"])  # the pid to watch

    def _answer(self, position: int, call: Any, again: Any) -> dict[str, Any]:
        """What stepper ``position``'s ``call`` returns; where its process died, the answer of
        ``again()`` on the restarted process (each death one restart)."""
        try:
            return get_or_raise(call)
        except WorkerDied as death:
            self._count_death(position, death)
        return self._when_restarted(position, again)

    def _when_restarted(self, position: int, call: Any) -> Any:
        """``call()``'s answer once stepper ``position``'s restarted process takes calls; a
        process that dies again before it answers is one restart more."""
        while True:
            try:
                return get_when_restarted(call)
            except WorkerDied as death:
                self._count_death(position, death)

    def _count_death(self, position: int, death: Any) -> None:
        if not isinstance(death, WorkerDied) or death.init_failed:
            raise death
        self.restarts.died(position, death.reason)


class DataParallelMember:
    """The Ray-actor methods by which a process holding an off-policy learner
    (``off_policy_learner``) joins its data-parallel learners (``form_data_parallel_group``)."""

    off_policy_learner: OffPolicyLearner
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
        learner = self.off_policy_learner
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


class OffPolicyLearnerWorker(DataParallelMember, EvaluationHost):
    """One off-policy learner in its own process, driving its rollout actors (EnvStepper
    handles); learner 0 evaluates a run's final policy when the run has no evaluator
    (EvaluationHost).

    Args:
        context: its learner's context, the algorithm's ``OffPolicy`` part, its rollout
            actors' handles and environments, its torch threads and restart counter.
    """

    def __init__(self, context: OffPolicyWorkerContext) -> None:
        # Ray would pin this process to one thread; the learners' networks gain from more, and
        # the rollout actors sit mostly idle while the learner updates.
        torch.set_num_threads(context.torch_threads)
        self.restarts = context.restarts
        learner, facts = context.learner, context.learner.facts
        self.collector = OffPolicyCollector(
            context.training.learner(learner),
            RayStepperPool(context.steppers, context.envs_per_stepper, self.restarts),
            learner.params,
            *facts.action_bounds,
            facts.obs_dim,
            learner.gamma,
            learner.seed,
            facts.observation_groups,
        )

    def run(self, steps: int) -> tuple[dict[str, Any], dict[str, float]]:
        stats, metrics = self.collector.run(steps)
        stats["rollout_actor_restarts"] = self.restarts.take_new_restarts()
        return stats, metrics

    @property
    def off_policy_learner(self) -> OffPolicyLearner:  # type: ignore[override]
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

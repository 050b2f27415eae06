"""The round loop of every off-policy algorithm on Ray (FlashSAC, SAC): each learner process
drives its own rollout actors; several learners make every update together (data-parallel,
off_policy/data_parallel.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drlcli.algos.registry import get_algorithm
from drlcli.checkpoints.replay_file import ReplayStamp, read_replay_buffers, write_replay_file
from drlcli.metrics.schema import average_metrics
from drlcli.off_policy.resume import learner_states_for, replays_for
from drlcli.runtime.evaluation_runner import evaluator_has_own_process
from drlcli.runtime.process_owner import ProcessOwner
from drlcli.runtime.ray_errors import actor_id_of
from drlcli.runtime.ray_errors import get_or_raise as _get
from drlcli.runtime.resources import process_resources
from drlcli.runtime.restarts import RestartCounter
from drlcli.runtime.run_context import OffPolicyWorkerContext, RunContext


class OffPolicyRoundLoop:
    """An off-policy algorithm on Ray: each learner process (``OffPolicyLearnerWorker``) drives
    its own rollout actors (``EnvStepper``) and chooses their actions with
    ``learner.actor.explore``; a round is ``rollout_length`` steps of every env, with updates
    interleaved. Several learners start from learner 0's networks and stay identical: every
    update averages their gradients (``param_sync_interval`` is PPO's)."""

    def __init__(self, run: RunContext) -> None:
        self.processes = ProcessOwner()
        with self.processes.closed_on_failure():  # also on Ctrl-C part-way
            self._start(run)

    def _start(self, run: RunContext) -> None:
        import ray

        from drlcli.runtime.env_stepper import EnvStepper
        from drlcli.runtime.off_policy_workers import (
            OffPolicyLearnerWorker,
            form_data_parallel_group,
        )

        config, topology, stored = run.config, run.topology, run.stored
        self.config, self.topology = config, topology
        self.off_policy = get_algorithm(config.algo).off_policy
        if self.off_policy is None:
            raise TypeError(f"{config.algo} declares no off_policy entry for OffPolicyRoundLoop")
        resources = process_resources(
            topology,
            evaluator_has_own_process(config, type(self)),
            config.learner_threads,
            run.concurrent_runs,
        )
        self.steppers = self.processes.started_rollout_actors(
            EnvStepper,
            [run.rollout_actor_context(index) for index in range(topology.num_actors)],
            resources.rollout_actor,
            config.max_rollout_actor_restarts,
        )
        self.workers = []
        for learner_index in range(topology.num_learners):
            owned = list(topology.actors_of_learner(learner_index))
            self.workers.append(
                self.processes.started(
                    ray.remote(OffPolicyLearnerWorker)
                    .options(**resources.learner)
                    .remote(
                        OffPolicyWorkerContext(
                            learner=run.learner_context(learner_index),
                            training=self.off_policy,
                            steppers=[self.steppers[index] for index in owned],
                            envs_per_stepper=config.env.num_envs,
                            torch_threads=resources.learner_torch_threads,
                            restarts=RestartCounter(config.max_rollout_actor_restarts, owned),
                        )
                    )
                )
            )
        self.roles = {actor_id_of(w): f"learner {i}" for i, w in enumerate(self.workers)}
        if stored is not None:
            states = learner_states_for(
                stored.learner_states, len(self.workers), self.off_policy.network_keys
            )
            loads = [w.load_state_dict.remote(s) for w, s in zip(self.workers, states, strict=True)]
            _get(loads, self.roles)
        else:
            initial = self.workers[0].network_state.remote()
            _get([w.load_network_state.remote(initial) for w in self.workers[1:]], self.roles)
        if len(self.workers) > 1:
            form_data_parallel_group(self.workers, self.roles)

    def run_round(self, round_index: int) -> tuple[list[dict], dict]:
        """One round of every worker (each learner keeps its own schedule; data-parallel
        learners never need a parameter sync)."""
        stats_refs, metric_refs = [], []
        for worker in self.workers:
            stats, metrics = worker.run.options(num_returns=2).remote(self.config.rollout_length)
            stats_refs.append(stats)
            metric_refs.append(metrics)
        stats = _get(stats_refs, self.roles)
        learner_metrics = average_metrics(_get(metric_refs, self.roles))
        return stats, learner_metrics

    def checkpoint_parts(self) -> tuple[None, list[dict[str, Any]]]:
        """No observation statistics (an off-policy actor normalises its inputs itself, if at
        all: FlashSAC's input BatchNorm); every learner's state."""
        return None, _get([worker.state_dict.remote() for worker in self.workers], self.roles)

    def save_replay(self, path: Path, stamp: ReplayStamp) -> None:
        """Every learner's replay buffer as one ``.npz`` of plain arrays with the stamp of the
        checkpoint it belongs to (``write_replay_file``), written atomically."""
        buffers = _get([worker.replay_arrays.remote() for worker in self.workers], self.roles)
        write_replay_file(path, buffers, stamp)

    def load_replay(self, path: Path) -> None:
        """Refill the replay buffers from ``save_replay``'s file (no pickles are read; the
        preflight checked that it is the resumed checkpoint's)."""
        shares = replays_for(read_replay_buffers(path), len(self.workers))
        loads = [w.load_replay_arrays.remote(b) for w, b in zip(self.workers, shares, strict=True)]
        _get(loads, self.roles)

    def evaluation_host(self) -> tuple[Any, str, bool]:
        """Learner 0 (``EvaluationHost.evaluate_policy``; never restarted): a run without
        periodic evaluation evaluates its final policy there (``HasEvaluationHost``)."""
        return self.workers[0], "learner 0", False

    def close(self) -> None:
        self.processes.close()

"""PPO's round loop on Ray: rollout actors sample with their learner's parameters, learners
train, a sync round averages all learners (Method.md, "Rounds and synchronisation")."""

from __future__ import annotations

from functools import partial
from typing import Any

from drlcli.metrics.schema import average_metrics
from drlcli.normalization import RmsState, merge_rms_states
from drlcli.runtime.evaluation_runner import evaluator_has_own_process
from drlcli.runtime.process_owner import ProcessOwner
from drlcli.runtime.ray_errors import WorkerDied, actor_id_of
from drlcli.runtime.ray_errors import get_or_raise as _get
from drlcli.runtime.resources import process_resources
from drlcli.runtime.restarts import RestartCounter, get_when_restarted
from drlcli.runtime.run_context import RunContext


class PPORoundLoop:
    """The Ray handles of one PPO run and one method per step of a round.

    ``parameter_refs[l]`` are the parameters learner ``l``'s rollout actors sample with next:
    that learner's own after a non-sync round, the average of all learners after a sync round.
    A rollout actor that dies is restarted by Ray and its sample redone (``restarts``). The
    ``ParameterServer`` lives in this (the driver's) process: it merges a few moments and
    averages parameters the driver holds references to, and a process of its own would cost
    every run a Ray worker's start for that.
    """

    def __init__(self, run: RunContext) -> None:
        self.processes = ProcessOwner()
        with self.processes.closed_on_failure():  # also on Ctrl-C part-way
            self._start(run)

    def _start(self, run: RunContext) -> None:
        import ray

        from drlcli.parameter_averaging import average_state_dicts
        from drlcli.runtime.mujoco_actor import MuJoCoActor
        from drlcli.runtime.parameter_server import ParameterServer
        from drlcli.runtime.ppo_workers import PPOLearnerWorker

        config, topology = run.config, run.topology
        stored = run.stored
        self.config, self.topology = config, topology
        params = config.algo_params
        resources = process_resources(
            topology,
            evaluator_has_own_process(config, type(self)),
            concurrent_runs=run.concurrent_runs,
        )
        stored_rms = None if stored is None else stored.resumed_obs_rms_state
        started = self.processes.started
        self.parameter_server = ParameterServer(stored_rms)
        # PPO's learners start identical, from one seed (parameter averaging keeps them close):
        # each is built from learner 0's context.
        learner_context = run.learner_context(0)
        self.learners = [
            started(
                ray.remote(PPOLearnerWorker).options(**resources.learner).remote(learner_context)
            )
            for _ in range(topology.num_learners)
        ]
        self.rollout_actors = self.processes.started_rollout_actors(
            MuJoCoActor,
            [run.rollout_actor_context(index) for index in range(topology.num_actors)],
            resources.rollout_actor,
            config.max_rollout_actor_restarts,
        )
        self.restarts = RestartCounter(
            config.max_rollout_actor_restarts, list(range(topology.num_actors))
        )
        self.roles = {actor_id_of(w): f"learner {i}" for i, w in enumerate(self.learners)}
        self.roles |= {
            actor_id_of(a): f"rollout actor {i}" for i, a in enumerate(self.rollout_actors)
        }
        # Each rollout actor's reward-scaler moments as of its last round: not the record (that
        # is the actor's own state_dict) but the copy a restarted process is restored from.
        self.reward_moments: list[dict[str, Any] | None] = [None] * topology.num_actors
        if stored is not None:
            states = stored.learner_states
            self._restore_rollout_actors(states)
            if len(states) != len(self.learners):  # another device count: start from the mean
                networks = [{part: s[part] for part in ("actor", "value")} for s in states]
                states = [{**average_state_dicts(networks), "optimizer": states[0]["optimizer"]}]
                states *= len(self.learners)
            pairs = zip(self.learners, states, strict=True)
            _get([learner.load_state_dict.remote(s) for learner, s in pairs], self.roles)
        else:  # identical seeds already give identical learners; broadcasting makes it explicit
            initial = self.learners[0].network_state.remote()
            _get([w.load_network_state.remote(initial) for w in self.learners[1:]], self.roles)
        self.parameter_refs = [learner.network_state.remote() for learner in self.learners]
        self.obs_rms = self.parameter_server.get_obs_rms()
        self.warm_up_steps = 0  # of a fresh run that standardises observations (``warm_up``)
        if stored is None and params.normalize_observations:
            self.warm_up_steps = params.observation_warmup_steps or config.rollout_length
        self.last_trained_refs: list[Any] = []

    def warm_up(self) -> None:
        """A fresh run's observation warm-up (``WarmsUp``), before its first round."""
        if self.warm_up_steps:
            self.obs_rms = self._warm_up_observations(self.warm_up_steps)

    def run_round(self, round_index: int) -> tuple[list[dict], dict]:
        """Sample, merge statistics, train, sync. Returns (rollout stats, learner metrics)."""
        import ray

        config, topology = self.config, self.topology
        obs_rms = self.obs_rms
        sampling = [self._sample(index, obs_rms) for index in range(topology.num_actors)]
        stats = [
            self._sampled_stats(index, sampling, obs_rms) for index in range(topology.num_actors)
        ]
        trajectory_refs = [trajectory for trajectory, _ in sampling]
        for entry in stats:
            del entry["process_id"]
        stats[0]["rollout_actor_restarts"] = self.restarts.take_new_restarts()
        self.reward_moments = [s.pop("reward_moments") for s in stats]
        # All rollout actors' increments first, then one merge into the global history.
        increment = merge_rms_states([RmsState.from_dict(s["obs_rms_moments"]) for s in stats])
        self.obs_rms = self.parameter_server.update_obs_rms(increment.to_dict())

        state_refs, metric_refs = [], []
        for learner_index, learner in enumerate(self.learners):
            own = [trajectory_refs[a] for a in self.topology.actors_of_learner(learner_index)]
            state_ref, metric_ref = learner.train_round.options(num_returns=2).remote(*own)
            state_refs.append(state_ref)
            metric_refs.append(metric_ref)
        learner_metrics = average_metrics(_get(metric_refs, self.roles))
        self.last_trained_refs = state_refs
        if len(self.learners) > 1 and (round_index + 1) % config.param_sync_interval == 0:
            states = _get(state_refs, self.roles)
            averaged = ray.put(self.parameter_server.average_parameters(*states))
            _get([w.load_network_state.remote(averaged) for w in self.learners], self.roles)
            self.parameter_refs = [averaged] * len(self.learners)
        else:
            self.parameter_refs = state_refs
        return stats, learner_metrics

    def _sample(self, actor_index: int, obs_rms: dict[str, Any] | None) -> tuple[Any, Any]:
        """Start rollout actor ``actor_index``'s sample: (trajectory ref, stats ref)."""
        config = self.config
        owner = self.topology.learner_of_actor(actor_index)
        return (
            self.rollout_actors[actor_index]
            .sample.options(num_returns=2)
            .remote(
                self.parameter_refs[owner],
                config.rollout_length,
                config.gamma,
                config.gae_lambda,
                obs_rms,
            )
        )

    def _warm_up_observations(self, steps: int) -> dict[str, Any] | None:
        """Every rollout actor's warm-up (``MuJoCoActor.warm_up_observations``), its moments
        merged like a round's increments and then once into the ParameterServer, so that the
        first round already standardises. Returns the merged statistics."""
        calls = [actor.warm_up_observations.remote(steps) for actor in self.rollout_actors]
        answers = [
            self._answer(
                index,
                calls[index],
                partial(self.rollout_actors[index].warm_up_observations.remote, steps),
            )
            for index in range(len(self.rollout_actors))
        ]
        increment = merge_rms_states([RmsState.from_dict(a["obs_rms_moments"]) for a in answers])
        return self.parameter_server.update_obs_rms(increment.to_dict())

    def _sampled_stats(
        self, actor_index: int, sampling: list[tuple[Any, Any]], obs_rms: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The stats of rollout actor ``actor_index``'s sample (``_answer``); a redone sample
        uses the same parameters and statistics, and ``sampling`` then holds its refs."""

        def redo() -> Any:
            sampling[actor_index] = self._sample(actor_index, obs_rms)
            return sampling[actor_index][1]

        return self._answer(actor_index, sampling[actor_index][1], redo)

    def _answer(self, actor_index: int, ref: Any, redo: Any) -> dict[str, Any]:
        """What rollout actor ``actor_index``'s call ``ref`` returns (a dict with the
        ``process_id`` it ran in). Where its process died (during the call or before it), Ray
        restarts it; its reward-scaler moments of the previous round are restored and the call
        is made again with ``redo()`` (which returns the new ref)."""
        while True:
            try:
                answer = _get(ref, self.roles)
            except WorkerDied as death:
                self._count_death(actor_index, death)
            else:
                if not self.restarts.restarted_unseen(actor_index, answer["process_id"]):
                    return answer
            self._restore(actor_index)
            ref = redo()

    def _restore(self, actor_index: int) -> None:
        """Restore a restarted rollout actor's reward-scaler moments; a process that dies again
        while it is restored is one restart more (``max_rollout_actor_restarts`` decides)."""
        restore = self.rollout_actors[actor_index].restore_reward_scaler.remote
        while True:
            try:
                get_when_restarted(partial(restore, self.reward_moments[actor_index]), self.roles)
                return
            except WorkerDied as death:
                self._count_death(actor_index, death)

    def _count_death(self, actor_index: int, death: WorkerDied) -> None:
        """Count the death of rollout actor ``actor_index``'s process; any other death (or a
        constructor that raised: a restart would fail the same way) ends the run."""
        if death.init_failed or death.actor_id != actor_id_of(self.rollout_actors[actor_index]):
            raise death
        self.restarts.died(actor_index, death.reason)

    def checkpoint_parts(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The global observation statistics and every learner's resumable state, with the
        states of its rollout actors (``rollout_actors``: ``MuJoCoActor.state_dict()`` each, in
        the order of ``Topology.actors_of_learner``: their episodes, random streams and reward
        statistics, an exact resume). A rollout actor that died since its sample is restarted
        (``_answer``) and the checkpoint records its fresh process: new episodes, the reward
        statistics of the round."""
        rollout_refs = [actor.state_dict.remote() for actor in self.rollout_actors]
        states = _get([learner.state_dict.remote() for learner in self.learners], self.roles)
        rollout_states = [
            self._answer(index, rollout_refs[index], self.rollout_actors[index].state_dict.remote)
            for index in range(len(self.rollout_actors))
        ]
        for rollout_state in rollout_states:
            del rollout_state["process_id"]
        for learner_index, state in enumerate(states):
            owned = self.topology.actors_of_learner(learner_index)
            state["rollout_actors"] = [rollout_states[a] for a in owned]
        return self.parameter_server.get_obs_rms(), states

    def _restore_rollout_actors(self, states: list[dict[str, Any]]) -> None:
        """Each rollout actor continues where the checkpoint left it (``rollout_actor_states``).

        Under the same topology and number of environments: its whole state, episodes, noise
        and reward statistics (``MuJoCoActor.load_state_dict``), so that the resumed run samples
        what the uninterrupted one would have. Under the same topology with another number of
        environments: its reward statistics, the episodes restart from reset. Under another
        topology every actor starts its reward statistics from the merge of all stored ones.
        Checkpoints without rollout actor states (and runs with reward scaling off) restart both.
        """
        from drlcli.runtime.mujoco_actor import rollout_actor_states

        stored = [rollout_actor_states(state) for state in states]
        if any(per_learner is None for per_learner in stored):
            return
        same_topology = len(stored) == len(self.learners) and all(
            len(per_learner) == len(self.topology.actors_of_learner(learner_index))
            for learner_index, per_learner in enumerate(stored)
        )
        if not same_topology:
            moments = [entry.get("reward_scaler") for per in stored for entry in per]
            merged = merge_rms_states([RmsState.from_dict(m) for m in moments if m is not None])
            abs_max = max((float(m.get("abs_max", 0.0)) for m in moments if m), default=0.0)
            start = None if merged is None else {**merged.to_dict(), "abs_max": abs_max}
            self._restore_reward_scalers([start] * self.topology.num_actors)
            return
        assignment: dict[int, dict[str, Any]] = {}
        for learner_index, per_learner in enumerate(stored):
            owned = self.topology.actors_of_learner(learner_index)
            assignment |= dict(zip(owned, per_learner, strict=True))
        actor_states = [assignment[index] for index in range(self.topology.num_actors)]
        num_envs = self.config.env.num_envs
        if not all("envs" in s and len(s["envs"]["envs"]) == num_envs for s in actor_states):
            self._restore_reward_scalers([s.get("reward_scaler") for s in actor_states])
            return
        self.reward_moments = [s.get("reward_scaler") for s in actor_states]
        loads = [
            partial(actor.load_state_dict.remote, actor_states[index])
            for index, actor in enumerate(self.rollout_actors)
        ]
        calls = [load() for load in loads]
        for index, call in enumerate(calls):  # a process that dies meanwhile loads it again
            self._answer(index, call, loads[index])

    def _restore_reward_scalers(self, moments: list[dict[str, Any] | None]) -> None:
        """Rollout actor ``i`` continues its reward statistics from ``moments[i]``."""
        self.reward_moments = list(moments)
        for index in range(len(self.rollout_actors)):
            self._restore(index)

    def evaluation_host(self) -> tuple[Any, str, bool]:
        """Rollout actor 0 (``EvaluationHost.evaluate_policy``; Ray restarts it): a run without
        periodic evaluation evaluates its final policy there (``HasEvaluationHost``)."""
        return self.rollout_actors[0], "rollout actor 0", True

    def close(self) -> None:
        self.processes.close()

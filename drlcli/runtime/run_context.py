"""What a run's processes are built from and what its round loop offers the driver:
``RunContext`` (decided by the driver before any process starts) and the one record each process
class is constructed from (``LearnerContext``, ``RolloutActorContext``,
``OffPolicyWorkerContext``, ``EvaluatorContext``); the ``RoundLoop`` protocol each algorithm's
runtime implements, and its optional capabilities (``WarmsUp``, ``HasEvaluationHost``,
``ReplaySaving``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from drlcli.algos.entry_types import LearnerContext, OffPolicy, RoundPlan
from drlcli.runtime.restarts import RestartCounter

if TYPE_CHECKING:
    from drlcli.actors.spec import ActorSpec
    from drlcli.checkpoints.record import Checkpoint
    from drlcli.checkpoints.replay_file import ReplayStamp
    from drlcli.config import Config, EnvConfig
    from drlcli.env_facts import EnvFacts
    from drlcli.topology import TrainingTopology


@dataclass(frozen=True)
class RunContext:
    """What a run's round loop is built from, decided by the driver before any process starts.

    Attributes:
        config: the run's resolved config.
        topology: learners, their device and the rollout actors of each.
        spec: the policy actor every process builds.
        facts: the task's spaces.
        plan: the rounds this run trains (learners keep their schedules by it).
        stored: the checkpoint resumed from, or None.
        concurrent_runs: runs of one ``drl tune`` trial (its seeds) training side by side in
            its placement group: this run's processes take their share of it.
    """

    config: Config
    topology: TrainingTopology
    spec: ActorSpec
    facts: EnvFacts
    plan: RoundPlan
    stored: Checkpoint | None = None
    concurrent_runs: int = 1

    def learner_context(self, learner_index: int) -> LearnerContext:
        """What learner ``learner_index``'s process builds its learner from."""
        return LearnerContext(
            spec=self.spec,
            facts=self.facts,
            params=self.config.algo_params,
            gamma=self.config.gamma,
            total_env_steps=self.config.total_env_steps,
            learners=self.topology.num_learners,
            device=self.topology.learner_device,
            seed=self.config.env.seed + learner_index,
            plan=self.plan,
            gae_lambda=self.config.gae_lambda,
        )

    def rollout_actor_context(self, actor_id: int) -> RolloutActorContext:
        """What rollout actor ``actor_id``'s process is built from."""
        return RolloutActorContext(
            actor_id, self.config.env, self.spec, self.config.algo_params, self.config.gamma
        )


@dataclass(frozen=True)
class RolloutActorContext:
    """What a rollout actor's process is built from: PPO's ``MuJoCoActor`` uses all of it, an
    off-policy ``EnvStepper`` (no policy) its id and environments.

    Attributes:
        actor_id: its index in the topology (seeds its environments and generators).
        env: the task's config (id, kwargs, ``num_envs``, seed, wrappers, ...).
        spec: the policy actor it samples with.
        params: the algorithm's ``algo_params``.
        gamma: discount (GAE, reward scaling).
    """

    actor_id: int
    env: EnvConfig
    spec: ActorSpec
    params: Any
    gamma: float


@dataclass(frozen=True)
class EvaluatorContext:
    """What the evaluator (``PolicyEvaluator``, in its own process or a host's) is built from.

    Attributes:
        env: the training task's config (id, kwargs, time limit, success rule; its seed is
            offset for evaluation).
        spec: the run's policy actor, rebuilt in the evaluator's process.
        episodes: deterministic episodes per evaluation.
    """

    env: EnvConfig
    spec: ActorSpec
    episodes: int


@dataclass(frozen=True)
class OffPolicyWorkerContext:
    """What an off-policy learner's process (``OffPolicyLearnerWorker``) is built from.

    Attributes:
        learner: what its learner is built from.
        training: the algorithm's ``OffPolicy`` part (which learner to build).
        steppers: its rollout actors' Ray handles (``EnvStepper``), in topology order.
        envs_per_stepper: environments of each.
        torch_threads: torch threads of the process.
        restarts: counts its rollout actors' restarts against the run's limit.
    """

    learner: LearnerContext
    training: OffPolicy
    steppers: list[Any]
    envs_per_stepper: int
    torch_threads: int
    restarts: RestartCounter


class RoundLoop(Protocol):
    """The Ray side of one training run: built as ``RoundLoop(run)`` from a ``RunContext``,
    then driven by the run loop in ``runtime/training.py`` one round at a time."""

    def run_round(self, round_index: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
        """One round: ``(rollout stats per rollout actor or learner, learner metrics averaged
        over learners)``. Each learner keeps its own schedules (the run's ``RoundPlan``)."""
        ...

    def checkpoint_parts(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """``(global observation statistics or None, every learner's resumable state)``."""
        ...

    def close(self) -> None:
        """Stop every Ray actor the loop started."""
        ...


@runtime_checkable
class WarmsUp(Protocol):
    """An optional capability of a round loop: work before the first round that the run names
    as a phase of its own (PPO's observation warm-up)."""

    def warm_up(self) -> None:
        """Run it (nothing where there is none: a resumed run, statistics off)."""
        ...


@runtime_checkable
class HasEvaluationHost(Protocol):
    """An optional capability of a round loop: one of its processes is an ``EvaluationHost``
    (``drlcli/evaluation.py``: ``PolicyEvaluator``'s evaluation in that process). A run without
    periodic evaluation then evaluates its final policy there and starts no evaluator process."""

    def evaluation_host(self) -> tuple[Any, str, bool]:
        """``(Ray actor handle, what the process is, whether Ray restarts it)``, e.g.
        ``(rollout actor 0, "rollout actor 0", True)``; called before ``close``."""
        ...


@runtime_checkable
class ReplaySaving(Protocol):
    """An optional capability of a round loop: saving and refilling its replay buffers."""

    def save_replay(self, path: Path, stamp: ReplayStamp) -> None: ...

    def load_replay(self, path: Path) -> None: ...

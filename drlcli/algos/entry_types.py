"""What an algorithm declares: the ``Algorithm`` entry type (with ``OffPolicy``, ``RoundShape``,
``RunShape`` and ``MemoryNeed``), and the plain records its learners are built from
(``LearnerContext``, ``RoundPlan``). The entries themselves are listed in
``algos/registry.py``; the runtime's side (``RunContext``, the ``RoundLoop`` protocol) is
``runtime/run_context.py``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drlcli.actors.spec import ActorSpec
    from drlcli.env_facts import EnvFacts


@dataclass(frozen=True)
class RoundPlan:
    """The rounds a run trains: up to ``total_rounds`` (counted across resumes), each of
    ``steps_per_round`` env steps (all rollout actors together), from ``start_round`` and
    ``start_env_steps`` (a resumed run's; 0 for a fresh one)."""

    total_rounds: int
    steps_per_round: int
    start_round: int = 0
    start_env_steps: int = 0

    @property
    def planned_env_steps(self) -> int:
        """The env steps the run has trained when its last round ends."""
        remaining_rounds = self.total_rounds - self.start_round
        return self.start_env_steps + remaining_rounds * self.steps_per_round


@dataclass(frozen=True)
class LearnerContext:
    """Everything one learner is built from, sent once to its process (instead of a dozen
    arguments re-typed at every layer).

    Attributes:
        spec: the policy actor the learner builds and optimises.
        facts: the task's spaces (sizes and action bounds).
        params: the algorithm's ``algo_params``.
        gamma: discount.
        total_env_steps: the run's planned env steps, all learners together (schedules).
        learners: the learners of the run (data-parallel ones update together).
        device: ``cpu`` or ``cuda``.
        seed: this learner's seed (initialisation, sampling).
        plan: the run's rounds (a learner that keeps its schedules by rounds: PPO's).
        gae_lambda: GAE's lambda (PPO's; None where the algorithm has none).
    """

    spec: ActorSpec
    facts: EnvFacts
    params: Any
    gamma: float
    total_env_steps: int
    learners: int
    device: str
    seed: int
    plan: RoundPlan
    gae_lambda: float | None = None


@dataclass(frozen=True)
class RoundShape:
    """The sizes of a round, once the topology is known: what ``check_round`` reads."""

    num_envs: int  # per rollout actor
    rollout_length: int
    num_actors: int
    num_learners: int

    @classmethod
    def of(cls, config: Any, topology: Any, **sizes: int) -> Any:
        """A ``Config``'s round under its resolved ``TrainingTopology`` (``RunShape.of`` takes
        the task's ``obs_dim`` and ``action_dim`` too)."""
        return cls(
            num_envs=config.env.num_envs,
            rollout_length=config.rollout_length,
            num_actors=topology.num_actors,
            num_learners=topology.num_learners,
            **sizes,
        )


@dataclass(frozen=True)
class RunShape(RoundShape):
    """The sizes a run's memory follows, once the topology and the task are known."""

    obs_dim: int
    action_dim: int


@dataclass(frozen=True)
class MemoryNeed:
    """A part of a run that must fit in memory: what it is, its bytes, the field that shrinks
    it (for the message that refuses a run)."""

    what: str
    bytes: int
    shrink: str


@dataclass(frozen=True)
class PPORounds:
    """How PPO trains (``runtime/ppo_loop.py``'s ``PPORoundLoop``): rollout actors
    (``MuJoCoActor``) sample with their learner's policy and compute GAE, each learner trains on
    its own rollout actors' trajectories, a parameter server merges the observation statistics
    and averages the learners' networks every ``param_sync_interval`` rounds."""


@dataclass(frozen=True)
class OffPolicy:
    """How a replay-based algorithm trains on the shared off-policy layer (``drlcli/off_policy/``,
    ``runtime/off_policy_loop.py``'s ``OffPolicyRoundLoop``); its params are
    ``OffPolicyParams``.

    Attributes:
        learner: ``(LearnerContext) -> OffPolicyLearner``: the learner, built in its Ray
            process (a function of the algorithm's entry that imports its learner module there:
            the registry imports no torch).
        network_keys: the entries of a learner state that are networks (averaged when a run
            resumes under another learner count; the rest comes from learner 0).
    """

    learner: Callable[[LearnerContext], Any]
    network_keys: tuple[str, ...]


@dataclass(frozen=True)
class Algorithm:
    """What drl needs to know about one algorithm.

    Attributes:
        name: the config's ``algo`` value.
        summary: one line for help texts.
        params_type: the frozen dataclass of its ``algo_params``.
        builtin_builder: ``"module:callable"`` of its built-in policy actor.
        other_builtin_builders: drl's other policy actors its params may choose (PPO's
            recurrent one): imported without ``--allow-builder`` like ``builtin_builder``.
        actor_spec: ``(params, action_low, action_high) -> ActorSpec``: the run's policy actor
            (built-in, or a custom one the params name).
        training: how it trains, which decides its round loop (``runtime/training.py``'s
            ``round_loop_class``): ``PPORounds``, or ``OffPolicy`` with its learner.
        learner_state_keys: what every entry of a checkpoint's ``learner_states`` must hold.
        metrics: its CSV columns after the common ones, in order, each with its meaning.
        observation_clip: ``params -> clip`` when it standardises observations with running
            statistics (``obs_rms_state``), None when it does not.
        normalization_inside_actor: how its actor normalises raw observations when there are
            no running statistics (reported by ``drl export``), None for not at all.
        check_params: the rules between its params, run by ``load_config`` (ConfigError).
        check_learner_device: the rules that need the learner device and count
            ``(params, spec, device, learners)``, run before any worker starts (ConfigError).
        check_learner_state: extra checks of one stored learner state; returns a problem or
            None (``drl verify`` and ``--resume``).
        check_resume: ``(params, state, critic_dim, action_dim) -> problem or None``: what of
            one stored learner state the config's params cannot take (layer widths; the
            networks beyond the policy actor read ``critic_dim`` observations), before
            anything starts.
        check_resume_actor: ``(params, actor_semantics) -> problem or None``: what of the
            checkpoint's policy actor the config's params cannot take, said in the config's
            terms, before the semantics are compared field by field.
        resume_fixed_params: the params (attributes of ``params_type``, properties included)
            whose value a resumed run must keep: what ``check_resume`` compares (the networks
            beyond the policy actor). ``drl tune``'s population-based training, whose trials
            resume from each other's checkpoints with other values, refuses a searched key
            that changes one.
        check_actor: what the algorithm and its params need of a policy actor beyond the
            contract ``(actor, params, obs_dim, action_dim)``, run on the driver's probe before
            anything starts (PolicyActorContractError).
        replay_saving: ``params -> whether the run saves its replay buffer``, for algorithms
            whose round loop implements ``ReplaySaving``; None when it cannot.
        memory_needs: ``(params, RunShape) -> [MemoryNeed]``: its large allocations (rollouts,
            replay buffers, networks beyond the policy actor), checked before anything starts.
        check_round: ``(params, RoundShape)``: the rules between its params and the size of a
            round (PPO's minibatches), run before anything starts (ConfigError).
        audited_params: the params ``drl verify`` records of a checkpoint (how it was
            trained beyond the defaults' algorithm: PPO's stabilisers).
        resume_ignored_params: ``params -> names``: the params a resumed run does not read,
            its checkpoint's state holding what they started (PPO's ``learning_rate`` under
            ``adaptive_kl``); population-based training refuses to search them.
    """

    name: str
    summary: str
    params_type: type
    builtin_builder: str
    actor_spec: Callable[[Any, Sequence[float], Sequence[float]], ActorSpec]
    training: PPORounds | OffPolicy
    learner_state_keys: tuple[str, ...]
    metrics: dict[str, str]
    observation_clip: Callable[[Any], float | None]
    normalization_inside_actor: str | None = None
    check_params: Callable[[Any], None] = lambda params: None
    check_learner_device: Callable[[Any, Any, str, int], object] = (
        lambda params, spec, device, learners: None
    )
    check_learner_state: Callable[[dict[str, Any]], str | None] = lambda state: None
    check_resume: Callable[[Any, dict[str, Any], int, int], str | None] = (
        lambda params, state, obs_dim, action_dim: None
    )
    check_resume_actor: Callable[[Any, dict[str, Any]], str | None] = lambda params, semantics: None
    resume_fixed_params: tuple[str, ...] = ()
    other_builtin_builders: tuple[str, ...] = ()
    check_actor: Callable[[Any, Any, int, int], None] = lambda actor, params, obs_dim, action_dim: (
        None
    )
    replay_saving: Callable[[Any], bool] | None = None
    memory_needs: Callable[[Any, RunShape], list[MemoryNeed]] = lambda params, shape: []
    check_round: Callable[[Any, RoundShape], None] = lambda params, shape: None
    audited_params: tuple[str, ...] = ()
    resume_ignored_params: Callable[[Any], tuple[str, ...]] = lambda params: ()

    @property
    def off_policy(self) -> OffPolicy | None:
        """Its ``OffPolicy`` part when it trains on the off-policy layer, else None."""
        return self.training if isinstance(self.training, OffPolicy) else None

"""The registry entry of a soft actor-critic on the shared off-policy layer (FlashSAC, SAC): what
every such entry repeats, built once by ``soft_actor_critic_entry``; an algorithm gives what is
its own (params, built-in actor, learner, metric columns, critics). No torch: the registry's
entries import it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drlcli.algos.entry_types import Algorithm, MemoryNeed, OffPolicy, RunShape
from drlcli.off_policy.soft_actor_critic import NETWORK_KEYS, return_scaler_problem

# What every soft actor-critic learner's state holds (soft_actor_critic.SoftActorCriticState).
SOFT_ACTOR_CRITIC_STATE_KEYS = (
    "actor",
    "critic",
    "target_critic",
    "log_temperature",
    "actor_optimizer",
    "critic_optimizer",
    "temperature_optimizer",
    "updates",
    "return_scaler",
    "transitions",
)
# The columns every off-policy run writes after its algorithm's own.
OFF_POLICY_METRICS = {
    "updates": "gradient updates this round, per learner",
    "updates_per_second": "gradient updates per second of update time, per learner",
    "buffer_size": "transitions in the replay buffers, all learners",
}


def replay_memory_needs(params: Any, shape: RunShape) -> list[MemoryNeed]:
    """Every learner's replay buffer (float32 ``s, s', a, r, terminated``), and twice more
    while it is saved (``params``: ``buffer_size``, ``save_replay_buffer``)."""
    transition_bytes = 8 * shape.obs_dim + 4 * shape.action_dim + 8
    replay = shape.num_learners * params.buffer_size * transition_bytes
    needs = [
        MemoryNeed(
            f"{shape.num_learners} replay buffer(s) of {params.buffer_size} transitions",
            replay,
            "algo_params.buffer_size",
        )
    ]
    if params.save_replay_buffer:
        needs.append(
            MemoryNeed(
                "the copies of saving the replay buffers",
                2 * replay,
                "algo_params.buffer_size, or save_replay_buffer: false",
            )
        )
    return needs


@dataclass(frozen=True)
class Critics:
    """An algorithm's critic networks (``critic`` and ``target_critic`` of its learner state),
    as its entry's memory and resume checks need them.

    Attributes:
        name: what they are called in messages ("critics", "Q networks").
        shapes: ``(params, obs_dim, action_dim) -> state dict`` of the critic ``params`` build,
            on the meta device (shapes and dtypes, nothing allocated).
        widths: ``params -> the settings that decide those shapes``, for messages.
        shrink: the setting that makes them smaller (the memory check's message).
        other_problem: ``(params, state) -> problem or None``: what else of a stored state
            the config cannot take, once the shapes agree.
    """

    name: str
    shapes: Callable[[Any, int, int], dict[str, Any]]
    widths: Callable[[Any], str]
    shrink: str
    other_problem: Callable[[Any, dict[str, Any]], str | None] = lambda params, state: None

    def resume_problem(
        self, params: Any, state: dict[str, Any], obs_dim: int, action_dim: int
    ) -> str | None:
        """What keeps a stored learner state's critics from those ``params`` build, or None
        (``Algorithm.check_resume``). The actor's widths are in the actor semantics."""
        wanted = self.shapes(params, obs_dim, action_dim)
        settings = self.widths(params)
        for key in ("critic", "target_critic"):
            stored = state[key]
            if not isinstance(stored, dict) or not all(
                hasattr(t, "shape") for t in stored.values()
            ):
                return f"its {key} is not a state dict of tensors; the file is damaged"
            if set(stored) != set(wanted):
                return (
                    f"its {key} has {len(stored)} tensors, the config builds {len(wanted)} "
                    f"({settings}): resume with the {self.name} it was trained with"
                )
            for name, tensor in wanted.items():
                if tuple(stored[name].shape) != tuple(tensor.shape):
                    return (
                        f"its {key}'s {name} has shape {list(stored[name].shape)}, the config "
                        f"builds {list(tensor.shape)} ({settings}): resume with the {self.name} "
                        "it was trained with"
                    )
        return self.other_problem(params, state)

    def memory_needs(self, params: Any, shape: RunShape) -> list[MemoryNeed]:
        """Every learner's replay buffer, and its critics: online and target, gradients and
        Adam's two moments (``Algorithm.memory_needs``)."""
        wanted = self.shapes(params, shape.obs_dim, shape.action_dim)
        critic_bytes = sum(t.numel() * t.element_size() for t in wanted.values())
        learners = shape.num_learners
        return [
            *replay_memory_needs(params, shape),
            MemoryNeed(
                f"{learners} learner(s)' {self.name} with targets, gradients and Adam moments",
                5 * critic_bytes * learners,
                self.shrink,
            ),
        ]


def soft_actor_critic_entry(
    *,
    learner: Callable[[Any], Any],
    critics: Critics,
    metrics: dict[str, str],
    **own: Any,
) -> Algorithm:
    """The ``Algorithm`` of a soft actor-critic on the off-policy layer: its ``learner``
    (``OffPolicy.learner``), its ``critics``, its metric columns before the off-policy ones,
    and ``own``: the ``Algorithm`` fields that are its own (name, summary, params type, built-in
    builder, actor spec, params rules, ``resume_fixed_params``, ...). Shared: the learner-state
    keys and checks, no running observation statistics (the actor normalises its inputs, if at
    all), replay saving, memory and resume checks from ``critics``."""
    return Algorithm(
        training=OffPolicy(learner=learner, network_keys=NETWORK_KEYS),
        learner_state_keys=SOFT_ACTOR_CRITIC_STATE_KEYS,
        metrics={**metrics, **OFF_POLICY_METRICS},
        observation_clip=lambda params: None,
        check_learner_state=return_scaler_problem,
        check_resume=critics.resume_problem,
        replay_saving=lambda params: params.save_replay_buffer,
        memory_needs=critics.memory_needs,
        **own,
    )

"""SAC's registry entry: what drl needs to know about ``algo: sac``. Everything else (round loop,
learner processes, rollout actors, replay, resume) is the shared off-policy layer's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drlcli.actors.spec import ActorSpec, check_actor_config
from drlcli.algos.entry_types import Algorithm, MemoryNeed, OffPolicy, RunShape
from drlcli.algos.sac.params import SACParams
from drlcli.off_policy.memory_needs import replay_memory_needs
from drlcli.off_policy.soft_actor_critic import NETWORK_KEYS, return_scaler_problem

SAC_BUILDER = "drlcli.algos.sac.actor:build_sac_actor"


def sac_actor_spec(
    params: SACParams, action_low: Sequence[float], action_high: Sequence[float]
) -> ActorSpec:
    """The configured custom actor (``actor_config``), else the built-in SAC actor."""
    if params.actor_config is not None:
        return ActorSpec(params.actor_config.builder, dict(params.actor_config.kwargs))
    return ActorSpec(
        SAC_BUILDER,
        {
            "action_low": [float(x) for x in action_low],
            "action_high": [float(x) for x in action_high],
            "hidden_sizes": list(params.hidden_sizes),
        },
    )


def check_params(params: SACParams) -> None:
    if params.actor_config is not None:
        check_actor_config(params.actor_config)


def _critic_shapes(params: SACParams, obs_dim: int, action_dim: int) -> dict[str, Any]:
    """The state dict of the Q networks ``params`` build, on the meta device (nothing
    allocated)."""
    import torch

    from drlcli.algos.sac.critic import TwinQ

    with torch.device("meta"):
        return TwinQ(obs_dim, action_dim, params.hidden_sizes).state_dict()


def critic_problem(
    params: SACParams, state: dict[str, Any], obs_dim: int, action_dim: int
) -> str | None:
    """What keeps a stored learner state's Q networks from those ``params`` build
    (``hidden_sizes``), or None. The actor's widths are in the actor semantics."""
    wanted = _critic_shapes(params, obs_dim, action_dim)
    for key in ("critic", "target_critic"):
        stored = state[key]
        if not isinstance(stored, dict) or not all(hasattr(t, "shape") for t in stored.values()):
            return f"its {key} is not a state dict of tensors; the file is damaged"
        shapes = {name: tuple(tensor.shape) for name, tensor in stored.items()}
        if shapes != {name: tuple(tensor.shape) for name, tensor in wanted.items()}:
            return (
                f"its {key} has other layers than the config builds (algo_params.hidden_sizes "
                f"{list(params.hidden_sizes)}): resume with the widths it was trained with"
            )
    return None


def sac_memory_needs(params: SACParams, shape: RunShape) -> list[MemoryNeed]:
    """Every learner's replay buffer (float32 ``s, s', a, r, terminated``; twice more while it
    is saved), and its Q networks: online and target, gradients and Adam's two moments."""
    o, a, learners = shape.obs_dim, shape.action_dim, shape.num_learners
    needs = replay_memory_needs(params, shape)
    critic_bytes = sum(t.numel() * t.element_size() for t in _critic_shapes(params, o, a).values())
    needs.append(
        MemoryNeed(
            f"{learners} learner(s)' Q networks with targets, gradients and Adam moments",
            5 * critic_bytes * learners,
            "algo_params.hidden_sizes",
        )
    )
    return needs


SAC = Algorithm(
    name="sac",
    summary="SAC (Haarnoja et al. 2018), off-policy, twin Q, automatic temperature",
    params_type=SACParams,
    builtin_builder=SAC_BUILDER,
    actor_spec=sac_actor_spec,
    round_loop="drlcli.runtime.off_policy_loop:OffPolicyRoundLoop",
    learner_state_keys=(
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
    ),
    metrics={
        "Loss/critic": "sum over both Q networks of the squared TD error, update mean",
        "Loss/actor": "E[alpha log pi - min Q] (without aux losses), actor-step mean",
        "Loss/temperature": "-alpha E[log pi + H_target], actor-step mean (autotune only)",
        "temperature": "entropy temperature alpha, actor-step mean",
        "entropy": "policy entropy estimate -E[log pi], actor-step mean",
        "q_mean": "mean predicted Q of replayed (s, a), both networks",
        "updates": "gradient updates this round, per learner",
        "updates_per_second": "gradient updates per second of update time, per learner",
        "buffer_size": "transitions in the replay buffers, all learners",
    },
    observation_clip=lambda params: None,  # SAC feeds raw observations, as the paper
    check_params=check_params,
    check_learner_state=return_scaler_problem,
    check_resume=critic_problem,
    resume_fixed_params=("hidden_sizes",),
    replay_saving=lambda params: params.save_replay_buffer,
    memory_needs=sac_memory_needs,
    off_policy=OffPolicy(
        learner="drlcli.algos.sac.learner:build_sac_learner",
        network_keys=NETWORK_KEYS,
    ),
)

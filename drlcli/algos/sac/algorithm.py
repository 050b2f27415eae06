"""SAC's registry entry: what drl needs to know about ``algo: sac``. Everything else (round loop,
learner processes, rollout actors, replay, resume) is the shared off-policy layer's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drlcli.actors.spec import ActorSpec, check_actor_config
from drlcli.algos.entry_types import LearnerContext
from drlcli.algos.sac.params import SACParams
from drlcli.off_policy.entry import Critics, soft_actor_critic_entry

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


CRITICS = Critics(
    name="Q networks",
    shapes=_critic_shapes,
    widths=lambda params: f"algo_params.hidden_sizes {list(params.hidden_sizes)}",
    shrink="algo_params.hidden_sizes",
)


def build_learner(context: LearnerContext) -> Any:
    """``OffPolicy.learner``: the learner module (torch) is imported in the learner's process
    only."""
    from drlcli.algos.sac.learner import SACLearner

    return SACLearner(context)


SAC = soft_actor_critic_entry(
    name="sac",
    summary="SAC (Haarnoja et al. 2018), off-policy, twin Q, automatic temperature",
    params_type=SACParams,
    builtin_builder=SAC_BUILDER,
    actor_spec=sac_actor_spec,
    learner=build_learner,
    critics=CRITICS,
    metrics={
        "Loss/critic": "sum over both Q networks of the squared TD error, update mean",
        "Loss/actor": "E[alpha log pi - min Q] (without aux losses), actor-step mean",
        "Loss/temperature": "-alpha E[log pi + H_target], actor-step mean (autotune only)",
        "temperature": "entropy temperature alpha, actor-step mean",
        "entropy": "policy entropy estimate -E[log pi], actor-step mean",
        "q_mean": "mean predicted Q of replayed (s, a), both networks",
    },
    check_params=check_params,
    resume_fixed_params=("hidden_sizes",),
)

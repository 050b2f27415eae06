"""FlashSAC's registry entry: what drl needs to know about ``algo: flash_sac``, and its
custom-actor and CUDA-graph rules (docs/adr/0017-custom-policy-actors.md), each stated once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drlcli.actors.spec import ActorSpec, check_actor_config
from drlcli.algos.entry_types import LearnerContext
from drlcli.algos.flash_sac.cuda_graph import FLASH_SAC_BUILDER, resolve_cuda_graph
from drlcli.algos.flash_sac.params import FlashSACParams
from drlcli.errors import ConfigError
from drlcli.off_policy.entry import Critics, soft_actor_critic_entry


def flash_sac_actor_spec(
    params: FlashSACParams, action_low: Sequence[float], action_high: Sequence[float]
) -> ActorSpec:
    """The configured custom actor (``actor_config``), else the built-in FlashSAC actor."""
    if params.actor_config is not None:
        return ActorSpec(params.actor_config.builder, dict(params.actor_config.kwargs))
    return ActorSpec(
        FLASH_SAC_BUILDER,
        {
            "action_low": [float(x) for x in action_low],
            "action_high": [float(x) for x in action_high],
            "hidden_dim": params.actor_hidden_dim,
            "num_blocks": params.actor_num_blocks,
            "noise_zeta_mu": params.noise_zeta_mu,
            "noise_zeta_max": params.noise_zeta_max,
        },
    )


def check_params(params: FlashSACParams) -> None:
    """The rules that need no hardware knowledge, at config load."""
    if params.v_min >= params.v_max:
        raise ConfigError(
            f"algo_params.v_min: must be below v_max ({params.v_min} >= {params.v_max})"
        )
    if params.actor_config is None:
        return
    check_actor_config(params.actor_config)
    if params.use_whole_cycle_cuda_graph:
        raise ConfigError(
            "algo_params.use_whole_cycle_cuda_graph: a custom actor (actor_config) cannot run in "
            "a whole-cycle CUDA graph; set it to false"
        )
    if not params.actor_normalize_parameters:
        raise ConfigError(
            "algo_params.actor_normalize_parameters: false only applies to the built-in actor; "
            "a custom actor (actor_config) owns normalize_parameters()"
        )


def _critic_shapes(params: FlashSACParams, obs_dim: int, action_dim: int) -> dict[str, Any]:
    """The state dict of the critic ``params`` build, on the meta device: shapes and dtypes
    only, nothing allocated."""
    import torch

    from drlcli.algos.flash_sac.critic import DoubleCategoricalCritic

    with torch.device("meta"):
        return DoubleCategoricalCritic.from_params(obs_dim, action_dim, params).state_dict()


def critic_support_problem(params: FlashSACParams, state: dict[str, Any]) -> str | None:
    """Another support (``v_min``, ``v_max``) than the config's, with critics of the same
    shapes: the atoms are a buffer the stored state would silently overwrite."""
    atoms = state["critic"]["atoms"]
    low, high = float(atoms[0]), float(atoms[-1])
    if abs(low - params.v_min) > 1e-6 or abs(high - params.v_max) > 1e-6:
        return (
            f"its critic's support is [{low:g}, {high:g}], the config sets v_min {params.v_min:g}"
            f" and v_max {params.v_max:g}: resume with the support it was trained with"
        )
    return None


CRITICS = Critics(
    name="critics",
    shapes=_critic_shapes,
    widths=lambda params: "algo_params.critic_hidden_dim, critic_num_blocks, num_bins",
    shrink="algo_params.critic_hidden_dim",
    other_problem=critic_support_problem,
)


def build_learner(context: LearnerContext) -> Any:
    """``OffPolicy.learner``: the learner module (torch) is imported in the learner's process
    only."""
    from drlcli.algos.flash_sac.learner import FlashSACLearner

    return FlashSACLearner(context)


FLASH_SAC = soft_actor_critic_entry(
    name="flash_sac",
    summary="FlashSAC (arXiv 2604.04539), off-policy, distributional critic, custom actors",
    params_type=FlashSACParams,
    builtin_builder=FLASH_SAC_BUILDER,
    actor_spec=flash_sac_actor_spec,
    learner=build_learner,
    critics=CRITICS,
    metrics={
        "Loss/critic": "cross-entropy of the critic against the projected target, update mean",
        "Loss/actor": "E[alpha log pi - min Q] (without aux losses), actor-update mean",
        "Loss/temperature": "alpha * (H(pi) - H_target), actor-update mean",
        "temperature": "entropy temperature alpha, actor-update mean",
        "entropy": "policy entropy estimate -E[log pi], actor-update mean",
        "q_mean": "mean predicted Q of replayed (s, a) in scaled-reward units",
        "learning_rate": "optimiser step size, mean over the round's updates",
    },
    normalization_inside_actor="the actor's input BatchNorm (running statistics)",
    check_params=check_params,
    check_learner_device=resolve_cuda_graph,
    resume_fixed_params=("critic_hidden_dim", "critic_num_blocks", "num_bins", "v_min", "v_max"),
)

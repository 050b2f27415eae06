"""FlashSAC's registry entry: what drl needs to know about ``algo: flash_sac``, and its
custom-actor and CUDA-graph rules (docs/adr/0017-custom-policy-actors.md), each stated once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drlcli.actors.spec import ActorSpec, check_actor_config
from drlcli.algos.entry_types import Algorithm, MemoryNeed, OffPolicy, RunShape
from drlcli.algos.flash_sac.cuda_graph import FLASH_SAC_BUILDER, resolve_cuda_graph
from drlcli.algos.flash_sac.params import FlashSACParams
from drlcli.errors import ConfigError
from drlcli.off_policy.memory_needs import replay_memory_needs
from drlcli.off_policy.soft_actor_critic import NETWORK_KEYS, return_scaler_problem


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


def critic_problem(
    params: FlashSACParams, state: dict[str, Any], obs_dim: int, action_dim: int
) -> str | None:
    """What keeps a stored learner state's critics from the one ``params`` build, or None:
    a layer of another shape (``critic_hidden_dim``, ``critic_num_blocks``, ``num_bins``), or
    another support (``v_min``, ``v_max``: the atoms are a buffer the stored state would
    silently overwrite). The actor's widths are in the actor semantics."""
    wanted = _critic_shapes(params, obs_dim, action_dim)
    for key in ("critic", "target_critic"):
        stored = state[key]
        if not isinstance(stored, dict) or not all(hasattr(t, "shape") for t in stored.values()):
            return f"its {key} is not a state dict of tensors; the file is damaged"
        if set(stored) != set(wanted):
            return (
                f"its {key} has {len(stored)} tensors, the config builds {len(wanted)} "
                "(algo_params.critic_num_blocks): resume with the critic it was trained with"
            )
        for name, tensor in wanted.items():
            if tuple(stored[name].shape) != tuple(tensor.shape):
                return (
                    f"its {key}'s {name} has shape {list(stored[name].shape)}, the config builds "
                    f"{list(tensor.shape)} (algo_params.critic_hidden_dim, critic_num_blocks, "
                    "num_bins): resume with the critic it was trained with"
                )
    atoms = state["critic"]["atoms"]
    low, high = float(atoms[0]), float(atoms[-1])
    if abs(low - params.v_min) > 1e-6 or abs(high - params.v_max) > 1e-6:
        return (
            f"its critic's support is [{low:g}, {high:g}], the config sets v_min {params.v_min:g}"
            f" and v_max {params.v_max:g}: resume with the support it was trained with"
        )
    return None


def flash_sac_memory_needs(params: FlashSACParams, shape: RunShape) -> list[MemoryNeed]:
    """Every learner's replay buffer (float32 ``s, s', a, r, terminated``; twice more while it
    is saved), and its critics: online and target, gradients and Adam's two moments."""
    o, a, learners = shape.obs_dim, shape.action_dim, shape.num_learners
    needs = replay_memory_needs(params, shape)
    critic_bytes = sum(t.numel() * t.element_size() for t in _critic_shapes(params, o, a).values())
    needs.append(
        MemoryNeed(
            f"{learners} learner(s)' critics with target, gradients and Adam moments",
            5 * critic_bytes * learners,
            "algo_params.critic_hidden_dim",
        )
    )
    return needs


FLASH_SAC = Algorithm(
    name="flash_sac",
    summary="FlashSAC (arXiv 2604.04539), off-policy, distributional critic, custom actors",
    params_type=FlashSACParams,
    builtin_builder=FLASH_SAC_BUILDER,
    actor_spec=flash_sac_actor_spec,
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
        "Loss/critic": "cross-entropy of the critic against the projected target, update mean",
        "Loss/actor": "E[alpha log pi - min Q] (without aux losses), actor-update mean",
        "Loss/temperature": "alpha * (H(pi) - H_target), actor-update mean",
        "temperature": "entropy temperature alpha, actor-update mean",
        "entropy": "policy entropy estimate -E[log pi], actor-update mean",
        "q_mean": "mean predicted Q of replayed (s, a) in scaled-reward units",
        "learning_rate": "optimiser step size, mean over the round's updates",
        "updates": "gradient updates this round, per learner",
        "updates_per_second": "gradient updates per second of update time, per learner",
        "buffer_size": "transitions in the replay buffers, all learners",
    },
    observation_clip=lambda params: None,  # the actor's input BatchNorm normalises
    normalization_inside_actor="the actor's input BatchNorm (running statistics)",
    check_params=check_params,
    check_learner_device=resolve_cuda_graph,
    check_learner_state=return_scaler_problem,
    check_resume=critic_problem,
    resume_fixed_params=("critic_hidden_dim", "critic_num_blocks", "num_bins", "v_min", "v_max"),
    replay_saving=lambda params: params.save_replay_buffer,
    memory_needs=flash_sac_memory_needs,
    off_policy=OffPolicy(
        learner="drlcli.algos.flash_sac.learner:build_flash_sac_learner",
        network_keys=NETWORK_KEYS,
    ),
)

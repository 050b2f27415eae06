"""PPO's registry entry: what drl needs to know about ``algo: ppo``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from drlcli.actors.recurrent_layout import core_of, core_of_kwargs, describe_core
from drlcli.actors.spec import RECURRENT_GAUSSIAN_BUILDER, ActorSpec
from drlcli.algos.entry_types import Algorithm, MemoryNeed, PPORounds, RoundShape, RunShape
from drlcli.algos.ppo.params import STABILISERS, PPOParams
from drlcli.errors import ConfigError
from drlcli.normalization import reward_scaler_state_problem

GAUSSIAN_BUILDER = "drlcli.actors.gaussian:build_gaussian_actor"


def gaussian_actor_spec(
    params: PPOParams, action_low: Sequence[float], action_high: Sequence[float]
) -> ActorSpec:
    """The spec of the built-in PPO policy actor for an environment's action bounds: the
    recurrent one (its core's cell, size and layers in the kwargs) with ``recurrent``."""
    kwargs: dict[str, Any] = {
        "action_low": [float(x) for x in action_low],
        "action_high": [float(x) for x in action_high],
        "hidden_sizes": list(params.hidden_sizes),
        "activation": params.activation,
        "init_log_std": params.init_log_std,
    }
    if params.recurrent is None:
        return ActorSpec(GAUSSIAN_BUILDER, kwargs)
    core = params.recurrent
    return ActorSpec(
        RECURRENT_GAUSSIAN_BUILDER,
        {**kwargs, "cell": core.cell, "size": core.size, "layers": core.layers},
    )


def _list_problem(
    state: dict[str, Any], key: str, item_problem: Callable[[Any], str | None]
) -> str | None:
    """What is wrong with a learner state's optional list ``state[key]`` (one entry per rollout
    actor of the learner), ``key[index] problem`` of its first bad entry, or None."""
    entries = state.get(key)
    if entries is None:
        return None
    if not isinstance(entries, list):
        return f"{key} is a {type(entries).__name__}, expected a list"
    for index, entry in enumerate(entries):
        problem = item_problem(entry)
        if problem is not None:
            return f"{key}[{index}]{problem}"
    return None


def _reward_scaler_problem(scaler: Any) -> str | None:
    """What is wrong with one ``RewardScaler.state_dict()``, after a space, or None."""
    problem = reward_scaler_state_problem(scaler)
    return None if problem is None else f" {problem}"


def _rollout_actor_problem(entry: Any) -> str | None:
    """What is wrong with one ``MuJoCoActor.state_dict()`` (whether it fits its rollout actor
    is checked when it is loaded), with the separator of its place in the message."""
    if not isinstance(entry, dict) or not {"envs", "torch_rng"} <= set(entry):
        return " is not a rollout actor's state"
    problem = reward_scaler_state_problem(entry.get("reward_scaler"))
    return None if problem is None else f".reward_scaler {problem}"


def learner_state_problem(state: dict[str, Any]) -> str | None:
    """What keeps a stored PPO learner state from being resumed, or None."""
    return _list_problem(state, "reward_scalers", _reward_scaler_problem) or _list_problem(
        state, "rollout_actors", _rollout_actor_problem
    )


def value_network_problem(
    params: PPOParams, state: dict[str, Any], obs_dim: int, action_dim: int
) -> str | None:
    """What keeps a stored learner state's value network from the widths ``params`` build
    (``value_hidden_sizes``, else ``hidden_sizes``), or None; the policy's widths are in the
    actor semantics, the input width is checked against the task before (``check_fits``)."""
    value = state["value"]
    if not isinstance(value, dict) or not all(hasattr(t, "shape") for t in value.values()):
        return "its value network is not a state dict of tensors; the file is damaged"
    stored_core = core_of(value)
    wanted_core = params.recurrent_core
    if stored_core != wanted_core:
        return (
            f"its value network's recurrent core is {describe_core(stored_core)}, the config "
            f"builds {describe_core(wanted_core)} (algo_params.recurrent): resume with the "
            "recurrent settings it was trained with"
        )
    stored_normalized = any(str(name).startswith("return_statistics.") for name in value)
    if stored_normalized != params.normalize_value:
        trained = "with" if stored_normalized else "without"
        return (
            f"its value network was trained {trained} normalize_value, the config says "
            f"{str(params.normalize_value).lower()}: resume with the setting it was trained with"
        )
    weights = [
        tensor
        for name, tensor in value.items()
        if str(name).startswith("network.") and str(name).endswith("weight")
    ]
    stored = [int(weight.shape[0]) for weight in weights[:-1]]
    wanted = list(params.value_network_hidden_sizes)
    if stored == wanted:
        return None
    return (
        f"its value network has hidden layers {stored}, the config builds {wanted} "
        "(algo_params.value_hidden_sizes, else hidden_sizes): resume with the widths it was "
        "trained with"
    )


def recurrent_policy_problem(params: PPOParams, semantics: dict[str, Any]) -> str | None:
    """Whether the checkpoint's policy has the recurrent core ``params`` build (ADR 0018)."""
    recurrent = semantics.get("builder") == RECURRENT_GAUSSIAN_BUILDER
    stored = core_of_kwargs(semantics.get("kwargs") or {}) if recurrent else None
    if stored == params.recurrent_core:
        return None
    return (
        f"its policy's recurrent core is {describe_core(stored)}, the config builds "
        f"{describe_core(params.recurrent_core)} (algo_params.recurrent): resume with the "
        "recurrent settings it was trained with, or start a new run"
    )


def check_actor(actor: Any, params: PPOParams, obs_dim: int, action_dim: int) -> None:
    """PPO's learner calls ``log_prob_and_entropy`` (``OnPolicyActor`` in the contract);
    ``policy_last_layer_scale`` needs the built-in policy's output layer, ``rpo_alpha`` a policy
    whose log-prob is of the pre-transform sample around its mean (``clip``)."""
    from drlcli.actors.contract import ENV_SIDE_TRANSFORMS, validate_on_policy_actor
    from drlcli.actors.gaussian import policy_output_layer
    from drlcli.errors import PolicyActorContractError

    validate_on_policy_actor(actor, obs_dim)
    name = type(actor).__name__
    if params.policy_last_layer_scale != 1.0 and policy_output_layer(actor) is None:
        raise PolicyActorContractError(
            "algo_params.policy_last_layer_scale scales the output layer of a Gaussian "
            f"policy's MLP mean; policy actor {name} has none: initialise its layers in its "
            "builder, or remove policy_last_layer_scale"
        )
    if params.rpo_alpha is not None and actor.action_transform_id not in ENV_SIDE_TRANSFORMS:
        raise PolicyActorContractError(
            f"algo_params.rpo_alpha shifts the policy's mean, which PPO computes as the stored "
            f"pre-transform action shifted back; policy actor {name}'s log-prob is of the "
            f"{actor.action_transform_id!r}-transformed action: remove rpo_alpha, or use an "
            "actor whose action_transform_id is 'clip'"
        )


def check_params(params: PPOParams) -> None:
    """The rules between PPO's settings.

    Raises:
        ConfigError: ``recompute_advantages_per_epoch`` with a recurrent core.
    """
    if params.recompute_advantages_per_epoch and params.recurrent is not None:
        raise ConfigError(
            "algo_params.recompute_advantages_per_epoch: recomputes advantages of MLP policies "
            "only (a recurrent critic's values depend on the whole sequence); remove it or "
            "algo_params.recurrent"
        )


def check_round(params: PPOParams, shape: RoundShape) -> None:
    """Every minibatch gets something to train on: ``num_minibatches`` is at most the env steps
    a learner trains on each round, or a recurrent policy's sequences (each env's round cut
    into chunks of ``sequence_length``; episode starts only add chunks). More would leave the
    learner fewer minibatches than asked, of one step or one sequence each: another update
    than the config's, and nothing would say so.

    Raises:
        ConfigError: more minibatches than that, naming the sizes that make a round.
    """
    actors = shape.num_actors // shape.num_learners
    per_env, unit = shape.rollout_length, "env steps"
    if params.recurrent is not None:
        length = params.recurrent.sequence_length
        per_env = math.ceil(shape.rollout_length / length)
        unit = f"sequences (chunks of sequence_length {length})"
    rows = per_env * shape.num_envs * actors
    if params.num_minibatches > rows:
        raise ConfigError(
            f"algo_params.num_minibatches: {params.num_minibatches} is more than the {rows} "
            f"{unit} a learner trains on each round (env.num_envs {shape.num_envs} x "
            f"rollout_length {shape.rollout_length} x {actors} rollout actor(s)); use at most "
            f"{rows}, or a longer round"
        )


def ppo_memory_needs(params: PPOParams, shape: RunShape) -> list[MemoryNeed]:
    """A round's rollout: each rollout actor's arrays (raw and normalised observations, GAE
    terms), the trajectory in Ray's object store, and the learners' tensors with their
    per-epoch shuffled copy."""
    o, a = shape.obs_dim, shape.action_dim
    per_step = (12 * o + 4 * a + 58) + 3 * (4 * o + 4 * a + 16)
    if params.recurrent is not None:  # the state each step read, of both cores, float32
        core = params.recurrent
        state_floats = (2 if core.cell == "lstm" else 1) * core.layers * core.size
        per_step += 2 * 4 * state_floats * 4  # stored, sent, chunked, shuffled
    if params.recompute_advantages_per_epoch:  # next observations, rewards, done flags
        per_step += 3 * (4 * o + 14)  # stored, sent, in the learner
    steps = shape.rollout_length * shape.num_envs * shape.num_actors
    return [
        MemoryNeed(f"a round's rollout ({steps} env steps)", per_step * steps, "rollout_length")
    ]


PPO = Algorithm(
    name="ppo",
    summary="PPO (Schulman et al. 2017), on-policy, learners averaged every param_sync_interval",
    params_type=PPOParams,
    builtin_builder=GAUSSIAN_BUILDER,
    other_builtin_builders=(RECURRENT_GAUSSIAN_BUILDER,),
    check_resume_actor=recurrent_policy_problem,
    actor_spec=gaussian_actor_spec,
    training=PPORounds(),
    learner_state_keys=("actor", "value", "optimizer", "shuffle_generator"),
    metrics={
        "Loss/policy": "clipped surrogate loss (negated L^CLIP), minibatch mean",
        "Loss/value": "0.5 * squared value error, minibatch mean",
        "Loss/entropy": "policy entropy, minibatch mean",
        "approx_kl": "KL(old || updated policy) on the round's data, k3 estimator",
        "clip_fraction": "fraction of the round's samples whose final ratio is outside 1 +- clip",
        "grad_norm": "global gradient norm before clipping, minibatch mean",
        "explained_variance": "1 - Var(returns - V) / Var(returns) after the update",
        "learning_rate": "optimiser step size this round",
        "epochs": "epochs started this round (KL early stop may cut the last)",
        "buffer_size": "samples trained on this round, all learners",
    },
    observation_clip=lambda params: (
        params.observation_clip if params.normalize_observations else None
    ),
    check_learner_state=learner_state_problem,
    check_resume=value_network_problem,
    resume_fixed_params=("value_network_hidden_sizes", "recurrent_core", "normalize_value"),
    check_actor=check_actor,
    check_params=check_params,
    memory_needs=ppo_memory_needs,
    check_round=check_round,
    audited_params=STABILISERS,
    # The adaptive step size is the optimiser's checkpointed state; learning_rate only starts it.
    resume_ignored_params=lambda params: (
        ("learning_rate",) if params.learning_rate_schedule == "adaptive_kl" else ()
    ),
)

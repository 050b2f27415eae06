from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from drlcli.actors.contract import validate_policy_actor
from drlcli.actors.gaussian import GaussianPolicyActor, build_gaussian_actor
from drlcli.actors.spec import ActorSpec, actor_semantics, build_policy_actor
from drlcli.errors import PolicyActorContractError

GAUSSIAN = "drlcli.actors.gaussian:build_gaussian_actor"
BOUNDS = {"action_low": [-1.0, -2.0], "action_high": [1.0, 2.0]}


def make_actor(**kwargs) -> GaussianPolicyActor:
    return build_gaussian_actor(obs_dim=3, action_dim=2, **BOUNDS, **kwargs)


def test_builtin_actor_passes_the_contract_and_names_its_transform():
    actor = build_policy_actor(ActorSpec(GAUSSIAN, BOUNDS), obs_dim=3, action_dim=2)
    assert actor.action_transform_id == "clip"
    assert ActorSpec(GAUSSIAN, BOUNDS).kind == "builtin"


def test_validation_restores_model_and_rng_state_exactly():
    actor = make_actor()
    before = {k: v.clone() for k, v in actor.state_dict().items()}
    actor.train(False)
    torch.manual_seed(123)
    expected_next = torch.rand(4)
    torch.manual_seed(123)
    validate_policy_actor(actor, 3, 2)
    assert torch.equal(torch.rand(4), expected_next)
    assert all(torch.equal(before[k], v) for k, v in actor.state_dict().items())
    assert actor.training is False


def test_log_prob_matches_torch_normal():
    actor = make_actor(init_log_std=-0.3)
    obs = torch.randn(5, 3)
    actions, info = actor(obs, training=False)
    mean, std = actor.get_mean_and_std(obs)
    reference = torch.distributions.Normal(mean, std)
    torch.testing.assert_close(info["log_prob"], reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(info["entropy"], reference.entropy().sum(-1))
    logp, _ = actor.log_prob_and_entropy(obs, actions)
    torch.testing.assert_close(logp, info["log_prob"])


def test_deterministic_explore_and_export_give_clipped_mean():
    actor = make_actor()
    with torch.no_grad():
        actor.mean_network[-1].bias.copy_(torch.tensor([5.0, -5.0]))  # push the mean out of bounds
        obs = torch.randn(4, 3)
        deterministic = actor.explore(obs, deterministic=True)
        exported = actor.as_export_module()(obs)
    torch.testing.assert_close(deterministic, exported)
    torch.testing.assert_close(deterministic, torch.tensor([[1.0, -2.0]]).expand(4, 2))
    stochastic = actor.explore(obs)
    assert (stochastic >= actor.action_low).all() and (stochastic <= actor.action_high).all()


def test_memory_categories_count_parameter_bytes():
    actor = make_actor(hidden_sizes=[4])
    memory = actor.inference_startup_memory_categories()
    expected = (3 * 4 + 4 + 4 * 2 + 2 + 2) * 4
    assert memory["parameters"] == expected


class _Broken(GaussianPolicyActor):
    pass


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("no_explore", "lacks required method explore()"),
        ("empty_transform", "action_transform_id must be a non-empty string"),
        ("export_differs", "as_export_module() and explore(deterministic=True) must both"),
        ("bad_log_prob", "info['log_prob'] must be a Tensor of shape [batch]"),
        ("bad_aux", "info['aux_losses'] must be dict[str, 0-dim Tensor]"),
        ("wrong_action_shape", "actions must be a Tensor of shape [3, 2]"),
    ],
)
def test_contract_violations_fail_closed_with_the_missing_piece(breakage, message):
    actor = make_actor()
    if breakage == "no_explore":
        actor.explore = None
    elif breakage == "empty_transform":
        actor.action_transform_id = ""
    elif breakage == "export_differs":
        actor.as_export_module = lambda: nn.Linear(3, 2)
    elif breakage == "bad_log_prob":
        original = actor.forward
        actor.forward = lambda obs, training=False: (original(obs, training)[0], {"log_prob": 1})
    elif breakage == "bad_aux":
        original = actor.forward
        actor.forward = lambda obs, training=False: (
            original(obs, training)[0],
            {**original(obs, training)[1], "aux_losses": {"x": torch.ones(2)}},
        )
    elif breakage == "wrong_action_shape":
        original = actor.forward
        actor.forward = lambda obs, training=False: (
            original(obs, training)[0][:, :1],
            original(obs, training)[1],
        )
    with pytest.raises(PolicyActorContractError) as error:
        validate_policy_actor(actor, 3, 2)
    assert message in str(error.value)


def test_not_a_module_is_refused():
    with pytest.raises(PolicyActorContractError, match="must be a torch.nn.Module"):
        validate_policy_actor(object(), 3, 2)


@pytest.mark.parametrize(
    ("builder", "kwargs", "message"),
    [
        ("no_colon_here", {}, "must look like 'pkg.module:callable'"),
        ("drlcli.actors.gaussian:build_gaussian_actor", {"x": object()}, "JSON-serialisable"),
        ("drlcli.actors.gaussian:build_gaussian_actor", {"x": math.nan}, "JSON-serialisable"),
    ],
)
def test_bad_specs_are_refused(builder, kwargs, message):
    with pytest.raises(PolicyActorContractError, match=message):
        ActorSpec(builder, kwargs)


def test_unimportable_or_missing_builder_is_refused():
    with pytest.raises(PolicyActorContractError, match="cannot import module 'no_such_pkg.mod'"):
        build_policy_actor(ActorSpec("no_such_pkg.mod:build"), 3, 2)
    with pytest.raises(PolicyActorContractError, match="has no callable 'nope'"):
        build_policy_actor(ActorSpec("drlcli.actors.gaussian:nope"), 3, 2)
    with pytest.raises(PolicyActorContractError, match="rejected its arguments"):
        build_policy_actor(ActorSpec(GAUSSIAN, {"colour": "red", **BOUNDS}), 3, 2)


def test_semantics_are_plain_json_data():
    spec = ActorSpec(GAUSSIAN, {**BOUNDS, "hidden_sizes": [8]})
    semantics = actor_semantics(spec, 3, 2, "clip")
    assert semantics == {
        "schema_version": 1,
        "kind": "builtin",
        "builder": GAUSSIAN,
        "kwargs": {**BOUNDS, "hidden_sizes": [8]},
        "obs_dim": 3,
        "action_dim": 2,
        "action_transform": "clip",
    }
    assert ActorSpec("my_pkg.actors:build").kind == "custom"
    np.testing.assert_equal(semantics["kwargs"]["action_low"], [-1.0, -2.0])

from __future__ import annotations

import math
import random
import threading

import numpy as np
import pytest
import torch
from torch import nn

from drlcli.actors.contract import validate_on_policy_actor, validate_policy_actor
from drlcli.actors.gaussian import GaussianPolicyActor, build_gaussian_actor
from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.flash_sac.actor import FlashSACActor
from drlcli.algos.registry import actor_kind
from drlcli.checkpoints.semantics import actor_semantics
from drlcli.errors import PolicyActorContractError

GAUSSIAN = "drlcli.actors.gaussian:build_gaussian_actor"
BOUNDS = {"action_low": [-1.0, -2.0], "action_high": [1.0, 2.0]}


def make_actor(**kwargs) -> GaussianPolicyActor:
    return build_gaussian_actor(obs_dim=3, action_dim=2, **BOUNDS, **kwargs)


def test_builtin_actor_passes_the_contract_and_names_its_transform():
    actor = build_policy_actor(ActorSpec(GAUSSIAN, BOUNDS), obs_dim=3, action_dim=2)
    assert actor.action_transform_id == "clip"
    assert actor_kind(ActorSpec(GAUSSIAN, BOUNDS).builder) == "builtin"


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


@pytest.mark.parametrize("sampler", ["forward", "explore"])
def test_samples_spread_around_the_mean_with_the_policys_std(sampler):
    wide = {"action_low": [-1e3, -1e3], "action_high": [1e3, 1e3]}  # no clipping here
    actor = build_gaussian_actor(obs_dim=3, action_dim=2, **wide)
    with torch.no_grad():
        actor.log_std.copy_(torch.log(torch.tensor([0.2, 3.0])))
        actor.mean_network[-1].bias.copy_(torch.tensor([1.5, -4.0]))
        obs = torch.zeros(20000, 3)
        if sampler == "forward":
            actions, _ = actor(obs)
        else:
            actions = actor.explore(obs)
        mean, _ = actor.get_mean_and_std(obs[:1])
    torch.testing.assert_close(actions.mean(0), mean[0], atol=0.06, rtol=0)
    torch.testing.assert_close(actions.std(0), torch.tensor([0.2, 3.0]), rtol=0.03, atol=0)


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
        ("bad_log_prob", "info['log_prob'] must be a Tensor of shape [batch]=3, got int"),
        ("bad_aux", "info['aux_losses'] must be dict[str, 0-dim Tensor]"),
        ("wrong_action_shape", "actions must be a Tensor of shape [3, 2], got [3, 1]"),
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
    assert actor_kind(ActorSpec("my_pkg.actors:build").builder) == "custom"
    np.testing.assert_equal(semantics["kwargs"]["action_low"], [-1.0, -2.0])


class _RandomStreamsActor(GaussianPolicyActor):
    """Draws from numpy's and Python's global generators too, as some downstream code does."""

    def forward(self, obs, training=False):
        np.random.random()
        random.random()
        return super().forward(obs, training)

    def explore(self, obs, dones=None, deterministic=False):
        np.random.random()
        random.random()
        return super().explore(obs, dones, deterministic)


def test_validation_leaves_every_random_stream_as_it_was():
    actor = _RandomStreamsActor(3, 2, BOUNDS["action_low"], BOUNDS["action_high"])

    def seed_all():
        torch.manual_seed(7)
        np.random.seed(7)
        random.seed(7)

    def draws():
        return (torch.rand(3).tolist(), np.random.random(3).tolist(), random.random())

    seed_all()
    expected = draws()
    seed_all()
    validate_policy_actor(actor, 3, 2, **BOUNDS)
    assert draws() == expected


class _WideTanhActor(FlashSACActor):
    """Overshoots: bias + 1.5 * range * tanh(u) leaves the bounds away from the centre."""

    action_transform_id = "tanh_affine_wide"

    def transform(self, u):
        return self.action_bias + 1.5 * self.action_range * torch.tanh(u)


class _WideExportActor(FlashSACActor):
    """Only the export module overshoots (twice the deterministic action)."""

    def as_export_module(self):
        inner = super().as_export_module()

        class Doubled(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, obs):
                return 2.0 * self.inner(obs) + 5.0

        return Doubled()


@pytest.mark.parametrize(
    ("actor_type", "message"),
    [
        (_WideTanhActor, "forward(training=False) returned action"),
        (_WideExportActor, "as_export_module()(obs) returned action"),
    ],
)
def test_actions_outside_the_bounds_are_refused_naming_the_method_and_bound(actor_type, message):
    torch.manual_seed(0)
    low, high = [-0.4, 0.0], [0.4, 2.0]
    actor = actor_type(4, 2, low, high, hidden_dim=16, num_blocks=1)
    if actor_type is _WideTanhActor:
        validate_policy_actor(actor, 4, 2)  # consistent with itself: only the bounds tell
    with pytest.raises(PolicyActorContractError) as error:
        validate_policy_actor(actor, 4, 2, low, high)
    assert message in str(error.value)
    assert "outside the environment's action_" in str(error.value)


def test_the_clip_transform_is_the_runtimes_so_forward_may_leave_the_bounds():
    actor = make_actor(init_log_std=2.0)  # wide samples: forward leaves [-1, 1] at once
    validate_policy_actor(actor, 3, 2, **BOUNDS)


def test_ppo_needs_log_prob_and_entropy_consistent_with_forward():
    validate_on_policy_actor(make_actor(), 3)
    flash = FlashSACActor(3, 2, [-1.0, -1.0], [1.0, 1.0], hidden_dim=16, num_blocks=1)
    with pytest.raises(
        PolicyActorContractError, match=r"lacks log_prob_and_entropy\(obs, actions\)"
    ):
        validate_on_policy_actor(flash, 3)
    skewed = make_actor()
    original = skewed.log_prob_and_entropy
    skewed.log_prob_and_entropy = lambda obs, actions: (
        original(obs, actions)[0] + 0.1,
        original(obs, actions)[1],
    )
    with pytest.raises(PolicyActorContractError, match="must equal forward's info"):
        validate_on_policy_actor(skewed, 3)


def test_a_ppo_learner_refuses_an_actor_without_the_on_policy_method():
    from drlcli.algos.ppo.learner import Learner
    from drlcli.algos.ppo.params import PPOParams

    spec = ActorSpec(
        "drlcli.algos.flash_sac.actor:build_flash_sac_actor",
        {"action_low": [-1.0], "action_high": [1.0], "hidden_dim": 8, "num_blocks": 1},
    )
    with pytest.raises(PolicyActorContractError, match="which PPO needs"):
        Learner(spec, 3, 1, PPOParams())


class _OnPolicyProbe(GaussianPolicyActor):
    """The built-in actor whose ``log_prob_and_entropy`` answer a test replaces, recording the
    ``training`` flag forward was called with."""

    def __init__(self, answer=None) -> None:
        super().__init__(obs_dim=3, action_dim=2, **BOUNDS)
        self.answer = answer
        self.training_flags: list[object] = []

    def forward(self, obs, training=True):
        self.training_flags.append(training)
        return super().forward(obs, training=training)

    def log_prob_and_entropy(self, obs, actions):
        log_prob, entropy = super().log_prob_and_entropy(obs, actions)
        return (log_prob, entropy) if self.answer is None else self.answer(log_prob, entropy)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda lp, en: [lp, en], "log_prob_and_entropy must return (log_prob, entropy)"),
        (lambda lp, en: (lp,), "log_prob_and_entropy must return (log_prob, entropy)"),
        (lambda lp, en: (lp, en, en), "log_prob_and_entropy must return (log_prob, entropy)"),
        (
            lambda lp, en: (lp[:2], en),
            "log_prob_and_entropy log_prob must be a Tensor of shape [batch]=3, got [2]",
        ),
        (
            lambda lp, en: (lp.tolist(), en),
            "log_prob_and_entropy log_prob must be a Tensor of shape [batch]=3, got list",
        ),
        (
            lambda lp, en: (lp, en[:, None]),
            "log_prob_and_entropy entropy must be a Tensor of shape [batch]=3, got [3, 1]",
        ),
        (
            lambda lp, en: (lp, float(en[0])),
            "log_prob_and_entropy entropy must be a Tensor of shape [batch]=3, got float",
        ),
        (
            lambda lp, en: (lp + 0.1, en),
            "log_prob_and_entropy(obs, a) must equal forward's info['log_prob'] for forward's "
            "own actions a (else the first PPO ratio is not 1)",
        ),
    ],
)
def test_the_on_policy_check_names_the_actor_and_what_it_returned(answer, message):
    with pytest.raises(PolicyActorContractError) as error:
        validate_on_policy_actor(_OnPolicyProbe(answer), 3)
    assert str(error.value) == f"policy actor _OnPolicyProbe: {message}"


def test_the_on_policy_check_asks_forward_for_the_deterministic_action():
    probe = _OnPolicyProbe()
    validate_on_policy_actor(probe, 3)
    # The smoke test runs on a deep copy, whose flags are not this list's; an actor holding
    # a lock cannot be copied, so the check probes it itself:
    probe.lock = threading.Lock()
    validate_on_policy_actor(probe, 3)
    assert probe.training_flags == [False]


def _answering_log_prob(log_prob: float, offset: float) -> _OnPolicyProbe:
    """An actor whose forward reports ``log_prob`` for every sample and whose
    ``log_prob_and_entropy`` answers ``log_prob + offset``."""
    actor = _OnPolicyProbe(lambda lp, en: (torch.full_like(lp, log_prob + offset), en))
    plain_forward = actor.forward

    def forward(obs, training=True):
        actions, info = plain_forward(obs, training=training)
        return actions, {**info, "log_prob": torch.full_like(info["log_prob"], log_prob)}

    actor.forward = forward
    return actor


@pytest.mark.parametrize(
    ("log_prob", "offset", "agrees"),
    [  # allclose(rtol=1e-4, atol=1e-5): a summation order may move a large log-prob's 5th digit
        (-300.0, 0.005, True),
        (-300.0, 0.05, False),
        (0.0, 5e-6, True),
        (0.0, 5e-5, False),
    ],
)
def test_the_log_prob_agreement_is_relative_for_large_values_and_absolute_near_zero(
    log_prob, offset, agrees
):
    actor = _answering_log_prob(log_prob, offset)
    if agrees:
        validate_on_policy_actor(actor, 3)
    else:
        with pytest.raises(PolicyActorContractError, match="must equal forward's"):
            validate_on_policy_actor(actor, 3)


def test_an_actor_without_the_on_policy_method_is_refused_in_full():
    flash = FlashSACActor(3, 2, [-1.0, -1.0], [1.0, 1.0], hidden_dim=16, num_blocks=1)
    with pytest.raises(PolicyActorContractError) as error:
        validate_on_policy_actor(flash, 3)
    assert str(error.value) == (
        "policy actor FlashSACActor lacks log_prob_and_entropy(obs, actions), which PPO needs "
        "(drlcli/actors/contract.py, OnPolicyActor)"
    )


class _Broken(FlashSACActor):
    """The built-in FlashSAC actor with one piece answering wrongly (``breaks``), and the
    arguments its ``explore`` was called with recorded."""

    action_transform_id = "tanh_affine"

    def __init__(self, breaks: str) -> None:
        super().__init__(3, 2, [-1.0, -1.0], [1.0, 1.0], hidden_dim=8, num_blocks=1)
        self.breaks = breaks
        self.explore_calls: list[dict] = []

    def forward(self, obs, training=False):
        self.inside_forward = True  # forward's own get_mean_and_std call answers rightly
        try:
            actions, info = super().forward(obs, training=training)
        finally:
            self.inside_forward = False
        if self.breaks == "forward list":
            return [actions, info]
        if self.breaks == "forward info list":
            return actions, [info]
        if self.breaks == "forward triple":
            return actions, info, None
        if self.breaks == "training forward shape" and training:
            return actions[:, :1], info
        if self.breaks == "training forward bounds" and training:
            return actions * 0 + 5.0, info
        if self.breaks == "forward nan":
            return actions * float("nan"), info
        return actions, info

    def get_mean_and_std(self, obs):
        mean, std = super().get_mean_and_std(obs)
        if getattr(self, "inside_forward", False):
            return mean, std
        return {
            "mean_std list": [mean, std],
            "mean_std single": (mean,),
            "mean shape": (mean[:, :1], std),
            "std shape": (mean, std[:, :1]),
        }.get(self.breaks, (mean, std))

    def explore(self, obs, dones=None, deterministic=False):
        self.explore_calls.append({"dones": dones, "deterministic": deterministic})
        actions = super().explore(obs, dones=dones, deterministic=deterministic)
        if deterministic and self.breaks == "deterministic shape":
            return actions[:, :1]
        if deterministic and self.breaks == "deterministic bounds":
            return actions * 0 - 5.0
        if not deterministic and self.breaks == "stochastic shape":
            return actions[:, :1]
        if not deterministic and self.breaks == "stochastic bounds":
            return actions * 0 + 5.0
        if deterministic and self.breaks.startswith("zero"):
            return actions * 0
        return actions

    def as_export_module(self):
        exported = super().as_export_module()
        if self.breaks == "export not a module":
            return lambda obs: exported(obs)
        change = {
            "export shape": lambda actions: actions[:, :1],
            "export bounds": lambda actions: actions * 0 + 5.0,
            "zero, export off by 1e-3": lambda actions: actions * 0 + 1e-3,
            "zero, export off by 5e-7": lambda actions: actions * 0 + 5e-7,
        }.get(self.breaks)
        return exported if change is None else _Changed(exported, change)


class _Changed(nn.Module):
    """An export module whose actions ``change`` alters."""

    def __init__(self, module: nn.Module, change) -> None:
        super().__init__()
        self.module, self.change = module, change

    def forward(self, obs):
        return self.change(self.module(obs))


@pytest.mark.parametrize(
    ("breaks", "message"),
    [
        ("forward list", "forward(obs, training) must return (actions, info dict)"),
        ("forward info list", "forward(obs, training) must return (actions, info dict)"),
        ("forward triple", "forward(obs, training) must return (actions, info dict)"),
        (
            "training forward shape",
            "forward(training=True) actions must be a Tensor of shape [3, 2], got [3, 1]",
        ),
        (
            "training forward bounds",
            "forward(training=True) returned action 5 in dimension 0, outside the "
            "environment's action_high 1; its action transform must map into the bounds",
        ),
        ("forward nan", "forward(training=False) actions is not finite"),
        ("mean_std list", "get_mean_and_std(obs) must return (mean, std)"),
        ("mean_std single", "get_mean_and_std(obs) must return (mean, std)"),
        ("mean shape", "get_mean_and_std mean must be a Tensor of shape [3, 2], got [3, 1]"),
        ("std shape", "get_mean_and_std std must be a Tensor of shape [3, 2], got [3, 1]"),
        (
            "deterministic shape",
            "explore(deterministic=True) must be a Tensor of shape [3, 2], got [3, 1]",
        ),
        (
            "stochastic shape",
            "explore(deterministic=False) must be a Tensor of shape [3, 2], got [3, 1]",
        ),
        (
            "deterministic bounds",
            "explore(deterministic=True) returned action -5 in dimension 0, outside the "
            "environment's action_low -1; its action transform must map into the bounds",
        ),
        (
            "stochastic bounds",
            "explore(deterministic=False) returned action 5 in dimension 0, outside the "
            "environment's action_high 1; its action transform must map into the bounds",
        ),
        ("export not a module", "as_export_module() must return an nn.Module"),
        (
            "export shape",
            "as_export_module()(obs) must be a Tensor of shape [3, 2], got [3, 1]",
        ),
        (
            "export bounds",
            "as_export_module()(obs) returned action 5 in dimension 0, outside the "
            "environment's action_high 1; its action transform must map into the bounds",
        ),
        (
            "zero, export off by 1e-3",
            "as_export_module() and explore(deterministic=True) must both return "
            "transform(mean); they differ",
        ),
    ],
)
def test_each_wrong_piece_of_an_actor_is_named_in_full(breaks, message):
    with pytest.raises(PolicyActorContractError) as error:
        validate_policy_actor(_Broken(breaks), 3, 2, [-1.0, -1.0], [1.0, 1.0])
    assert str(error.value) == f"policy actor _Broken: {message}"


def test_the_smoke_test_explores_with_bool_dones_of_the_batch():
    actor = _Broken("nothing")
    actor.lock = threading.Lock()  # not copyable: probed in place, so its records are seen
    validate_policy_actor(actor, 3, 2, [-1.0, -1.0], [1.0, 1.0])
    assert [call["deterministic"] for call in actor.explore_calls] == [True, False]
    # The first call starts every episode (a recurrent actor resets its state), the next goes on.
    for call, starts in zip(actor.explore_calls, (True, False), strict=True):
        assert call["dones"].dtype == torch.bool and tuple(call["dones"].shape) == (3,)
        assert bool(call["dones"].all()) == starts and bool(call["dones"].any()) == starts


def _bounds(low, high):
    return torch.tensor(low), torch.tensor(high)


def test_the_bounds_check_allows_a_relative_slack_and_names_the_worst_action():
    from drlcli.actors.contract import BOUNDS_TOLERANCE, _check_bounds

    # Slack 1e-5 * (1 + max|bound|): about 0.01 at 1000, 1e-5 at 0.
    _check_bounds("a", "w", torch.tensor([[1000.005]]), _bounds([-1000.0], [1000.0]))
    with pytest.raises(PolicyActorContractError):
        _check_bounds("a", "w", torch.tensor([[1000.02]]), _bounds([-1000.0], [1000.0]))
    with pytest.raises(PolicyActorContractError):
        _check_bounds("a", "w", torch.tensor([[1.5e-5]]), _bounds([0.0], [0.0]))
    # Exactly at a bound plus its slack is inside.
    low, high = _bounds([-1.0], [1.0])
    slack = BOUNDS_TOLERANCE * (1.0 + torch.maximum(low.abs(), high.abs()))
    _check_bounds("a", "w", (low - slack)[None], (low, high))
    _check_bounds("a", "w", (high + slack)[None], (low, high))
    # Three samples of two dimensions: the second dimension's lowest sample is reported.
    actions = torch.tensor([[0.0, 0.5], [0.2, -1.5], [0.1, -1.2]])
    with pytest.raises(PolicyActorContractError) as error:
        _check_bounds("A", "explore", actions, _bounds([-1.0, -1.0], [1.0, 1.0]))
    assert str(error.value) == (
        "policy actor A: explore returned action -1.5 in dimension 1, outside the environment's "
        "action_low -1; its action transform must map into the bounds"
    )


def test_the_gaussian_explores_with_its_mean_plus_std_times_torchs_noise():
    actor = make_actor(init_log_std=-0.5)
    obs = torch.randn(6, 3)
    torch.manual_seed(11)
    explored = actor.explore(obs)
    torch.manual_seed(11)
    with torch.no_grad():
        mean = actor.mean_network(obs)
        expected = actor.transform(mean + math.exp(-0.5) * torch.randn_like(mean))
    torch.testing.assert_close(explored, expected)


@pytest.mark.parametrize("value", [-1.7, 1.7])
def test_a_bound_violation_in_a_later_sample_is_found_in_its_dimension(value):
    from drlcli.actors.contract import _check_bounds

    actions = torch.tensor([[0.0, 0.0], [0.0, 0.0], [value, 0.0]])  # rows are samples
    with pytest.raises(PolicyActorContractError, match=f"action {value:g} in dimension 0"):
        _check_bounds("A", "explore", actions, _bounds([-1.0, -1.0], [1.0, 1.0]))


def test_an_export_module_within_a_millionth_of_the_deterministic_action_agrees():
    """Absolute agreement to 1e-6, also where the action is zero (no relative slack there)."""
    validate_policy_actor(_Broken("zero, export off by 5e-7"), 3, 2, [-1.0, -1.0], [1.0, 1.0])


def test_a_module_lacking_a_method_is_refused_naming_it():
    with pytest.raises(PolicyActorContractError) as error:
        validate_policy_actor(nn.Linear(3, 2), 3, 2)  # a module, with forward only
    assert str(error.value) == "policy actor Linear lacks required method get_mean_and_std()"


class _WithoutTransformId(nn.Module):
    """Every required method, but no ``action_transform_id`` at all."""

    def get_mean_and_std(self, obs):
        raise AssertionError("not reached")

    explore = as_export_module = normalize_parameters = get_mean_and_std
    inference_startup_memory_categories = get_mean_and_std

    def forward(self, obs, training=False):
        raise AssertionError("not reached")


def test_an_actor_without_a_transform_id_is_refused_naming_it():
    with pytest.raises(PolicyActorContractError) as error:
        validate_policy_actor(_WithoutTransformId(), 3, 2)
    assert str(error.value) == (
        "policy actor _WithoutTransformId: action_transform_id must be a non-empty string, got None"
    )


class _FixedActor(nn.Module):
    """A policy with no parameters at all (zero actions): the smoke test still runs it."""

    action_transform_id = "clip"

    def forward(self, obs, training=False):
        actions = torch.zeros(obs.shape[0], 2)
        return actions, {"log_prob": torch.zeros(obs.shape[0])}

    def get_mean_and_std(self, obs):
        return torch.zeros(obs.shape[0], 2), torch.ones(obs.shape[0], 2)

    def explore(self, obs, dones=None, deterministic=False):
        return torch.zeros(obs.shape[0], 2)

    def as_export_module(self):
        return _Changed(nn.Identity(), lambda obs: torch.zeros(obs.shape[0], 2))

    def normalize_parameters(self):
        pass

    def inference_startup_memory_categories(self):
        return {}


def test_an_actor_without_parameters_is_probed_on_the_cpu():
    """No parameter to take a device from: the smoke observations are the CPU's, and the
    actor receives them there."""
    from drlcli.actors.contract import _smoke_observations

    seen: list[torch.device] = []

    class Recording(_FixedActor):
        def forward(self, obs, training=False):
            seen.append(obs.device)
            return super().forward(obs, training)

    assert _smoke_observations(_FixedActor(), 3).device == torch.device("cpu")
    validate_policy_actor(Recording(), 3, 2, [-1.0, -1.0], [1.0, 1.0])
    assert seen and set(seen) == {torch.device("cpu")}


def test_the_smoke_observations_are_zeros_then_three_times_a_seeded_normal():
    """The same observations every time (a generator seeded 0, no global stream), spread to
    3 standard deviations so a transform that overshoots away from zero is met."""
    from drlcli.actors.contract import SMOKE_BATCH, _smoke_observations

    torch.manual_seed(5)
    expected_global = torch.rand(2)
    torch.manual_seed(5)
    obs = _smoke_observations(_FixedActor(), 4)
    assert torch.equal(torch.rand(2), expected_global)
    spread = torch.randn(SMOKE_BATCH - 1, 4, generator=torch.Generator().manual_seed(0)) * 3.0
    assert torch.equal(obs, torch.cat([torch.zeros(1, 4), spread]))


def test_an_unimportable_builder_module_is_named_with_where_it_must_import():
    with pytest.raises(PolicyActorContractError) as error:
        build_policy_actor(ActorSpec("no_such_pkg.mod:build"), 3, 2)
    assert str(error.value) == (
        "actor builder no_such_pkg.mod:build: cannot import module 'no_such_pkg.mod' (No module "
        "named 'no_such_pkg'); it must be importable in every training process"
    )


def test_one_bound_alone_is_no_bounds_check():
    """Bounds are checked when both are given (an env's box has both)."""
    wide = _Broken("stochastic bounds")  # explores at 5
    validate_policy_actor(wide, 3, 2, action_low=[-1.0, -1.0])
    validate_policy_actor(wide, 3, 2, action_high=[1.0, 1.0])

"""The closed-form PPO gradient (numpy) against autograd's, and where it applies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from drlcli.actors.gaussian import GaussianPolicyActor
from drlcli.algos.ppo.algorithm import gaussian_actor_spec
from drlcli.algos.ppo.closed_form import ClosedFormGradients, DenseNetwork
from drlcli.algos.ppo.learner import Learner
from drlcli.algos.ppo.maths import ppo_loss
from drlcli.algos.ppo.networks import ValueNetwork
from drlcli.algos.ppo.params import PPOParams

OBS_DIM, ACTION_DIM, BATCH = 7, 3, 48


def _batch(seed: int, advantage_scale: float = 1.0) -> dict[str, np.ndarray]:
    """A minibatch whose stored log-probs differ from the policy's enough that some ratios
    fall outside the clip range (both signs of advantage)."""
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((BATCH, OBS_DIM)).astype(np.float32),
        "act": rng.standard_normal((BATCH, ACTION_DIM)).astype(np.float32),
        "logp": (rng.standard_normal(BATCH) * 0.5 - 4.0).astype(np.float32),
        "value": rng.standard_normal(BATCH).astype(np.float32),
        "adv": (rng.standard_normal(BATCH) * advantage_scale).astype(np.float32),
        "ret": rng.standard_normal(BATCH).astype(np.float32),
    }


def _learner(params: PPOParams, closed_form: bool) -> Learner:
    spec = gaussian_actor_spec(params, [-1.0] * ACTION_DIM, [1.0] * ACTION_DIM)
    return Learner(spec, OBS_DIM, ACTION_DIM, params, seed=3, closed_form=closed_form)


def _gradients(learner: Learner, batch: dict[str, np.ndarray], closed_form: bool):
    """``learner.minibatch_gradients`` on ``batch``, in closed form or by autograd (the same
    learner, so the same parameters): ``(flat gradient, stats)``."""
    built = learner.closed_form
    learner.closed_form = built if closed_form else None
    learner.flat.grads.fill_(float("nan"))  # every gradient must be written, none accumulated
    convert = np.asarray if closed_form else torch.from_numpy
    try:
        stats = learner.minibatch_gradients(
            obs=convert(batch["obs"]),
            actions=convert(batch["act"]),
            old_logprob=convert(batch["logp"]),
            old_value=convert(batch["value"]),
            advantages=convert(batch["adv"]),
            returns=convert(batch["ret"]),
        )
    finally:
        learner.closed_form = built
    return learner.flat.grads.clone(), stats


CASES = [
    PPOParams(),
    PPOParams(clip_value_loss=True, ent_coef=0.01, vf_coef=0.7, clip_coef=0.1),
    PPOParams(activation="relu", hidden_sizes=(32,)),
    PPOParams(activation="elu", hidden_sizes=(8, 16, 8), clip_value_loss=True),
    PPOParams(hidden_sizes=(), init_log_std=-0.5),
    PPOParams(hidden_sizes=(16,), value_hidden_sizes=(32, 24)),
]


@pytest.mark.parametrize(
    "params", CASES, ids=lambda p: f"{p.activation}{p.hidden_sizes}{p.value_hidden_sizes or ''}"
)
def test_gradients_equal_autograds(params):
    learner = _learner(params, closed_form=True)
    assert learner.closed_form is not None
    with torch.no_grad():  # move log_std and the value head off their initial values
        learner.actor.log_std.add_(torch.linspace(-0.3, 0.4, ACTION_DIM))
    for seed in range(3):
        batch = _batch(seed)
        expected, expected_stats = _gradients(learner, batch, closed_form=False)
        got, stats = _gradients(learner, batch, closed_form=True)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)
        for name in ("pg_loss", "v_loss", "entropy_loss"):
            assert stats[name] == pytest.approx(float(expected_stats[name]), rel=1e-5, abs=1e-7)
        np.testing.assert_allclose(
            stats["logratio"], expected_stats["logratio"].numpy(), rtol=1e-5, atol=1e-6
        )
        ratio = np.exp(stats["logratio"])
        assert ((ratio < 1 - params.clip_coef) | (ratio > 1 + params.clip_coef)).any()
        assert (np.abs(ratio - 1) < params.clip_coef).any()


def test_value_clipping_ties_match_autograd():
    # Values that did not move tie the clipped and unclipped errors (max() splits the
    # gradient); the rest moved beyond the clip range both ways, or stayed inside it.
    params = PPOParams(clip_value_loss=True)
    learner = _learner(params, closed_form=True)
    batch = _batch(7)
    with torch.no_grad():
        value_now = learner.value_network(torch.from_numpy(batch["obs"])).numpy()
    batch["value"] = value_now - np.linspace(-1.0, 1.0, BATCH, dtype=np.float32)
    batch["value"][:12] = value_now[:12]
    expected, _ = _gradients(learner, batch, closed_form=False)
    got, _ = _gradients(learner, batch, closed_form=True)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_output_gradients_at_the_value_clip_boundaries_are_subgradients():
    # On the networks' outputs directly (the same floats both ways): values moved by exactly
    # the clip either way, and ratios at 1 and inside and outside the clip range, with both
    # signs of advantage. (A ratio exactly at 1 +- eps cannot be set up: it comes out of exp.)
    # Where the clipped and unclipped value losses tie (a value moved by exactly the clip), the
    # loss has no gradient, only a subdifferential: torch 2.13's autograd gives the whole
    # gradient to one branch, 2.14's splits it between the two. Either is a subgradient; there
    # the test asks for one, and autograd's gradient everywhere else.
    from drlcli.algos.ppo.closed_form import ppo_output_gradients

    params = PPOParams(clip_value_loss=True, ent_coef=0.05)
    new_value = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0], requires_grad=True)
    old_value = torch.tensor([0.0, -0.25, 0.25, 0.5, -0.5, 0.125])
    returns = torch.tensor([1.0, 1.0, 1.0, -1.0, 0.5, -2.0])
    mean = torch.zeros(6, 1, requires_grad=True)
    log_std = torch.zeros(1, requires_grad=True)
    actions = torch.tensor([[0.0], [0.5], [-0.5], [1.0], [-1.0], [2.0]])
    current = (-0.5 * actions[:, 0] ** 2 - 0.5 * np.log(2 * np.pi)).detach()
    old_logprob = current - torch.log(torch.tensor([1.0, 0.5, 1.5, 0.6, 1.4, 1.1]))
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0, -0.5])
    z = (actions - mean) * torch.exp(-log_std)
    new_logprob = (-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    entropy = (0.5 + 0.5 * np.log(2 * np.pi) + log_std).sum().expand(6)
    loss, _ = ppo_loss(
        new_logprob=new_logprob,
        entropy=entropy,
        new_value=new_value,
        old_logprob=old_logprob,
        old_value=old_value,
        advantages=advantages,
        returns=returns,
        params=dataclasses.replace(params, clip_coef=0.25),
    )
    loss.backward()
    _, grad_mean, grad_log_std, grad_value = ppo_output_gradients(
        mean=mean.detach().numpy(),
        log_std=log_std.detach().numpy(),
        actions=actions.numpy(),
        new_value=new_value.detach().numpy(),
        old_logprob=old_logprob.numpy(),
        old_value=old_value.numpy(),
        advantages=advantages.numpy(),
        returns=returns.numpy(),
        params=dataclasses.replace(params, clip_coef=0.25),
    )
    with torch.no_grad():
        moved = new_value - old_value
        tie = (moved.abs() == 0.25).numpy()
    assert tie.sum() == 2 and (~tie).sum() == 4
    np.testing.assert_allclose(grad_value[~tie], new_value.grad.numpy()[~tie], rtol=1e-6, atol=1e-8)
    # At a tie: max(f_unclipped, f_clipped) with f_clipped flat beyond the clip, so the
    # subgradients lie between 0 and the unclipped loss's gradient vf_coef (v - R) / B.
    unclipped = (params.vf_coef * (new_value - returns) / 6).detach().numpy()[tie]
    low, high = np.minimum(unclipped, 0.0), np.maximum(unclipped, 0.0)
    assert np.all(grad_value[tie] >= low - 1e-8) and np.all(grad_value[tie] <= high + 1e-8)
    assert np.all(np.abs(unclipped) > 0.01)  # a real interval
    np.testing.assert_allclose(grad_mean, mean.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad_log_std, log_std.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_a_nan_advantage_makes_nan_gradients_as_autograd_does():
    params = PPOParams()
    learner = _learner(params, closed_form=True)
    batch = _batch(1)
    batch["adv"][5] = np.nan
    expected, _ = _gradients(learner, batch, closed_form=False)
    got, stats = _gradients(learner, batch, closed_form=True)
    assert np.isnan(stats["pg_loss"])
    assert torch.equal(torch.isnan(got), torch.isnan(expected))
    assert torch.isnan(got).any()


def test_a_training_round_matches_autograds():
    params = PPOParams(num_epochs=3, num_minibatches=4, target_kl=0.5)
    learners = [_learner(params, closed_form=flag) for flag in (True, False)]
    rng = np.random.default_rng(0)
    for round_index in range(2):
        batches = [_batch(10 * round_index + i) for i in range(4)]
        data = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
        # Stored log-probs near the policy's, so that the update runs several epochs.
        noise = rng.standard_normal(len(data["logp"])).astype(np.float32)
        data["logp"] = np.full_like(data["logp"], -3.0) + 0.01 * noise
        results = []
        for learner in learners:
            learner.add({k: v.copy() for k, v in data.items()})
            results.append(learner.train_step(round_index / 4))
    (state, metrics), (reference_state, reference_metrics) = results
    for part in ("actor", "value"):
        for name, value in state[part].items():
            torch.testing.assert_close(value, reference_state[part][name], rtol=1e-4, atol=1e-5)
    for name, value in metrics.items():
        assert value == pytest.approx(reference_metrics[name], rel=1e-4, abs=1e-6), name
    optimizer_moments = [learner.optimizer.state_dict()["state"][0] for learner in learners]
    torch.testing.assert_close(
        optimizer_moments[0]["exp_avg"], optimizer_moments[1]["exp_avg"], rtol=1e-3, atol=1e-6
    )


class _ScaledGaussian(GaussianPolicyActor):
    """A subclass may change the maths: it must not get the built-in's closed form."""


def test_closed_form_applies_to_the_built_in_networks_only():
    params = PPOParams()
    actor = GaussianPolicyActor(OBS_DIM, ACTION_DIM, [-1.0] * 3, [1.0] * 3)
    value = ValueNetwork(OBS_DIM, (64, 64), "tanh")
    for p in [*actor.parameters(), *value.parameters()]:
        p.grad = torch.zeros_like(p)
    assert ClosedFormGradients.for_networks(actor, value) is not None
    subclass = _ScaledGaussian(OBS_DIM, ACTION_DIM, [-1.0] * 3, [1.0] * 3)
    for p in subclass.parameters():
        p.grad = torch.zeros_like(p)
    assert ClosedFormGradients.for_networks(subclass, value) is None
    without_gradients = GaussianPolicyActor(OBS_DIM, ACTION_DIM, [-1.0] * 3, [1.0] * 3)
    assert ClosedFormGradients.for_networks(without_gradients, value) is None
    assert _learner(params, closed_form=False).closed_form is None


@pytest.mark.parametrize(
    "network",
    [
        nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2)),
        nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)),
        nn.Sequential(nn.Linear(4, 8), nn.ELU(alpha=0.5), nn.Linear(8, 2)),
        nn.Sequential(nn.Linear(4, 8, bias=False), nn.Tanh(), nn.Linear(8, 2)),
        nn.Sequential(nn.Linear(4, 8), nn.Tanh()),
        nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).double(),
    ],
    ids=["layernorm", "mixed", "elu-alpha", "no-bias", "ends-in-activation", "float64"],
)
def test_dense_network_refuses_other_shapes(network):
    assert DenseNetwork.of(network) is None


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_dense_forward_equals_the_module_and_sees_in_place_updates(activation):
    torch.manual_seed(0)
    value = ValueNetwork(OBS_DIM, (16, 16), activation)
    dense = DenseNetwork.of(value.network)
    obs = torch.randn(9, OBS_DIM)
    np.testing.assert_allclose(
        dense.forward(obs.numpy())[-1][:, 0], value(obs).detach().numpy(), rtol=1e-5, atol=1e-6
    )
    value.load_state_dict({k: v * 2 for k, v in value.state_dict().items()})
    np.testing.assert_allclose(
        dense.forward(obs.numpy())[-1][:, 0], value(obs).detach().numpy(), rtol=1e-5, atol=1e-6
    )


def build_subclass_actor(obs_dim, action_dim, device="cpu", **kwargs):
    """Builder of ``_ScaledGaussian`` (a custom actor to PPO's learner)."""
    return _ScaledGaussian(obs_dim, action_dim, **kwargs).to(device)


def test_the_learner_uses_autograd_for_a_custom_actor():
    params = dataclasses.replace(PPOParams(), num_epochs=1, num_minibatches=2)
    spec = dataclasses.replace(
        gaussian_actor_spec(params, [-1.0] * ACTION_DIM, [1.0] * ACTION_DIM),
        builder="tests.test_closed_form:build_subclass_actor",
    )
    learner = Learner(spec, OBS_DIM, ACTION_DIM, params, seed=0)
    assert type(learner.actor) is _ScaledGaussian
    assert learner.closed_form is None
    learner.add(_batch(0))
    _, metrics = learner.train_step(0.0)
    assert np.isfinite(metrics["Loss/policy"])


@pytest.mark.parametrize(
    "missing", ["log_std gradient", "value gradients", "policy gradients", "value layout"]
)
def test_closed_form_needs_every_gradient_and_both_networks_dense(missing):
    actor = GaussianPolicyActor(OBS_DIM, ACTION_DIM, [-1.0] * 3, [1.0] * 3)
    value = ValueNetwork(OBS_DIM, (64, 64), "tanh")
    if missing == "value layout":  # a norm layer: not the numpy MLP the closed form runs
        value.network = nn.Sequential(nn.Linear(OBS_DIM, 8), nn.LayerNorm(8), nn.Linear(8, 1))
    for p in [*actor.parameters(), *value.parameters()]:
        p.grad = torch.zeros_like(p)
    if missing == "log_std gradient":
        actor.log_std.grad = None
    elif missing == "value gradients":
        value.network[0].weight.grad = None
    elif missing == "policy gradients":
        actor.mean_network[-1].bias.grad = None
    assert ClosedFormGradients.for_networks(actor, value) is None

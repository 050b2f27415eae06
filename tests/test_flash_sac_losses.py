"""FlashSAC's update against a reference written out in the test: the losses, the gradients each
optimiser steps with, the target head, the projection and the replay buffer's sampling.

The reference re-runs the learner's own forward passes on copies of its networks, drawing the
same noise from the same seed, and builds every loss from its definition in the learner's
docstring; a wrong head, sign, discount or scale in the learner gives other losses or gradients.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from drlcli.algos.flash_sac.critic import categorical_td_target
from drlcli.off_policy.replay import TransitionReplay
from tests.test_flash_sac import CUSTOM, SMALL, make_learner, random_batch

GAMMA = 0.99  # make_learner's discount
# Gradients flow through the same operations in the same order: float32 round-off only.
CLOSE = {"rtol": 1e-4, "atol": 1e-6}


def recording_gradients(optimizer: torch.optim.Optimizer) -> list[list[torch.Tensor]]:
    """From now on record the gradients ``optimizer`` holds each time it steps."""
    steps: list[list[torch.Tensor]] = []
    step = optimizer.step

    def record(*args, **kwargs):
        steps.append(
            [p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"]]
        )
        return step(*args, **kwargs)

    optimizer.step = record
    return steps


def projected_by_loop(
    probs: torch.Tensor, rewards, terminated, entropy_term, gamma: float, v_min, v_max
) -> torch.Tensor:
    """The C51 projection one atom at a time: atom ``z_k`` moves to
    ``r + gamma (1 - d) (z_k - entropy_term)``, clipped, and its mass is split between the two
    nearest atoms in proportion to the distance."""
    num_bins = probs.shape[-1]
    atoms = np.linspace(v_min, v_max, num_bins)
    spacing = (v_max - v_min) / (num_bins - 1)
    target = np.zeros(probs.shape, dtype=np.float64)
    for i in range(probs.shape[0]):
        for k in range(num_bins):
            moved = float(rewards[i]) + gamma * (1.0 - float(terminated[i])) * (
                atoms[k] - float(entropy_term[i])
            )
            position = (min(max(moved, v_min), v_max) - v_min) / spacing
            lower = min(int(np.floor(position)), num_bins - 1)
            upper_share = position - lower
            target[i, lower] += float(probs[i, k]) * (1.0 - upper_share)
            if upper_share > 0:
                target[i, lower + 1] += float(probs[i, k]) * upper_share
    return torch.as_tensor(target, dtype=torch.float32)


def test_the_critic_loss_is_the_cross_entropy_to_the_lower_target_heads_projection():
    params = dataclasses.replace(SMALL, v_min=-10.0, v_max=10.0, initial_temperature=0.5)
    learner = make_learner(params)
    learner.updates = 1  # a critic-only update (the actor steps every 2nd)
    actor, critic = copy.deepcopy(learner.actor), copy.deepcopy(learner.critic)
    target_critic = copy.deepcopy(learner.target_critic)
    alpha = float(learner.temperature.detach())
    batch = random_batch(seed=3)
    gradients = recording_gradients(learner.critic_optimizer)
    torch.manual_seed(11)
    metrics = learner.update(batch)

    torch.manual_seed(11)
    obs, act, next_obs = batch["obs"], batch["act"], batch["next_obs"]
    size = len(obs)
    with torch.no_grad():
        next_actions, info = actor(next_obs, training=False)
        target_critic.train()
        target_q, target_log_probs = target_critic(
            torch.cat([obs, next_obs]), torch.cat([act, next_actions])
        )
        next_q, next_log_probs = target_q[:, size:], target_log_probs[:, size:]
        lower_head = [0 if next_q[0, i] <= next_q[1, i] else 1 for i in range(size)]
        assert 0 < sum(lower_head) < size  # both heads are the lower one somewhere
        chosen = torch.stack([next_log_probs[head, i] for i, head in enumerate(lower_head)])
        entropy_term = alpha * info["log_prob"]
        assert float(entropy_term.abs().mean()) > 1.0  # the entropy term shifts the atoms
        projected = projected_by_loop(
            chosen.exp(), batch["rew"], batch["terminated"], entropy_term, GAMMA, -10.0, 10.0
        )
    critic.train()
    q, log_probs = critic(torch.cat([obs, next_obs]), torch.cat([act, next_actions]))
    # L_Q: the cross-entropy of both heads to the projected target, averaged over heads and batch.
    expected_loss = -0.5 * sum((projected * log_probs[j, :size]).sum(-1).mean() for j in (0, 1))
    expected_loss.backward()

    assert metrics["Loss/critic"] == pytest.approx(float(expected_loss.detach()), rel=1e-5)
    q_mean = float(q[:, :size].mean().detach())
    assert metrics["q_mean"] == pytest.approx(q_mean, rel=1e-5, abs=1e-7)
    [stepped] = gradients
    for got, parameter in zip(stepped, critic.parameters(), strict=True):
        torch.testing.assert_close(got, parameter.grad, **CLOSE)


@pytest.mark.parametrize("aux_weight", [0.0, 5.0])
def test_the_actor_and_temperature_gradients_are_those_of_their_losses(aux_weight):
    params = dataclasses.replace(SMALL, actor_config=CUSTOM, initial_temperature=0.3)
    learner = make_learner(params)
    learner.actor.aux_weight = aux_weight
    actor, critic = copy.deepcopy(learner.actor), copy.deepcopy(learner.critic)
    alpha = learner.temperature.detach()
    batch = random_batch(seed=4)
    actor_steps = recording_gradients(learner.actor_optimizer)
    temperature_steps = recording_gradients(learner.temperature_optimizer)
    torch.manual_seed(5)
    metrics = learner.update(batch)  # update 0: actor, temperature and critic

    torch.manual_seed(5)
    obs, next_obs = batch["obs"], batch["next_obs"]
    actions, info = actor(torch.cat([obs, next_obs]), training=True)
    log_prob = info["log_prob"][: len(obs)]
    critic.eval()
    q, _ = critic(obs, actions[: len(obs)])
    # L_pi = E[alpha log pi(a|s) - min_j Q_j(s, a)] + the actor's auxiliary losses.
    actor_loss = (alpha * log_prob - torch.minimum(q[0], q[1])).mean()
    aux = info["aux_losses"]["action_l2"]
    (actor_loss + aux).backward()
    entropy = float(-log_prob.detach().mean())
    # d/d(log alpha) of L_alpha = alpha (H - H_target) is alpha (H - H_target) itself.
    temperature_gradient = float(alpha) * (entropy - learner.target_entropy)

    assert metrics["Loss/actor"] == pytest.approx(float(actor_loss.detach()), rel=1e-5)
    assert metrics["Loss/aux_action_l2"] == pytest.approx(float(aux.detach()), rel=1e-5, abs=1e-9)
    assert metrics["entropy"] == pytest.approx(entropy, rel=1e-5)
    assert metrics["Loss/temperature"] == pytest.approx(temperature_gradient, rel=1e-5)
    [stepped] = actor_steps
    for got, parameter in zip(stepped, actor.parameters(), strict=True):
        torch.testing.assert_close(got, parameter.grad, **CLOSE)
    [[got_temperature]] = temperature_steps
    assert float(got_temperature) == pytest.approx(temperature_gradient, rel=1e-4)


def test_the_projection_discounts_the_entropy_term_with_the_atoms():
    # 5 atoms on [-2, 2]; all mass on atom 4 (z = 2); r = 0.5, gamma 0.5, entropy term 1:
    # 0.5 + 0.5 * (2 - 1) = 1.0, exactly atom 3 (without gamma on the term: 0.5, split 2 / 3).
    one_hot = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]]).clamp(min=1e-30).log()
    target = categorical_td_target(
        one_hot, torch.tensor([0.5]), torch.tensor([0.0]), torch.tensor([1.0]), 0.5, -2.0, 2.0
    )
    torch.testing.assert_close(target, torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]]))


def test_the_projection_equals_the_atom_by_atom_loop_inside_the_support():
    generator = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(16, 11, generator=generator), -1)
    rewards = torch.randn(16, generator=generator)
    terminated = (torch.rand(16, generator=generator) < 0.25).float()
    entropy_term = 0.3 * torch.randn(16, generator=generator)
    got = categorical_td_target(probs.log(), rewards, terminated, entropy_term, 0.8, -4.0, 4.0)
    expected = projected_by_loop(probs, rewards, terminated, entropy_term, 0.8, -4.0, 4.0)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def filled_replay(capacity: int, count: int, start: int = 0) -> TransitionReplay:
    """A replay holding transitions ``start .. start + count - 1``, added in three calls; every
    field of transition ``n`` is made from ``n``, so a sampled row shows where it came from."""
    replay = TransitionReplay(capacity, obs_dim=2, action_dim=1, seed=1)
    numbers = np.arange(start, start + count, dtype=np.float32)
    for chunk in np.array_split(numbers, 3):
        replay.add(
            np.stack([chunk, -chunk], 1),
            chunk[:, None] * 10,
            chunk * 100,
            np.stack([chunk + 0.5, -chunk], 1),
            chunk % 2,
        )
    return replay


def test_a_sampled_transition_is_one_stored_transition_with_its_reward_divided_by_the_scale():
    replay = filled_replay(capacity=64, count=40)
    sample = replay.sample(256, reward_scale=4.0, device=torch.device("cpu"))
    number = sample["obs"][:, 0]
    assert set(number.tolist()) <= set(range(40))  # only the filled part of the ring
    assert len(set(number.tolist())) > 30  # uniform over all of it
    torch.testing.assert_close(sample["obs"][:, 1], -number)
    torch.testing.assert_close(sample["act"][:, 0], number * 10)
    torch.testing.assert_close(sample["rew"], number * 100 / 4.0)
    torch.testing.assert_close(sample["next_obs"], torch.stack([number + 0.5, -number], 1))
    torch.testing.assert_close(sample["terminated"], number % 2)


def test_a_full_ring_keeps_the_newest_transitions_oldest_first():
    replay = filled_replay(capacity=16, count=37)  # wraps twice, the last add across the end
    assert len(replay) == 16
    arrays = replay.arrays()
    np.testing.assert_array_equal(arrays["obs"][:, 0], np.arange(21, 37))
    np.testing.assert_array_equal(arrays["rew"], np.arange(21, 37) * 100)
    np.testing.assert_array_equal(arrays["terminated"], np.arange(21, 37) % 2)
    np.testing.assert_array_equal(arrays["next_obs"][:, 0], np.arange(21, 37) + 0.5)
    np.testing.assert_array_equal(arrays["act"][:, 0], np.arange(21, 37) * 10)
    sample = replay.sample(512, reward_scale=1.0, device=torch.device("cpu"))
    assert set(sample["obs"][:, 0].tolist()) == set(range(21, 37))


@pytest.mark.parametrize("count", [5, 16, 37])
def test_loading_arrays_at_the_saved_ring_position_restores_the_buffer(count):
    saved = filled_replay(capacity=16, count=count)
    restored = TransitionReplay(16, obs_dim=2, action_dim=1, seed=1)
    restored.load_arrays(saved.arrays(), next_index=saved._next)
    assert (len(restored), restored._next) == (len(saved), saved._next)
    for name in TransitionReplay.FIELDS:  # the same rows at the same ring positions
        np.testing.assert_array_equal(getattr(restored, name), getattr(saved, name))
    cpu = torch.device("cpu")
    expected = saved.sample(64, 2.0, cpu)
    for name, column in restored.sample(64, 2.0, cpu).items():
        torch.testing.assert_close(column, expected[name])


def test_loading_more_arrays_than_the_capacity_keeps_the_newest_from_position_zero():
    source = filled_replay(capacity=64, count=40).arrays()
    replay = TransitionReplay(16, obs_dim=2, action_dim=1)
    replay.load_arrays(source)
    assert (len(replay), replay._next) == (16, 0)
    np.testing.assert_array_equal(replay.obs[:, 0], np.arange(24, 40))
    replay.load_arrays({name: column[:0] for name, column in source.items()})
    assert len(replay) == 0


def test_each_critic_head_is_a_distribution_over_the_bins_with_its_bias():
    from drlcli.algos.flash_sac.critic import DoubleCategoricalCritic

    torch.manual_seed(0)
    critic = DoubleCategoricalCritic(5, 2, 16, 1, 11, -4.0, 4.0)
    with torch.no_grad():
        critic.head_bias.copy_(torch.linspace(-1.0, 1.0, 22).reshape(2, 11))
    obs, action = torch.randn(6, 5), torch.randn(6, 2)
    critic.eval()
    with torch.no_grad():
        q, log_probs = critic(obs, action)
        x = torch.cat([obs, action], dim=1).unsqueeze(0).expand(2, -1, -1)
        logits = critic.head(critic.encoder(x)) + critic.head_bias[:, None, :]
    assert log_probs.shape == (2, 6, 11) and q.shape == (2, 6)
    # Normalised over the bins of each head and sample (not over the heads).
    torch.testing.assert_close(log_probs, torch.log_softmax(logits, dim=2))
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(2, 6))
    torch.testing.assert_close(q, (log_probs.exp() * torch.linspace(-4.0, 4.0, 11)).sum(-1))


def test_loaded_moments_keep_this_optimisers_settings_and_put_step_counters_on_the_cpu():
    from drlcli.algos.flash_sac.learner import load_moments

    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(2))]
    saved = torch.optim.Adam(weights, lr=0.1, betas=(0.8, 0.9))
    for _ in range(3):
        saved.zero_grad()
        (weights[0].square().sum() + weights[1].sum()).backward()
        saved.step()
    state = saved.state_dict()
    for moments in state["state"].values():  # as an older writer stored them
        moments["step"] = moments["step"].to(torch.float64)
    fresh = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))]
    learning_rate = torch.tensor(0.5)  # a graphed learner's: its captured graph reads it
    loading = torch.optim.Adam(
        fresh, lr=learning_rate, betas=(0.7, 0.95), weight_decay=0.25, foreach=False
    )
    load_moments(loading, state)
    group = loading.param_groups[0]
    assert group["lr"] is learning_rate
    assert (group["betas"], group["weight_decay"]) == ((0.7, 0.95), 0.25)
    assert group["params"] == fresh
    for parameter, original in zip(fresh, weights, strict=True):
        moments = loading.state[parameter]
        assert moments["step"].dtype == torch.float32 and moments["step"].device.type == "cpu"
        assert float(moments["step"]) == 3.0
        torch.testing.assert_close(moments["exp_avg"], saved.state[original]["exp_avg"])
        torch.testing.assert_close(moments["exp_avg_sq"], saved.state[original]["exp_avg_sq"])

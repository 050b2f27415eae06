"""The recurrent PPO actor and value network (ADR 0018): the rollout's step-by-step reads, the
learner's chunk reads and play's carried state agree; one observation alone is the first step
of an episode; the export module is play's deterministic policy with the state fed back."""

from __future__ import annotations

import pytest
import torch

from drlcli.actors.contract import validate_on_policy_actor
from drlcli.actors.recurrent import (
    RecurrentGaussianPolicyActor,
    build_recurrent_gaussian_actor,
)
from drlcli.algos.ppo.networks import RecurrentValueNetwork

LOW, HIGH = [-1.0, -0.5], [1.0, 0.5]


def actor(cell: str = "lstm", layers: int = 1) -> RecurrentGaussianPolicyActor:
    torch.manual_seed(0)
    return build_recurrent_gaussian_actor(
        obs_dim=3,
        action_dim=2,
        action_low=LOW,
        action_high=HIGH,
        cell=cell,
        size=8,
        layers=layers,
        hidden_sizes=[16],
        init_log_std=-0.5,
    )


@pytest.mark.parametrize(("cell", "layers"), [("lstm", 1), ("gru", 2)])
def test_the_learners_chunk_read_gives_the_rollouts_own_log_probs(cell, layers):
    """Actions sampled step by step (the rollout) have, read back as one chunk from the same
    first state (the learner), the log-probs the rollout stored: the first PPO ratio is 1."""
    policy = actor(cell, layers)
    steps, batch = 9, 4
    obs = torch.randn(steps, batch, 3)
    first = torch.randn(policy.recurrent_state_shape(batch))
    state, actions, stored = first, [], []
    with torch.no_grad():
        for t in range(steps):
            action, log_prob, state = policy.step(obs[t], state)
            actions.append(action)
            stored.append(log_prob)
        log_prob, entropy = policy.sequence_log_prob_and_entropy(obs, torch.stack(actions), first)
    torch.testing.assert_close(log_prob, torch.stack(stored), rtol=1e-5, atol=1e-5)
    assert entropy.shape == (steps, batch)
    expected_entropy = (0.5 + 0.5 * torch.log(torch.tensor(2 * torch.pi)) - 0.5) * 2
    torch.testing.assert_close(entropy, torch.full((steps, batch), float(expected_entropy)))


def test_one_observation_alone_is_the_first_step_of_an_episode():
    policy = actor()
    obs = torch.randn(5, 3)
    zero = policy.core.initial_state(5)
    with torch.no_grad():
        actions, info = policy(obs)
        log_prob, _ = policy.sequence_log_prob_and_entropy(obs[None], actions[None], zero)
        mean, std = policy.get_mean_and_std(obs)
    torch.testing.assert_close(info["log_prob"], log_prob[0])
    torch.testing.assert_close(policy.log_prob_and_entropy(obs, actions)[0], info["log_prob"])
    assert mean.shape == std.shape == (5, 2)
    validate_on_policy_actor(policy, 3)  # PPO's check of a one-step actor holds


def test_play_carries_the_state_resets_it_at_an_episodes_start_and_matches_the_export():
    policy = actor("gru")
    export = policy.as_export_module()
    obs = torch.randn(6, 2, 3)
    starts = torch.zeros(6, 2, dtype=torch.bool)
    starts[3, 1] = True  # env 1 begins a new episode at step 3
    state = policy.core.initial_state(2)
    with torch.no_grad():
        for t in range(6):
            played = policy.explore(obs[t], dones=starts[t], deterministic=True)
            state = policy.core.reset(state, starts[t])
            exported, state = export(obs[t], state)
            torch.testing.assert_close(played, exported)
            assert torch.all(played >= torch.tensor(LOW)) and torch.all(
                played <= torch.tensor(HIGH)
            )
        # A step's action depends on the episode so far: the same observation after another
        # history gives another action; after a reset, the first step's.
        fresh = policy.explore(obs[0], dones=torch.ones(2, dtype=torch.bool), deterministic=True)
        first, _ = export(obs[0], policy.core.initial_state(2))
        torch.testing.assert_close(fresh, first)
        carried = policy.explore(obs[0], deterministic=True)
        assert not torch.allclose(carried, fresh)
        restarted = policy.explore(obs[0, :1], deterministic=True)  # another batch: anew
        torch.testing.assert_close(restarted, first[:1])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_recurrent_critic_reads_a_chunk_as_it_stepped(cell):
    torch.manual_seed(1)
    critic = RecurrentValueNetwork(4, cell, 6, 1, [8], "tanh")
    obs = torch.randn(7, 3, 4)
    first = torch.randn(critic.core.state_shape(3))
    state, values = first, []
    with torch.no_grad():
        for t in range(7):
            value, state = critic.step(obs[t], state)
            values.append(value)
        torch.testing.assert_close(critic(obs, first), torch.stack(values), rtol=1e-5, atol=1e-6)


def test_a_wrong_cell_or_activation_is_refused():
    with pytest.raises(ValueError, match="cell must be one of lstm, gru, got 'rnn'"):
        RecurrentGaussianPolicyActor(3, 2, LOW, HIGH, cell="rnn")
    with pytest.raises(ValueError, match="activation must be one of"):
        RecurrentGaussianPolicyActor(3, 2, LOW, HIGH, activation="sigmoid")


def test_the_closed_form_gradient_stays_the_mlps():
    from drlcli.algos.ppo.closed_form import ClosedFormGradients

    critic = RecurrentValueNetwork(3, "lstm", 8, 1, [8], "tanh")
    assert ClosedFormGradients.for_networks(actor(), critic) is None  # autograd reads sequences

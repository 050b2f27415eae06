"""The SAC learner: one update of the twin Q networks, the actor and the temperature
(Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications", algorithm 1).

One call of ``update(batch)`` on ``(s, a, r, s', terminated)``:

    critic:  a' ~ pi(.|s'),
             y = r + gamma (1 - terminated) (min_j Q'_j(s', a') - alpha log pi(a'|s'))
             L_Q = sum_j E[(Q_j(s, a) - y)^2]
    actor (``actor_update_period`` steps every ``actor_update_period`` updates), a~ ~ pi(.|s):
             L_pi = E[alpha log pi(a~|s) - min_j Q_j(s, a~)] + sum(aux_losses)
    temperature (``autotune_temperature``):
             L_alpha = E[-alpha (log pi(a~|s) + H_target)]
             H_target = -target_entropy_scale * A + sum_i log range_i
    targets: theta'_j <- (1 - tau) theta'_j + tau theta_j

alpha = exp(log alpha); the Q networks are frozen while the actor steps (its gradient reaches
the actor only).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

from drlcli.algos.sac.critic import TwinQ
from drlcli.algos.sac.params import SACParams
from drlcli.off_policy.soft_actor_critic import SoftActorCriticState, finite_update_metrics

if TYPE_CHECKING:
    from drlcli.algos.entry_types import LearnerContext
    from drlcli.off_policy.data_parallel import DataParallelGroup


def sac_target_entropy(action_range: torch.Tensor, scale: float = 1.0) -> float:
    """``-scale * A`` (the paper's target for actions in [-1, 1]) plus ``sum_i log range_i``:
    the same target for the actions rescaled onto the env's bounds."""
    return -scale * action_range.numel() + float(torch.log(action_range.clamp(min=1e-6)).sum())


def soft_q_target(
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
    alpha: torch.Tensor,
) -> torch.Tensor:
    """``y [B] = r + gamma (1 - terminated) (min_j Q'_j - alpha log pi)``, with ``next_q [2, B]``
    the target networks' values at ``(s', a')`` and ``next_log_prob [B]`` that of ``a'``."""
    soft_value = next_q.min(dim=0).values - alpha * next_log_prob
    return rewards + gamma * (1.0 - terminated) * soft_value


def _adam(parameters: Iterable[nn.Parameter], learning_rate: float) -> torch.optim.Adam:
    parameters = list(parameters)
    fused = True if parameters[0].device.type in ("cpu", "cuda") else None
    return torch.optim.Adam(parameters, learning_rate, fused=fused)


class SACLearner(SoftActorCriticState):
    """Owns ``learner.actor`` (the one policy instance), the Q networks and their targets, the
    temperature and the three optimisers.

    Args:
        context: what the learner is built from: the policy actor's spec (built-in or
            ``actor_config``), the task (sizes, ``obs_dim`` of the training observation
            replayed; the action bounds of the entropy target; a privileged critic's
            observation groups: the actor reads the policy group, the Q networks the critic
            group), the ``SACParams``, the discount, the torch device and the seed of
            initialisation and sampling.
    """

    def __init__(self, context: LearnerContext) -> None:
        critic_dim, action_range = self._build_actor_and_temperature(context)
        params: SACParams = context.params
        action_dim = context.facts.action_dim
        self.critic = TwinQ(critic_dim, action_dim, params.hidden_sizes).to(self.device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_entropy = sac_target_entropy(action_range, params.target_entropy_scale)
        self.actor_optimizer = _adam(self.actor.parameters(), params.policy_learning_rate)
        self.critic_optimizer = _adam(self.critic.parameters(), params.q_learning_rate)
        self.temperature_optimizer = _adam([self.log_temperature], params.policy_learning_rate)

    @property
    def temperature(self) -> torch.Tensor:
        return self.log_temperature.exp()

    def use_data_parallel(self, group: DataParallelGroup) -> None:
        """From now on average every gradient with the other learners of ``group`` before each
        optimiser step (they must hold the same networks and optimiser states when they start)."""
        self.data_parallel = group

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.data_parallel is not None:
            self.data_parallel.average_gradients(
                [p for group in optimizer.param_groups for p in group["params"]]
            )
        optimizer.step()

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One SAC update on a sampled batch ``{obs, act, rew, next_obs, terminated}`` (rewards
        already scaled). Returns the scalar diagnostics of this update."""
        p, groups = self.params, self.groups
        obs, act, next_obs = batch["obs"], batch["act"], batch["next_obs"]
        with torch.no_grad():
            next_actions, info = self.actor(groups.policy(next_obs), training=False)
            target = soft_q_target(
                self.target_critic(groups.critic(next_obs), next_actions),
                info["log_prob"],
                batch["rew"],
                batch["terminated"],
                self.gamma,
                self.temperature,
            )
        q = self.critic(groups.critic(obs), act)
        critic_loss = (q - target).square().mean(dim=1).sum()
        self._step(self.critic_optimizer, critic_loss)
        metrics = {"Loss/critic": critic_loss.detach(), "q_mean": q.detach().mean()}
        if self.updates % p.actor_update_period == 0:
            for _ in range(p.actor_update_period):
                metrics.update(self._update_actor_and_temperature(obs))
        with torch.no_grad():
            for target_param, param in zip(
                self.target_critic.parameters(), self.critic.parameters(), strict=True
            ):
                target_param.lerp_(param, p.target_tau)
        self.updates += 1
        return finite_update_metrics(metrics, f"SAC update {self.updates}", "q_learning_rate")

    def _update_actor_and_temperature(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        actions, info = self.actor(self.groups.policy(obs), training=True)
        log_prob = info["log_prob"]
        aux_losses: dict[str, torch.Tensor] = info.get("aux_losses") or {}
        self.keep_aux_names(aux_losses)
        self.critic.requires_grad_(False)  # gradients reach the actor only
        q = self.critic(self.groups.critic(obs), actions).min(dim=0).values
        self.critic.requires_grad_(True)
        alpha = self.temperature.detach()
        actor_loss = (alpha * log_prob - q).mean()
        total = actor_loss + sum(aux_losses.values(), torch.zeros((), device=obs.device))
        self._step(self.actor_optimizer, total)
        metrics = {
            "Loss/actor": actor_loss.detach(),
            "entropy": -log_prob.detach().mean(),
            "temperature": alpha,
        }
        if self.params.autotune_temperature:
            temperature_loss = (
                -self.temperature * (log_prob.detach() + self.target_entropy)
            ).mean()
            self._step(self.temperature_optimizer, temperature_loss)
            metrics["Loss/temperature"] = temperature_loss.detach()
        metrics.update({f"Loss/aux_{name}": value.detach() for name, value in aux_losses.items()})
        return metrics

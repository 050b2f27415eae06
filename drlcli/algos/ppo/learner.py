"""The PPO learner: owns ``learner.actor`` (the policy actor), the value network and the optimiser.

``train_step`` is the whole PPO update (Schulman et al. 2017, Algorithm 1 with the clipped
surrogate objective L^CLIP, value loss L^VF and entropy bonus S):

    L(theta) = E[ min(r_t(theta) A_t, clip(r_t(theta), 1 - eps, 1 + eps) A_t) ]
               - c1 * L^VF + c2 * S[pi_theta]
    r_t(theta) = pi_theta(a_t | s_t) / pi_theta_old(a_t | s_t)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.ppo.buffer import ReplayBuffer
from drlcli.algos.ppo.networks import ValueNetwork
from drlcli.config import PPOParams
from drlcli.errors import CheckpointError, PolicyActorContractError, TrainingError
from drlcli.flat_parameters import FlatParameters, flatten_optimizer_state


class Learner:
    """One PPO learner.

    Args:
        actor_spec: builds the policy actor (validated against the contract).
        obs_dim, action_dim: observation and action sizes.
        params: PPO hyper-parameters.
        device: torch device of the networks.
        seed: seeds the network initialisation and the minibatch shuffling.
    """

    def __init__(
        self,
        actor_spec: ActorSpec,
        obs_dim: int,
        action_dim: int,
        params: PPOParams,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        torch.manual_seed(seed)
        self.params = params
        self.device = torch.device(device)
        self.actor = build_policy_actor(actor_spec, obs_dim, action_dim, self.device)
        self.value_network = ValueNetwork(obs_dim, params.hidden_sizes, params.activation).to(
            self.device
        )
        # Small networks make each minibatch step overhead-bound: with all parameters in one
        # flat tensor, zeroing, global gradient clipping and the (fused) Adam step are one
        # kernel each instead of one per parameter tensor.
        self.flat = FlatParameters([*self.actor.parameters(), *self.value_network.parameters()])
        self.optimizer = torch.optim.Adam(
            [self.flat.values], lr=params.learning_rate, eps=1e-5, fused=True
        )
        self.buffer = ReplayBuffer()
        self.shuffle_generator = torch.Generator().manual_seed(seed)

    # --- parameters ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """Network parameters on CPU: ``{"actor": ..., "value": ...}`` (what rollouts need)."""
        return {
            "actor": {k: v.detach().cpu().clone() for k, v in self.actor.state_dict().items()},
            "value": {
                k: v.detach().cpu().clone() for k, v in self.value_network.state_dict().items()
            },
        }

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.value_network.load_state_dict(state["value"])

    def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Load an optimiser state of this learner's networks: over the flat parameters, or
        one per parameter tensor (checkpoints written before the parameters were flat)."""
        try:
            self.optimizer.load_state_dict(flatten_optimizer_state(state, self.flat))
        except (ValueError, KeyError, TypeError, IndexError) as error:
            raise CheckpointError(
                f"the checkpoint's optimiser state does not fit this learner ({error}); it was "
                "written by another drl version or network layout: start a new run instead"
            ) from None

    # --- training --------------------------------------------------------------------------

    def add(self, *trajectories: dict[str, np.ndarray]) -> int:
        """Add rollout actors' trajectories to the on-policy buffer; returns its size."""
        for trajectory in trajectories:
            self.buffer.add(trajectory)
        return len(self.buffer)

    def train_step(self, learning_rate: float) -> tuple[dict[str, Any], dict[str, float]]:
        """One PPO update on the whole buffer, then clear it.

        Args:
            learning_rate: Adam step size for this round (the driver anneals it).

        Returns:
            ``(state_dict, metrics)``; ``metrics["buffer_size"]`` is measured before the clear.
        """
        p = self.params
        data = {k: torch.as_tensor(v, device=self.device) for k, v in self.buffer.data().items()}
        buffer_size = len(data["obs"])
        self.buffer.clear()
        obs, actions, logp_old = data["obs"], data["act"], data["logp"]
        values_old, returns = data["value"], data["ret"]
        advantages = data["adv"]
        if p.normalize_advantages and buffer_size > 1:  # global, over the whole round
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        minibatch_size = max(1, buffer_size // p.num_minibatches)
        sums = torch.zeros(4, device=self.device)  # policy loss, value loss, entropy, grad norm
        minibatches = 0
        epochs_done = 0
        stop = False
        num_minibatches = buffer_size // minibatch_size  # a remainder is left out
        columns = (obs, actions, logp_old, values_old, returns, advantages)
        for _epoch in range(p.num_epochs):
            order = torch.randperm(buffer_size, generator=self.shuffle_generator).to(self.device)
            shuffled = [column[order] for column in columns]  # one gather per column and epoch
            for start in range(0, num_minibatches * minibatch_size, minibatch_size):
                mb_obs, mb_actions, mb_logp_old, mb_values_old, mb_returns, mb_adv = (
                    column[start : start + minibatch_size] for column in shuffled
                )
                logp, entropy = self.actor.log_prob_and_entropy(mb_obs, mb_actions)
                log_ratio = logp - mb_logp_old
                ratio = log_ratio.exp()
                # L^CLIP, negated for gradient descent.
                policy_loss = torch.max(
                    -mb_adv * ratio, -mb_adv * ratio.clamp(1 - p.clip_coef, 1 + p.clip_coef)
                ).mean()
                value = self.value_network(mb_obs)
                if p.clip_value_loss:
                    clipped = mb_values_old + (value - mb_values_old).clamp(
                        -p.clip_coef, p.clip_coef
                    )
                    value_error = torch.max((value - mb_returns) ** 2, (clipped - mb_returns) ** 2)
                else:
                    value_error = (value - mb_returns) ** 2
                value_loss = 0.5 * value_error.mean()
                entropy_mean = entropy.mean()
                loss = policy_loss + p.vf_coef * value_loss
                if p.ent_coef:  # a zero coefficient would only add backward work
                    loss = loss - p.ent_coef * entropy_mean

                self.flat.zero_grad()
                loss.backward()
                grad_norm = self.flat.clip_grad_norm(p.max_grad_norm)
                self.optimizer.step()
                self.actor.normalize_parameters()

                with torch.no_grad():
                    sums += torch.stack([policy_loss, value_loss, entropy_mean, grad_norm])
                minibatches += 1
                if p.target_kl is not None:
                    with torch.no_grad():
                        approx_kl = ((ratio - 1) - log_ratio).mean()  # k3 estimator, >= 0
                    if approx_kl.item() > p.target_kl:
                        stop = True  # KL early stop: the policy moved far enough this round
                        break
            epochs_done += 1
            if stop:
                break

        if not self.flat.check_views():
            raise PolicyActorContractError(
                "the policy actor replaced a parameter tensor or its gradient during the update "
                "(e.g. `p.data = ...` in normalize_parameters); update parameters in place "
                "(`p.copy_(...)` under torch.no_grad())"
            )
        means = (sums / max(minibatches, 1)).tolist()
        if not all(np.isfinite(means)):
            raise TrainingError(
                "PPO update produced a non-finite loss or gradient; lower "
                "algo_params.learning_rate or check the environment's rewards"
            )
        with torch.no_grad():  # how far the round's update moved the policy, on all its data
            log_ratio, _ = self.actor.log_prob_and_entropy(obs, actions)
            log_ratio -= logp_old
            ratio = log_ratio.exp()
            approx_kl = ((ratio - 1) - log_ratio).mean().item()
            clip_fraction = ((ratio - 1).abs() > p.clip_coef).float().mean().item()
            predicted = self.value_network(obs)
            residual_var = torch.var(returns - predicted)
            returns_var = torch.var(returns)
            explained = (1 - residual_var / returns_var).item() if returns_var > 0 else float("nan")
        metrics = {
            "Loss/policy": means[0],
            "Loss/value": means[1],
            "Loss/entropy": means[2],
            "approx_kl": approx_kl,
            "clip_fraction": clip_fraction,
            "grad_norm": means[3],
            "explained_variance": explained,
            "learning_rate": learning_rate,
            "epochs": float(epochs_done),
            "buffer_size": float(buffer_size),
        }
        return self.state_dict(), metrics


GAUSSIAN_BUILDER = "drlcli.actors.gaussian:build_gaussian_actor"


def gaussian_actor_spec(params: PPOParams, action_low: Any, action_high: Any) -> ActorSpec:
    """The spec of the built-in PPO policy actor for an environment's action bounds."""
    return ActorSpec(
        GAUSSIAN_BUILDER,
        {
            "action_low": [float(x) for x in action_low],
            "action_high": [float(x) for x in action_high],
            "hidden_sizes": list(params.hidden_sizes),
            "activation": params.activation,
            "init_log_std": params.init_log_std,
        },
    )

"""The PPO learner: the stateful shell around ``maths.py``, which holds every formula.

It owns ``learner.actor`` (the policy actor), the value network and the optimiser.
``train_step`` is the whole PPO update (Schulman et al. 2017, Algorithm 1): the round's
advantages standardised, then for each of ``num_epochs`` a shuffled pass over the round in
``num_minibatches`` minibatches, each one the gradient of ``maths.ppo_loss`` (in closed form
for the built-in networks, ``closed_form.py``; a recurrent policy's chunks through its fused
cores), the global gradient-norm clip and one Adam step; ``target_kl`` stops early.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from drlcli.actors.contract import validate_on_policy_actor
from drlcli.actors.gaussian import policy_output_layer
from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.ppo.buffer import ReplayBuffer
from drlcli.algos.ppo.closed_form import ClosedFormGradients
from drlcli.algos.ppo.maths import (
    adapted_learning_rate,
    approx_kl,
    clip_fraction,
    explained_variance,
    policy_loss,
    ppo_loss,
    rpo_shifted_actions,
    standardize_advantages,
    standardize_masked,
    value_loss,
)
from drlcli.algos.ppo.networks import build_value_network
from drlcli.algos.ppo.params import PPOParams
from drlcli.algos.ppo.round_steps import STEP_COLUMNS, RoundSteps
from drlcli.algos.ppo.sequences import chunk_trajectory, core_state, sequence_steps
from drlcli.errors import CheckpointError, PolicyActorContractError, TrainingError
from drlcli.flat_parameters import FlatParameters, check_flat_optimizer_state
from drlcli.observations import GroupReader, ObservationGroups

if TYPE_CHECKING:
    from drlcli.algos.entry_types import LearnerContext, RoundPlan


@dataclass
class RoundClock:
    """Where the run stands as each round starts, kept by the learner for its learning-rate
    schedule: the env steps the run trained before the next round (all learners together) out
    of the run's planned total. A resumed run's clock starts at its checkpoint's env steps."""

    env_steps: int
    steps_per_round: int
    planned_env_steps: int

    @classmethod
    def of(cls, plan: RoundPlan) -> RoundClock:
        return cls(plan.start_env_steps, plan.steps_per_round, plan.planned_env_steps)

    def fraction_done(self) -> float:
        return self.env_steps / self.planned_env_steps

    def advance(self) -> None:
        """One round trained."""
        self.env_steps += self.steps_per_round


class Learner:
    """One PPO learner.

    Args:
        actor_spec: builds the policy actor (validated against the contract).
        obs_dim, action_dim: observation and action sizes (``obs_dim``: of the training
            observation the trajectories hold).
        params: PPO hyper-parameters.
        device: torch device of the networks.
        seed: seeds the network initialisation and the minibatch shuffling.
        closed_form: compute the built-in networks' gradients in closed form
            (``closed_form.py``, the same maths without autograd's per-operation cost);
            False, or a custom policy actor, uses autograd.
        plan: the run's rounds: the learner keeps its learning-rate schedule's position by
            them (``clock``); None: every ``train_step`` is given its position.
        groups: a privileged critic's observation groups: the policy actor reads the policy
            group, the value network the critic group; None: both read the whole observation.
        gamma, gae_lambda: GAE's discount and lambda, which
            ``recompute_advantages_per_epoch`` needs (the sampler's, the run's config).
    """

    def __init__(
        self,
        actor_spec: ActorSpec,
        obs_dim: int,
        action_dim: int,
        params: PPOParams,
        device: str = "cpu",
        seed: int = 0,
        closed_form: bool = True,
        plan: RoundPlan | None = None,
        groups: ObservationGroups | None = None,
        gamma: float | None = None,
        gae_lambda: float | None = None,
    ) -> None:
        if params.recompute_advantages_per_epoch and (gamma is None or gae_lambda is None):
            raise TypeError("recompute_advantages_per_epoch needs the learner's gamma, gae_lambda")
        torch.manual_seed(seed)
        self.params = params
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.clock = RoundClock.of(plan) if plan is not None else None
        self.device = torch.device(device)
        self.groups = GroupReader(groups, self.device)
        policy_dim, critic_dim = self.groups.widths(obs_dim)
        self.actor = build_policy_actor(actor_spec, policy_dim, action_dim, self.device)
        validate_on_policy_actor(self.actor, policy_dim)
        if params.policy_last_layer_scale != 1.0:
            scale_policy_output_layer(self.actor, params.policy_last_layer_scale)
        self.value_network = build_value_network(params, critic_dim).to(self.device)
        # Small networks make each minibatch step overhead-bound: with all parameters in one
        # flat tensor, zeroing, global gradient clipping and the (fused) Adam step are one
        # kernel each instead of one per parameter tensor.
        self.flat = FlatParameters([*self.actor.parameters(), *self.value_network.parameters()])
        self.optimizer = torch.optim.Adam(
            [self.flat.values], lr=params.learning_rate, eps=1e-5, fused=True
        )
        self.closed_form = (
            ClosedFormGradients.for_networks(self.actor, self.value_network)
            if closed_form
            else None
        )
        self.buffer = ReplayBuffer()
        self.shuffle_generator = torch.Generator().manual_seed(seed)
        self._value_executor: ThreadPoolExecutor | None = None

    # --- state ---------------------------------------------------------------------------

    def network_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """Network parameters on CPU: ``{"actor": ..., "value": ...}``: what rollout actors
        sample with and what parameter averaging mixes."""
        return {
            "actor": {k: v.detach().cpu().clone() for k, v in self.actor.state_dict().items()},
            "value": {
                k: v.detach().cpu().clone() for k, v in self.value_network.state_dict().items()
            },
        }

    def load_network_state(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.value_network.load_state_dict(state["value"])

    def state_dict(self) -> dict[str, Any]:
        """Everything resume needs: ``{actor, value, optimizer, shuffle_generator}`` (the
        minibatch order's generator: a resumed run draws the same orders)."""
        return {
            **self.network_state(),
            "optimizer": self.optimizer.state_dict(),
            "shuffle_generator": self.shuffle_generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load ``state_dict()`` output."""
        self.load_network_state(state)
        try:
            check_flat_optimizer_state(state["optimizer"], self.flat)
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError, IndexError) as error:
            raise CheckpointError(
                f"the checkpoint's optimiser state does not fit this learner ({error}); it was "
                "written by another drl version or network layout: start a new run instead"
            ) from None
        generator = state.get("shuffle_generator")  # absent: resumed under another learner
        if generator is not None:  # count, where each learner keeps its own seeded order
            try:
                self.shuffle_generator.set_state(torch.as_tensor(generator, dtype=torch.uint8))
            except (RuntimeError, TypeError) as error:
                raise CheckpointError(
                    f"the checkpoint's shuffle_generator state is damaged ({error})"
                ) from None

    def learning_rate(self, fraction_done: float) -> float:
        """The step size of a round that starts ``fraction_done`` into the run: linear decay
        to 0 with ``anneal_learning_rate``, else constant; under ``adaptive_kl``, the step size
        the previous minibatches left (the optimiser's, checkpointed with it)."""
        if self.params.learning_rate_schedule == "adaptive_kl":
            return float(self.optimizer.param_groups[0]["lr"])
        if not self.params.anneal_learning_rate:
            return self.params.learning_rate
        return self.params.learning_rate * (1.0 - fraction_done)

    # --- training --------------------------------------------------------------------------

    def add(self, *trajectories: dict[str, np.ndarray]) -> int:
        """Add rollout actors' trajectories to the on-policy buffer (a recurrent policy's cut
        into chunks, ``sequences.chunk_trajectory``); returns its rows (samples, or chunks)."""
        recurrent = self.params.recurrent
        for trajectory in trajectories:
            if recurrent is not None:
                trajectory = chunk_trajectory(trajectory, recurrent.sequence_length)
            self.buffer.add(trajectory)
        return len(self.buffer)

    def minibatch_gradients(self, **minibatch: Any) -> dict[str, Any]:
        """Write one minibatch's PPO-loss gradient into the parameters' ``.grad``: in closed form
        for the built-in networks (numpy arrays in), by autograd otherwise (tensors in).

        Args:
            minibatch: ``obs`` (the policy's), ``value_obs`` (the value network's, where a
                privileged critic reads other observations; else ``obs``), ``actions,
                old_logprob, old_value, advantages, returns`` (``ppo_loss``'s shapes).

        Returns:
            ``ppo_loss``'s stats.
        """
        if self.closed_form is not None:
            return self.closed_form.compute(**minibatch, params=self.params)
        if "mask" in minibatch:
            return self._sequence_gradients(minibatch)
        new_logprob, entropy, new_value = self.evaluate_actions(minibatch)
        loss, stats = ppo_loss(
            new_logprob=new_logprob,
            entropy=entropy,
            new_value=new_value,
            old_logprob=minibatch["old_logprob"],
            old_value=minibatch["old_value"],
            advantages=minibatch["advantages"],
            returns=minibatch["returns"],
            params=self.params,
        )
        self.flat.zero_grad()
        loss.backward()
        return stats

    def _sequence_gradients(self, chunks: dict[str, torch.Tensor]) -> dict[str, Any]:
        """``minibatch_gradients`` of a recurrent policy's chunks ``[C, L, ...]``, read
        time-major. The value network's forward and backward run on a second thread beside the
        policy's: the two share no parameter and ``ppo_loss`` is the sum of ``policy_loss`` and
        ``vf_coef * value_loss``, so each writes the gradient ``ppo_loss(...).backward()``
        would, while the two fused LSTM kernels, most of the update's time, run on two cores
        (the rollout actors wait for the update)."""
        chunks = sequence_steps(chunks)
        mask, p = chunks["mask"], self.params
        self.flat.zero_grad()

        def value_gradient() -> torch.Tensor:
            new_value = self.value_network(
                chunks.get("value_obs", chunks["obs"]), core_state(chunks["value_state"])
            )
            v_loss = value_loss(
                new_value=new_value,
                old_value=chunks["old_value"],
                returns=chunks["returns"],
                params=p,
                mask=mask,
            )
            (p.vf_coef * v_loss).backward()
            return v_loss.detach()

        value_job = self._value_thread().submit(value_gradient)
        try:
            new_logprob, entropy = self.actor.sequence_log_prob_and_entropy(
                chunks["obs"], chunks["actions"], core_state(chunks["policy_state"])
            )
            policy_objective, stats = policy_loss(
                new_logprob=new_logprob,
                entropy=entropy,
                old_logprob=chunks["old_logprob"],
                advantages=chunks["advantages"],
                params=p,
                mask=mask,
            )
            policy_objective.backward()
        except BaseException:
            wait([value_job])  # no thread writes gradients once this minibatch has failed
            raise
        return stats | {"v_loss": value_job.result()}

    def _value_thread(self) -> ThreadPoolExecutor:
        """The thread a recurrent update runs the value network on, made at its first use."""
        if self._value_executor is None:
            self._value_executor = ThreadPoolExecutor(1, thread_name_prefix="value-network")
        return self._value_executor

    def evaluate_actions(
        self, columns: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The policy's log-prob and entropy of the stored actions and the values, now.

        Args:
            columns: ``obs``, ``actions`` (``value_obs`` where a privileged critic reads
                its own), ``[B, ...]``; a recurrent policy's chunks time-major ``[L, C, ...]``
                with ``policy_state`` and ``value_state`` ``[C, *state]``, the states the
                rollout's cores read at each chunk's first step.

        Returns:
            ``(log_prob, entropy, value)``, each ``[B]`` (a recurrent policy's ``[L, C]``).
        """
        obs, value_obs = columns["obs"], columns.get("value_obs", columns["obs"])
        if "policy_state" not in columns:
            new_logprob, entropy = self.actor.log_prob_and_entropy(obs, columns["actions"])
            return new_logprob, entropy, self.value_network(value_obs)
        new_logprob, entropy = self.actor.sequence_log_prob_and_entropy(
            obs, columns["actions"], core_state(columns["policy_state"])
        )
        value = self.value_network(value_obs, core_state(columns["value_state"]))
        return new_logprob, entropy, value

    def train_step(
        self, fraction_done: float | None = None
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """One PPO update on the whole buffer, then clear it.

        Args:
            fraction_done: env steps trained before this round over the run's planned total
                (the learning-rate schedule's position); None: the learner's own ``clock``,
                which then moves on one round.

        Returns:
            ``(network_state, metrics)``; ``metrics["buffer_size"]`` is measured before the
            clear.
        """
        p = self.params
        columns, round_steps = self._round_columns()
        mask = columns.get("mask")  # a recurrent policy's chunks: their real steps
        rows = len(columns["obs"])  # samples, or a recurrent policy's chunks
        buffer_size = rows if mask is None else int(mask.sum())
        learning_rate = self._set_learning_rate(fraction_done)
        minibatch_size = max(1, rows // p.num_minibatches)
        num_minibatches = rows // minibatch_size  # a remainder is left out
        stat_rows = []  # per minibatch: policy loss, value loss, entropy, gradient norm
        epochs_done = 0
        stop = False
        reads_kl = p.learning_rate_schedule == "adaptive_kl" or p.target_kl is not None
        for epoch in range(p.num_epochs):
            if epoch > 0 and round_steps is not None:  # recompute_advantages_per_epoch
                columns |= self._recomputed_targets(columns, round_steps)
            order = torch.randperm(rows, generator=self.shuffle_generator).to(self.device)
            # One gather per column and epoch; closed form reads numpy views of them.
            shuffled = {name: column[order] for name, column in columns.items()}
            stored_actions = shuffled["actions"]
            if p.rpo_alpha is not None:
                shuffled["actions"] = rpo_shifted_actions(
                    stored_actions, p.rpo_alpha, self.shuffle_generator
                )
            if self.closed_form is not None:
                shuffled = {name: column.numpy() for name, column in shuffled.items()}
            for start in range(0, num_minibatches * minibatch_size, minibatch_size):
                minibatch = {
                    name: column[start : start + minibatch_size]
                    for name, column in shuffled.items()
                }
                stats = self.minibatch_gradients(**minibatch)
                kl = None
                if reads_kl:
                    if p.rpo_alpha is not None:
                        # RPO's perturbed log-prob measures its noise, not the policy's move.
                        actions = stored_actions[start : start + minibatch_size]
                        stats["logratio"] = self._policy_logratio(minibatch, actions)
                    kl = approx_kl(stats["logratio"])
                if p.learning_rate_schedule == "adaptive_kl":
                    self._adapt_learning_rate(kl)
                grad_norm = self.flat.clip_grad_norm(p.max_grad_norm)
                self.flat.adam_step(self.optimizer)
                self.actor.normalize_parameters()

                # Tensors stay tensors until the end: no device synchronisation per minibatch.
                stat_rows.append(
                    (stats["pg_loss"], stats["v_loss"], stats["entropy_loss"], grad_norm)
                )
                if p.target_kl is not None and kl > p.target_kl:
                    stop = True  # KL early stop: the policy moved far enough this round
                    break
            epochs_done += 1
            if stop:
                break

        metrics = self._round_metrics(columns, stat_rows)
        if p.learning_rate_schedule == "adaptive_kl":  # where the round's minibatches left it
            learning_rate = float(self.optimizer.param_groups[0]["lr"])
        metrics |= {
            "learning_rate": learning_rate,
            "epochs": float(epochs_done),
            "buffer_size": float(buffer_size),
        }
        return self.network_state(), metrics

    def _round_columns(self) -> tuple[dict[str, torch.Tensor], RoundSteps | None]:
        """The buffer's round as the update reads it, the buffer cleared: ``obs`` (the
        policy's), ``value_obs`` (a privileged critic's own), ``actions, old_logprob``, the
        targets of ``_targets`` (the value network's return statistics updated with this
        round's first, under ``normalize_value``); a recurrent policy's chunks add ``mask``
        and their first steps' ``policy_state`` and ``value_state``. Under
        ``recompute_advantages_per_epoch`` also the round's steps as GAE reads them."""
        stored = self.buffer.data()
        round_steps = None
        if self.params.recompute_advantages_per_epoch:
            round_steps = RoundSteps.of(stored, self.buffer.lengths(), self.device)
        self.buffer.clear()
        data = {
            name: torch.as_tensor(column, device=self.device)
            for name, column in stored.items()
            if name not in STEP_COLUMNS
        }
        mask = data.get("mask")
        statistics = self.value_network.return_statistics
        if statistics is not None:  # normalize_value: the round's targets join the statistics
            statistics.update(data["ret"] if mask is None else data["ret"][mask])
        obs = self.groups.policy(data["obs"])
        columns = {
            "obs": obs,
            "actions": data["act"],
            "old_logprob": data["logp"],
            **self._targets(data["adv"], data["value"], data["ret"], mask),
        }
        value_obs = self.groups.critic(data["obs"])
        if value_obs is not obs:  # a privileged critic: its own observations
            columns["value_obs"] = value_obs
        for name in ("mask", "policy_state", "value_state"):
            if name in data:
                columns[name] = data[name]
        return columns, round_steps

    def _targets(
        self,
        advantages: torch.Tensor,
        values: torch.Tensor,
        returns: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        """``advantages`` (standardised over the round's real samples with
        ``normalize_advantages``), ``old_value`` and ``returns`` (standardised by the value
        network's return statistics under ``normalize_value``) from the GAE's advantages, the
        values and the value targets, ``[N]`` (a recurrent policy's chunks ``[C, L]``)."""
        if self.params.normalize_advantages and (mask is None and len(advantages) > 1):
            advantages = standardize_advantages(advantages)
        elif self.params.normalize_advantages and mask is not None and mask.sum() > 1:
            advantages = standardize_masked(advantages, mask)
        statistics = self.value_network.return_statistics
        if statistics is not None:
            values, returns = statistics.normalize(values), statistics.normalize(returns)
        return {"old_value": values, "advantages": advantages, "returns": returns}

    def _recomputed_targets(
        self, columns: dict[str, torch.Tensor], round_steps: RoundSteps
    ) -> dict[str, torch.Tensor]:
        """``_targets`` again from the value network as the previous epochs left it
        (``recompute_advantages_per_epoch``): ``V(s_t)``, ``V(s_{t+1})`` and each rollout's
        GAE; the value clip is then around these values."""
        with torch.no_grad():
            values = self._values_of(columns.get("value_obs", columns["obs"]))
            next_values = self._values_of(self.groups.critic(round_steps.next_obs))
        advantages, returns = round_steps.advantages(
            values, next_values, self.gamma, self.gae_lambda
        )

        def tensor(column: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(column, dtype=torch.float32, device=self.device)

        return self._targets(tensor(advantages), tensor(values), tensor(returns), None)

    def _values_of(self, obs: torch.Tensor) -> np.ndarray:
        """The value network's values ``[N]`` (float64) of observations ``[N, O]``, as
        values of the return (de-normalised under ``normalize_value``)."""
        predicted = self.value_network(obs).cpu().numpy().astype(np.float64)
        statistics = self.value_network.return_statistics
        return predicted if statistics is None else statistics.real(predicted)

    def _set_learning_rate(self, fraction_done: float | None) -> float:
        """Set and return the round's step size (``learning_rate``) at ``fraction_done``, or
        at the learner's own clock, which then moves on one round."""
        if fraction_done is None:
            if self.clock is None:
                raise TypeError("train_step: a learner built without a plan needs fraction_done")
            fraction_done = self.clock.fraction_done()
            self.clock.advance()
        learning_rate = self.learning_rate(fraction_done)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        return learning_rate

    def _policy_logratio(self, minibatch: dict[str, Any], actions: Any) -> torch.Tensor:
        """``log pi(a | s) - log pi_old(a | s)`` of a minibatch's stored (unperturbed)
        ``actions`` under the policy now, of its real steps: what the KL of ``target_kl`` and
        ``adaptive_kl`` reads under ``rpo_alpha``."""
        columns = {name: torch.as_tensor(column) for name, column in minibatch.items()}
        columns["actions"] = torch.as_tensor(actions)
        with torch.no_grad():
            if "mask" not in columns:
                new_logprob, _ = self.actor.log_prob_and_entropy(columns["obs"], columns["actions"])
                return new_logprob - columns["old_logprob"]
            steps = sequence_steps(columns)
            new_logprob, _ = self.actor.sequence_log_prob_and_entropy(
                steps["obs"], steps["actions"], core_state(steps["policy_state"])
            )
            return (new_logprob - steps["old_logprob"])[steps["mask"]]

    def _adapt_learning_rate(self, kl: float) -> None:
        """The ``adaptive_kl`` step after a minibatch of approximate KL ``kl``."""
        for group in self.optimizer.param_groups:
            group["lr"] = adapted_learning_rate(group["lr"], kl, self.params.desired_kl)

    def _round_metrics(
        self, columns: dict[str, torch.Tensor], stat_rows: list[tuple[Any, ...]]
    ) -> dict[str, float]:
        """The round's diagnostics after its update: the minibatch means of the losses and
        gradient norm, and on all its (real) samples how far the policy moved (approximate KL,
        clip fraction) and how well the values explain the returns.

        Raises:
            PolicyActorContractError: the actor replaced a parameter during the update.
            TrainingError: a mean is not finite.
        """
        if not self.flat.check_views():
            raise PolicyActorContractError(
                "the policy actor replaced a parameter tensor or its gradient during the update "
                "(e.g. `p.data = ...` in normalize_parameters); update parameters in place "
                "(`p.copy_(...)` under torch.no_grad())"
            )
        means = [float(sum(column)) / len(stat_rows) for column in zip(*stat_rows, strict=True)]
        quantities = ("policy loss", "value loss", "entropy", "gradient norm")
        non_finite = [
            f"{q} {m}" for q, m in zip(quantities, means, strict=True) if not np.isfinite(m)
        ]
        if non_finite:
            raise TrainingError(
                f"the PPO update's {', '.join(non_finite)} (mean over minibatches) is not finite; "
                "lower algo_params.learning_rate or check the environment's rewards"
            )
        mask = columns.get("mask")
        with torch.no_grad():  # how far the round's update moved the policy, on all its data
            if mask is None:
                new_logprob, _, predicted = self.evaluate_actions(columns)
                old_logprob, returns = columns["old_logprob"], columns["returns"]
            else:
                steps = sequence_steps(columns)
                real = steps["mask"]
                new_logprob, _, predicted = self.evaluate_actions(steps)
                new_logprob, predicted = new_logprob[real], predicted[real]
                old_logprob, returns = steps["old_logprob"][real], steps["returns"][real]
            logratio = new_logprob - old_logprob
            return {
                "Loss/policy": means[0],
                "Loss/value": means[1],
                "Loss/entropy": means[2],
                "approx_kl": approx_kl(logratio),
                "clip_fraction": clip_fraction(logratio, self.params.clip_coef),
                "grad_norm": means[3],
                "explained_variance": explained_variance(predicted, returns),
            }


def scale_policy_output_layer(actor: torch.nn.Module, scale: float) -> None:
    """Multiply the initial weights of the policy mean's output layer by ``scale``
    (``policy_last_layer_scale``; the driver's probe refuses an actor without that layer)."""
    layer = policy_output_layer(actor)
    if layer is None:
        raise PolicyActorContractError(
            f"policy actor {type(actor).__name__} has no MLP mean whose output layer "
            "policy_last_layer_scale could scale"
        )
    with torch.no_grad():
        layer.weight.mul_(scale)


def build_ppo_learner(context: LearnerContext) -> Learner:
    """The PPO learner of one learner process: the training observation's sizes and groups,
    and the run's plan (its learning-rate schedule keeps its position by rounds)."""
    facts = context.facts
    return Learner(
        context.spec,
        facts.obs_dim,
        facts.action_dim,
        context.params,
        context.device,
        context.seed,
        plan=context.plan,
        groups=facts.observation_groups,
        gamma=context.gamma,
        gae_lambda=context.gae_lambda,
    )

"""The FlashSAC learner: one update of critic, actor and temperature, and its replay buffer.

One call of ``update(batch)`` (the losses as in the paper, SAC with a distributional critic):

    actor (every ``actor_update_period`` updates), on obs and next_obs together:
        L_pi    = E[ alpha * log pi(a|s) - min_j Q_j(s, a) ] + sum(aux_losses),  a ~ pi(.|s)
        L_alpha = alpha * E[ H(pi) - H_target ]
        H_target = A/2 log(2 pi e sigma^2) + sum_i log range_i
    critic:
        a' ~ pi(.|s'),  j* = argmin_j E[Q'_j(s', a')]          (target network, lower head)
        p  = Proj( r + gamma (1 - terminated) (z - alpha log pi(a'|s')) ) of head j*
        L_Q = - mean_j E[ sum_k p_k log q_j,k(s, a) ]           (both heads, averaged)
    target:  theta' <- (1 - tau) theta' + tau theta

Learning rates follow a cosine from ``learning_rate`` to ``learning_rate_end`` over the run;
``normalize_parameters()`` runs after every actor and critic step.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

import torch

from drlcli.algos.flash_sac.critic import DoubleCategoricalCritic, categorical_td_target
from drlcli.algos.flash_sac.cuda_graph import resolve_cuda_graph
from drlcli.algos.flash_sac.layers import share_batch_statistics
from drlcli.algos.flash_sac.params import FlashSACParams
from drlcli.errors import TrainingError
from drlcli.off_policy.data_parallel import DataParallelGroup
from drlcli.off_policy.soft_actor_critic import SoftActorCriticState, finite_update_metrics

if TYPE_CHECKING:
    from drlcli.algos.entry_types import LearnerContext


def target_entropy(action_dim: int, sigma: float, action_range: torch.Tensor) -> float:
    """Unified entropy target: a Gaussian of std ``sigma`` per dimension, mapped onto the bounds."""
    gaussian = 0.5 * action_dim * math.log(2 * math.pi * math.e * sigma**2)
    return gaussian + float(torch.log(action_range.clamp(min=1e-6)).sum())


def cosine_learning_rate(start: float, end: float, progress: float) -> float:
    """``end + (start - end) * (1 + cos(pi * progress)) / 2`` for progress in [0, 1]."""
    progress = min(max(progress, 0.0), 1.0)
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * progress))


def adam(parameters: Any, learning_rate: float, graphed: bool) -> torch.optim.Adam:
    """Adam for one of FlashSAC's networks, fused where the device has the kernel. Replayed in a
    CUDA graph (``graphed``): capturable (its step counters stay on the device), and its
    learning rate a device tensor that ``_set_learning_rates`` fills in place, which the graph
    reads at every replay (a Python float would be frozen into the graph)."""
    parameters = list(parameters)
    device = parameters[0].device
    rate = torch.tensor(learning_rate, device=device) if graphed else learning_rate
    fused = True if device.type in ("cpu", "cuda") else None
    return torch.optim.Adam(parameters, rate, fused=fused, capturable=graphed)


def load_moments(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a saved optimiser's moments and step counts, keeping this optimiser's settings.

    ``Optimizer.load_state_dict`` also copies every saved param-group field: a checkpoint
    written on a CPU (``capturable=False``, a float ``lr``) and resumed on a GPU with the CUDA
    graph could not be captured, and one written by a graphed learner would bring back its
    device ``lr`` tensor where this learner holds a float. ``load_state_dict`` makes new group
    dicts; each gets this learner's settings back, the very ``lr`` tensor object included
    (``_set_learning_rates`` fills it in place, and a graph captured after the load reads it).
    Each ``step`` counter goes where these settings want it: beside its parameter for a
    capturable or fused Adam, on the CPU otherwise.
    """
    settings = [
        {key: value for key, value in group.items() if key != "params"}
        for group in optimizer.param_groups
    ]
    optimizer.load_state_dict(state)
    for group, own in zip(optimizer.param_groups, settings, strict=True):
        group.update(own)
        on_device = bool(group.get("capturable") or group.get("fused"))
        for parameter in group["params"]:
            moments = optimizer.state.get(parameter)
            if moments is None or not isinstance(moments.get("step"), torch.Tensor):
                continue
            device = parameter.device if on_device else torch.device("cpu")
            moments["step"] = moments["step"].to(device=device, dtype=torch.float32)


class FlashSACLearner(SoftActorCriticState):
    """Owns ``learner.actor`` (the one policy instance), the critics, temperature, optimisers.

    Args:
        context: what the learner is built from: the policy actor's spec (built-in or
            ``actor_config``), the task (sizes, ``obs_dim`` of the training observation
            replayed; the action bounds of the entropy target; a privileged critic's
            observation groups: the actor reads the policy group, the critics the critic
            group), the ``FlashSACParams``, the discount, the torch device, the seed of
            initialisation and sampling, and the run's env steps and learners: the cosine
            schedules span this learner's share of the run's updates (``planned_updates``),
            and the learners it will make its updates with (``use_data_parallel``) decide the
            automatic CUDA-graph choice.
    """

    def __init__(self, context: LearnerContext) -> None:
        critic_dim, action_range = self._build_actor_and_temperature(context)
        params: FlashSACParams = context.params
        action_dim = context.facts.action_dim
        self.uses_cuda_graph = resolve_cuda_graph(
            params, context.spec, self.device, context.learners
        )
        self.critic = DoubleCategoricalCritic.from_params(critic_dim, action_dim, params).to(
            self.device
        )
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_entropy = target_entropy(action_dim, params.target_sigma, action_range)
        graphed = self.uses_cuda_graph
        self.actor_optimizer = adam(self.actor.parameters(), params.learning_rate, graphed)
        self.critic_optimizer = adam(self.critic.parameters(), params.learning_rate, graphed)
        self.temperature_optimizer = adam([self.log_temperature], params.learning_rate, graphed)
        self._graphs = CudaGraphUpdates(self._update_step) if self.uses_cuda_graph else None
        self.total_updates = planned_updates(context)
        if params.actor_normalize_parameters:
            self.actor.normalize_parameters()
        if params.critic_normalize_parameters:
            self.critic.normalize_parameters()
            self.target_critic.normalize_parameters()

    def use_data_parallel(self, group: DataParallelGroup) -> None:
        """From now on make every update together with the other learners of ``group``:
        gradients averaged, BatchNorm statistics over all their batches (data_parallel.py).
        The learners must hold the same networks and optimiser states when they start."""
        if self.uses_cuda_graph:  # resolve_cuda_graph refuses graphs with several learners
            raise TrainingError("a CUDA-graphed learner cannot join data-parallel learners")
        self.data_parallel = group
        for module in (self.actor, self.critic, self.target_critic):
            share_batch_statistics(module, group)

    def _average_gradients(self, parameters: Any) -> None:
        if self.data_parallel is not None:
            self.data_parallel.average_gradients(parameters)

    @property
    def temperature(self) -> torch.Tensor:
        return self.log_temperature.exp()

    def _set_learning_rates(self) -> float:
        rate = cosine_learning_rate(
            self.params.learning_rate,
            self.params.learning_rate_end,
            self.updates / self.total_updates,
        )
        for optimizer in (self.actor_optimizer, self.critic_optimizer, self.temperature_optimizer):
            for group in optimizer.param_groups:
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"].fill_(rate)  # in place: captured graphs read this tensor
                else:
                    group["lr"] = rate
        return rate

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One FlashSAC update on a sampled batch ``{obs, act, rew, next_obs, terminated}``
        (rewards already scaled). Returns the scalar diagnostics of this update."""
        rate = self._set_learning_rates()
        with_actor = self.updates % self.params.actor_update_period == 0
        if self._graphs is not None:
            metrics = self._graphs.run(batch, with_actor)
        else:
            metrics = self._update_step(batch, with_actor)
        self.updates += 1
        values = finite_update_metrics(metrics, f"FlashSAC update {self.updates}", "learning_rate")
        return {**values, "learning_rate": rate}

    def _update_step(self, batch: dict[str, torch.Tensor], with_actor: bool) -> dict:
        """The update itself, free of host synchronisation so a CUDA graph can capture it.
        Returns 0-dim tensors."""
        p, groups = self.params, self.groups
        act, rewards, terminated = batch["act"], batch["rew"], batch["terminated"]
        # The actor reads the policy group; the critics, the critic group (the same tensors
        # without observation groups).
        obs, next_obs = groups.critic(batch["obs"]), groups.critic(batch["next_obs"])
        policy_next_obs = groups.policy(batch["next_obs"])
        metrics: dict[str, torch.Tensor] = {}
        if with_actor:
            metrics.update(
                self._update_actor_and_temperature(
                    groups.policy(batch["obs"]), policy_next_obs, obs
                )
            )

        with torch.no_grad():
            next_actions, info = self.actor(policy_next_obs, training=False)
            entropy_term = self.temperature * info["log_prob"]
            self.target_critic.train()  # batch statistics, as the online critic sees them
            target_q, target_log_probs = self.target_critic(
                torch.cat([obs, next_obs]), torch.cat([act, next_actions])
            )
            next_q, next_log_probs = target_q[:, len(obs) :], target_log_probs[:, len(obs) :]
            lower = next_q.argmin(dim=0)  # the head with the lower expected Q, per sample
            chosen = next_log_probs.gather(
                0, lower.view(1, -1, 1).expand(1, -1, next_log_probs.shape[-1])
            )[0]
            target = categorical_td_target(
                chosen, rewards, terminated, entropy_term, self.gamma, p.v_min, p.v_max
            )
        self.critic.train()
        q, log_probs = self.critic(torch.cat([obs, next_obs]), torch.cat([act, next_actions]))
        critic_loss = -(target.unsqueeze(0) * log_probs[:, : len(obs)]).sum(-1).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self._average_gradients(self.critic.parameters())
        self.critic_optimizer.step()
        if p.critic_normalize_parameters:
            self.critic.normalize_parameters()
        with torch.no_grad():
            for target_param, param in zip(
                self.target_critic.parameters(), self.critic.parameters(), strict=True
            ):
                target_param.lerp_(param, p.target_tau)
            for target_buffer, buffer in zip(
                self.target_critic.buffers(), self.critic.buffers(), strict=True
            ):
                target_buffer.copy_(buffer)  # running statistics and atoms follow the critic
        metrics["Loss/critic"] = critic_loss.detach()
        metrics["q_mean"] = q[:, : len(obs)].mean().detach()
        return metrics

    def _update_actor_and_temperature(
        self, obs: torch.Tensor, next_obs: torch.Tensor, critic_obs: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The actor's step on ``obs`` and ``next_obs`` (the policy's observations; the
        critic judges the actions of ``obs`` on ``critic_obs``, its own of the same states)."""
        both = torch.cat([obs, next_obs])
        actions, info = self.actor(both, training=True)
        log_prob = info["log_prob"][: len(obs)]
        aux_losses: dict[str, torch.Tensor] = info.get("aux_losses") or {}
        self.keep_aux_names(aux_losses)
        self.critic.eval()
        self.critic.requires_grad_(False)  # gradients reach the actor only
        q, _ = self.critic(critic_obs, actions[: len(obs)])
        self.critic.requires_grad_(True)
        alpha = self.temperature.detach()
        actor_loss = (alpha * log_prob - torch.minimum(q[0], q[1])).mean()
        total = actor_loss + sum(aux_losses.values(), torch.zeros((), device=obs.device))
        self.actor_optimizer.zero_grad(set_to_none=True)
        total.backward()
        # L_alpha's gradient does not depend on the actor's step: both are averaged at once.
        entropy = -log_prob.detach().mean()
        temperature_loss = self.temperature * (entropy - self.target_entropy)
        self.temperature_optimizer.zero_grad(set_to_none=True)
        temperature_loss.backward()
        self._average_gradients([*self.actor.parameters(), self.log_temperature])
        self.actor_optimizer.step()
        if self.params.actor_normalize_parameters:
            self.actor.normalize_parameters()
        self.temperature_optimizer.step()
        metrics = {
            "Loss/actor": actor_loss.detach(),
            "Loss/temperature": temperature_loss.detach(),
            "entropy": entropy,
            "temperature": self.temperature.detach(),
        }
        metrics.update({f"Loss/aux_{name}": value.detach() for name, value in aux_losses.items()})
        return metrics

    def load_optimizer(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Moments and step counts only: this learner's settings stay (``load_moments``)."""
        load_moments(optimizer, state)


def planned_updates(context: LearnerContext) -> int:
    """One learner's share of the run's updates, at least 1: its transitions (the run's env
    steps over the learners) times ``updates_per_env_step``."""
    share = context.total_env_steps / context.learners * context.params.updates_per_env_step
    return max(math.ceil(share), 1)


# Replays CUDA graphs: without a GPU no test can run it, so `make mutation` leaves it out
# (scripts/gpu_check.py compares it with the eager update on a GPU).
class CudaGraphUpdates:  # pragma: no mutate block
    """Runs ``step(batch, with_actor)`` as captured CUDA graphs: one graph for an update with
    the actor and temperature step, one for a critic-only update (the two kinds of learner
    iteration). Each kind first runs ``WARMUP`` times eagerly on a side stream (real updates,
    which also create the optimiser state), is then captured, and from then on replayed on
    static input tensors that each call fills with the sampled batch.
    """

    WARMUP = 3

    def __init__(self, step: Any) -> None:
        self.step = step
        self.static: dict[str, torch.Tensor] | None = None
        self.graphs: dict[bool, Any] = {}
        self.outputs: dict[bool, dict[str, torch.Tensor]] = {}
        self.eager_calls = {True: 0, False: 0}
        self.stream = torch.cuda.Stream()

    def run(self, batch: dict[str, torch.Tensor], with_actor: bool) -> dict[str, torch.Tensor]:
        if self.static is None:
            self.static = {name: tensor.clone() for name, tensor in batch.items()}
        for name, tensor in batch.items():
            self.static[name].copy_(tensor)
        if with_actor in self.graphs:
            self.graphs[with_actor].replay()
            return self.outputs[with_actor]
        if self.eager_calls[with_actor] < self.WARMUP:
            self.eager_calls[with_actor] += 1
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                outputs = self.step(self.static, with_actor)
            torch.cuda.current_stream().wait_stream(self.stream)
            return outputs
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                outputs = self.step(self.static, with_actor)
        except RuntimeError as error:
            raise TrainingError(
                f"capturing the FlashSAC update as a CUDA graph failed ({error}); set "
                "algo_params.use_whole_cycle_cuda_graph: false"
            ) from error
        self.graphs[with_actor], self.outputs[with_actor] = graph, outputs
        graph.replay()  # capture records without running: run this update now
        return outputs

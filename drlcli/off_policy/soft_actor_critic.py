"""What the soft actor-critic learners (FlashSAC's, SAC's) share beyond the collector: the start
of their construction from a ``LearnerContext`` (the policy actor and the temperature), their
state, made of ``actor``, ``critic``, ``target_critic``, ``log_temperature``, three optimisers, an
update counter and the names of the actor's auxiliary losses, the rule that those names never
change during training (docs/adr/0017-custom-policy-actors.md), and the refusal of an update
whose diagnostics are not finite."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from drlcli.errors import TrainingError
from drlcli.normalization import reward_scaler_state_problem

if TYPE_CHECKING:
    import torch
    from torch import nn

    from drlcli.algos.entry_types import LearnerContext
    from drlcli.observations import GroupReader
    from drlcli.off_policy.data_parallel import DataParallelGroup

NETWORK_KEYS = ("actor", "critic", "target_critic", "log_temperature")
"""The learner-state entries that are networks: what learners share, and what a resume under
another learner count averages (``OffPolicy.network_keys``)."""
OPTIMIZER_KEYS = ("actor_optimizer", "critic_optimizer", "temperature_optimizer")


def return_scaler_problem(state: dict[str, Any]) -> str | None:
    """What is wrong with a stored learner state's ``return_scaler`` (the collector's reward
    scaler), or None (``Algorithm.check_learner_state``)."""
    problem = reward_scaler_state_problem(state.get("return_scaler"))
    return None if problem is None else f"return_scaler {problem}"


def finite_update_metrics(
    metrics: dict[str, Any], update: str, learning_rate: str
) -> dict[str, float]:
    """An update's diagnostics as floats; ``TrainingError`` naming each one that is not finite,
    with the fix: lower ``learning_rate`` (the parameter's name) or check the rewards."""
    values = {name: float(value) for name, value in metrics.items()}
    non_finite = [f"{name} {v}" for name, v in values.items() if not math.isfinite(v)]
    if non_finite:
        raise TrainingError(
            f"{update}: {', '.join(non_finite)} is not finite; lower algo_params.{learning_rate} "
            "or check the environment's rewards"
        )
    return values


class SoftActorCriticState:
    """``network_state`` / ``load_network_state`` and ``state_dict`` / ``load_state_dict`` of a
    learner holding the attributes named by ``NETWORK_KEYS`` and ``OPTIMIZER_KEYS``, ``updates``
    and ``aux_names``; ``load_optimizer`` is how one optimiser takes its stored state."""

    params: Any
    gamma: float
    device: torch.device
    groups: GroupReader
    actor: nn.Module
    critic: nn.Module
    target_critic: nn.Module
    log_temperature: nn.Parameter
    updates: int
    aux_names: frozenset[str] | None
    data_parallel: DataParallelGroup | None

    def _build_actor_and_temperature(self, context: LearnerContext) -> tuple[int, torch.Tensor]:
        """What both learners' construction begins with: keep the context's ``params``,
        ``gamma`` and ``device``, seed torch with its seed, then build the policy actor on the
        policy group's width (before the critic: the seeded initialisation depends on that
        order) and the temperature at ``params.initial_temperature``; no data-parallel group
        and no update yet. Returns the critic's observation width and the action range ``[A]``,
        half the span of the task's bounds."""
        import torch
        from torch import nn

        from drlcli.actors.spec import build_policy_actor
        from drlcli.observations import GroupReader

        facts = context.facts
        self.params, self.gamma = context.params, context.gamma
        self.device = torch.device(context.device)
        torch.manual_seed(context.seed)
        self.groups = GroupReader(facts.observation_groups, self.device)
        policy_dim, critic_dim = self.groups.widths(facts.obs_dim)
        self.actor = build_policy_actor(
            context.spec, policy_dim, facts.action_dim, self.device, *facts.action_bounds
        )
        self.log_temperature = nn.Parameter(
            torch.tensor(math.log(self.params.initial_temperature), device=self.device)
        )
        self.updates = 0
        self.aux_names = None
        self.data_parallel = None
        low, high = facts.action_bounds
        return critic_dim, (torch.as_tensor(high) - torch.as_tensor(low)).float() / 2

    def network_state(self) -> dict[str, Any]:
        """Parameters (and statistics buffers) of every network, on CPU: what learners share."""

        def cpu(module: nn.Module) -> dict[str, torch.Tensor]:
            return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}

        return {
            "actor": cpu(self.actor),
            "critic": cpu(self.critic),
            "target_critic": cpu(self.target_critic),
            "log_temperature": self.log_temperature.detach().cpu().clone(),
        }

    def load_network_state(self, state: dict[str, Any]) -> None:
        import torch

        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        with torch.no_grad():
            self.log_temperature.copy_(state["log_temperature"])

    def state_dict(self) -> dict[str, Any]:
        """Everything resume needs: networks, optimisers, the update counter (the schedules'
        position), the aux-loss names."""
        return {
            **self.network_state(),
            **{key: getattr(self, key).state_dict() for key in OPTIMIZER_KEYS},
            "updates": self.updates,
            "aux_names": sorted(self.aux_names) if self.aux_names is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_network_state(state)
        for key in OPTIMIZER_KEYS:
            self.load_optimizer(getattr(self, key), state[key])
        self.updates = int(state["updates"])
        names = state.get("aux_names")
        self.aux_names = frozenset(names) if names is not None else None

    def load_optimizer(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)

    def keep_aux_names(self, aux_losses: dict[str, Any]) -> None:
        """Record the actor's auxiliary-loss names at its first training step; refuse another
        set later (``TrainingError``)."""
        names = frozenset(aux_losses)
        if self.aux_names is None:
            self.aux_names = names
        elif names != self.aux_names:
            raise TrainingError(
                f"the actor's aux_losses changed from {sorted(self.aux_names)} to {sorted(names)}; "
                "the set of auxiliary losses must stay the same during training"
            )

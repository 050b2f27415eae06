"""What the soft actor-critic learners (FlashSAC's, SAC's) share beyond the collector: their
state, made of ``actor``, ``critic``, ``target_critic``, ``log_temperature``, three optimisers, an
update counter and the names of the actor's auxiliary losses, and the rule that those names
never change during training (docs/adr/0017-custom-policy-actors.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drlcli.errors import TrainingError
from drlcli.normalization import reward_scaler_state_problem

if TYPE_CHECKING:
    import torch
    from torch import nn

NETWORK_KEYS = ("actor", "critic", "target_critic", "log_temperature")
"""The learner-state entries that are networks: what learners share, and what a resume under
another learner count averages (``OffPolicy.network_keys``)."""
OPTIMIZER_KEYS = ("actor_optimizer", "critic_optimizer", "temperature_optimizer")


def return_scaler_problem(state: dict[str, Any]) -> str | None:
    """What is wrong with a stored learner state's ``return_scaler`` (the collector's reward
    scaler), or None (``Algorithm.check_learner_state``)."""
    problem = reward_scaler_state_problem(state.get("return_scaler"))
    return None if problem is None else f"return_scaler {problem}"


class SoftActorCriticState:
    """``network_state`` / ``load_network_state`` and ``state_dict`` / ``load_state_dict`` of a
    learner holding the attributes named by ``NETWORK_KEYS`` and ``OPTIMIZER_KEYS``, ``updates``
    and ``aux_names``; ``load_optimizer`` is how one optimiser takes its stored state."""

    actor: nn.Module
    critic: nn.Module
    target_critic: nn.Module
    log_temperature: nn.Parameter
    updates: int
    aux_names: frozenset[str] | None

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

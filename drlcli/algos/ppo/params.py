"""PPO's hyper-parameters (``algo_params`` of ``algo: ppo``), each with its meaning.

Named as in Schulman et al. 2017 and CleanRL where they name them; Method.md's table lists the
same fields (a test keeps the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drlcli.actors.recurrent_layout import CELLS
from drlcli.config_fields import in_range, one_of, positive, read_only_with
from drlcli.normalization import DEFAULT_OBSERVATION_CLIP

LEARNING_RATE_SCHEDULES = ("anneal", "adaptive_kl")
ADAPTIVE_KL_FACTOR = 1.5
"""rsl_rl's step: the learning rate is divided or multiplied by this per minibatch."""
ADAPTIVE_KL_BOUNDS = (1e-5, 1e-2)
"""The ``adaptive_kl`` schedule's step sizes stay within these (rsl_rl's)."""
STABILISERS = (
    "normalize_value",
    "learning_rate_schedule",
    "desired_kl",
    "policy_last_layer_scale",
    "rpo_alpha",
    "recompute_advantages_per_epoch",
)
"""PPO's optional stabilisers, each off by default: ``drl verify`` records a checkpoint's."""


@dataclass(frozen=True)
class RecurrentParams:
    """A recurrent core in the policy and in the value network (``algo_params.recurrent``;
    ADR 0018): each network reads its observations through its own LSTM or GRU, after
    observation normalisation and before its MLP head."""

    cell: str = field(default="lstm", metadata=one_of(*CELLS))
    """``lstm`` or ``gru``."""
    size: int = field(default=128, metadata=positive())
    """Units of each recurrent layer (the width its MLP head reads)."""
    layers: int = field(default=1, metadata=positive())
    """Stacked recurrent layers."""
    sequence_length: int = field(default=32, metadata=positive())
    """Steps of the chunks training reads (truncated back-propagation through time): each
    environment's rollout is cut where an episode starts and every ``sequence_length`` steps;
    minibatches are whole chunks."""

    @property
    def core(self) -> tuple[str, int, int]:
        """``(cell, size, layers)``: what the networks' weights depend on."""
        return (self.cell, self.size, self.layers)


@dataclass(frozen=True)
class PPOParams:
    """Hyper-parameters of PPO (Schulman et al. 2017)."""

    learning_rate: float = field(default=3e-4, metadata=in_range(0.0, low_open=True))
    """Adam step size at the start of the run."""
    anneal_learning_rate: bool = field(
        default=True, metadata=read_only_with("learning_rate_schedule", "anneal")
    )
    """Decay the learning rate linearly to 0 over ``total_env_steps`` (the ``anneal``
    schedule; false: constant)."""
    learning_rate_schedule: str = field(default="anneal", metadata=one_of(*LEARNING_RATE_SCHEDULES))
    """``anneal``: as ``anneal_learning_rate`` says. ``adaptive_kl``: start at
    ``learning_rate``, then after each minibatch's gradient divide the step size by 1.5 where
    the minibatch's approximate KL exceeds ``2 * desired_kl`` and multiply it by 1.5 where it is
    under ``desired_kl / 2``, within [1e-5, 1e-2] (rsl_rl's ``schedule: adaptive``); the step
    size is in the optimiser's checkpointed state."""
    desired_kl: float = field(
        default=0.01,
        metadata={
            **in_range(0.0, low_open=True),
            **read_only_with("learning_rate_schedule", "adaptive_kl"),
        },
    )
    """The KL the ``adaptive_kl`` schedule steers each minibatch's update to."""
    num_epochs: int = field(default=10, metadata=positive())
    """Passes over each round's data (K in the paper)."""
    num_minibatches: int = field(default=32, metadata=positive())
    """Minibatches per epoch; a remainder of the round's samples is left out."""
    clip_coef: float = field(default=0.2, metadata=in_range(0.0, low_open=True))
    """Epsilon of the clipped surrogate objective L^CLIP."""
    clip_value_loss: bool = False
    """Clip the value update to ``clip_coef`` around the value at sampling time."""
    ent_coef: float = field(default=0.0, metadata=in_range(0.0))
    """Entropy bonus coefficient c2."""
    vf_coef: float = field(default=0.5, metadata=in_range(0.0))
    """Value-loss coefficient c1."""
    max_grad_norm: float = field(default=0.5, metadata=in_range(0.0, low_open=True))
    """Clip of the global gradient norm over the policy and value networks."""
    target_kl: float | None = field(default=None, metadata=in_range(0.0, low_open=True))
    """End the round's update once a minibatch's approximate KL exceeds this; null: never."""
    normalize_advantages: bool = True
    """Standardise advantages over the whole round's data."""
    normalize_value: bool = False
    """Train the value network on standardised targets: running mean and variance of the
    value targets (every round's, before its update), the predictions de-normalised for GAE
    and the bootstrap at truncation; the statistics are in the value network's state."""
    hidden_sizes: tuple[int, ...] = field(default=(64, 64), metadata=positive())
    """Hidden layer widths of the policy (and of the value network unless set below)."""
    value_hidden_sizes: tuple[int, ...] | None = field(default=None, metadata=positive())
    """Hidden layer widths of the value network; null: ``hidden_sizes``."""
    activation: str = field(default="tanh", metadata=one_of("tanh", "relu", "elu"))
    """Hidden nonlinearity of both networks."""
    init_log_std: float = 0.0
    """Initial state-independent log standard deviation of the Gaussian policy."""
    policy_last_layer_scale: float = field(default=1.0, metadata=in_range(0.0, low_open=True))
    """Factor on the initial weights of the built-in policy mean's output layer (orthogonal,
    gain 0.01 as CleanRL's, times this): 0.01 makes the first policy's actions near the
    centre of their range (Andrychowicz et al. 2021, "What Matters in On-Policy RL")."""
    rpo_alpha: float | None = field(default=None, metadata=in_range(0.0, low_open=True))
    """Robust Policy Optimization (Rahman and Xue 2022; CleanRL's ``rpo_continuous_action``,
    0.5): in the update, each sample's policy mean is shifted by noise drawn uniformly from
    [-rpo_alpha, rpo_alpha] per action dimension, anew each epoch; sampling, evaluation and
    export use the mean unshifted. null: PPO."""
    recompute_advantages_per_epoch: bool = False
    """Before each epoch after the first, recompute the round's values, GAE advantages and
    value targets with the value network as the previous epochs left it (Tianshou's
    ``recompute_advantage``); the value clip is then around those values. MLP policies only.
    false: every epoch reads the advantages of sampling time."""
    normalize_observations: bool = True
    """Standardise observations with running statistics merged across rollout actors."""
    observation_warmup_steps: int | None = field(
        default=None, metadata={**positive(), **read_only_with("normalize_observations", True)}
    )
    """Steps of every environment under uniformly random actions before the first round, whose
    observation moments start the statistics (then the environments reset); null: one
    ``rollout_length``. Only with ``normalize_observations``, only on a fresh run."""
    observation_clip: float = field(
        default=DEFAULT_OBSERVATION_CLIP, metadata=in_range(0.0, low_open=True)
    )
    """Clip of standardised observations."""
    normalize_rewards: bool = True
    """Divide rewards by the running std of the discounted return (per rollout actor)."""
    reward_clip: float = field(default=10.0, metadata=in_range(0.0, low_open=True))
    """Clip of scaled rewards."""
    recurrent: RecurrentParams | None = None
    """``{cell, size, layers, sequence_length}``: policies with memory (an LSTM or GRU in
    the policy and in the value network, ADR 0018); null: the MLP policy."""

    @property
    def value_network_hidden_sizes(self) -> tuple[int, ...]:
        """The value network's hidden widths: ``value_hidden_sizes``, else ``hidden_sizes``."""
        return self.hidden_sizes if self.value_hidden_sizes is None else self.value_hidden_sizes

    @property
    def recurrent_core(self) -> tuple[str, int, int] | None:
        """The recurrent cores' ``(cell, size, layers)``, None for MLPs."""
        return None if self.recurrent is None else self.recurrent.core

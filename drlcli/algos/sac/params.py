"""SAC's hyper-parameters (``algo_params`` of ``algo: sac``), each with its meaning.

Named and set as in Haarnoja et al. 2018 ("Soft Actor-Critic Algorithms and Applications",
arXiv 1812.05905, table 1) and CleanRL's ``sac_continuous_action.py``; Method.md's table lists
the same fields (a test keeps the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drlcli.actors.spec import ActorConfig
from drlcli.config_fields import in_range, positive, read_only_with


@dataclass(frozen=True)
class SACParams:
    """Hyper-parameters of SAC."""

    batch_size: int = field(default=256, metadata=positive())
    """Transitions per update."""
    updates_per_env_step: float = field(default=1.0, metadata=in_range(0.0, low_open=True))
    """Update-to-data ratio: updates per transition collected."""
    buffer_size: int = field(default=1_000_000, metadata=positive())
    """Replay capacity per learner, in transitions."""
    warmup_steps: int = field(default=5_000, metadata=in_range(0))
    """Uniform random actions until this many transitions (CleanRL's ``learning_starts``);
    updates start at ``max(warmup_steps, batch_size)``."""
    hidden_sizes: tuple[int, ...] = field(default=(256, 256), metadata=positive())
    """Hidden widths of the built-in actor and of each Q network (ReLU)."""
    policy_learning_rate: float = field(default=3e-4, metadata=in_range(0.0, low_open=True))
    """Adam step size of the actor and of the temperature."""
    q_learning_rate: float = field(default=1e-3, metadata=in_range(0.0, low_open=True))
    """Adam step size of the two Q networks."""
    target_tau: float = field(default=0.005, metadata=in_range(0.0, 1.0, low_open=True))
    """Step of the target Q networks' exponential moving average, every update."""
    actor_update_period: int = field(default=2, metadata=positive())
    """The actor and temperature make this many steps every this many updates (TD3's delayed
    policy update as CleanRL runs it: as many actor steps as critic steps overall)."""
    autotune_temperature: bool = True
    """Learn alpha towards the entropy target; false: alpha stays ``initial_temperature``."""
    initial_temperature: float = field(default=1.0, metadata=in_range(0.0, low_open=True))
    """Entropy temperature alpha at the start."""
    target_entropy_scale: float = field(
        default=1.0, metadata=read_only_with("autotune_temperature", True)
    )
    """The entropy target is ``-target_entropy_scale * action_dim`` for actions in [-1, 1]
    (plus ``sum log range_i`` on other bounds: the same target on the rescaled actions)."""
    normalize_rewards: bool = False
    """Scale replayed rewards so discounted returns stay within ``normalized_return_max``."""
    normalized_return_max: float = field(
        default=10.0,
        metadata={**in_range(0.0, low_open=True), **read_only_with("normalize_rewards", True)},
    )
    """The largest discounted return magnitude after scaling (with ``normalize_rewards``)."""
    actor_config: ActorConfig | None = None
    """A custom policy actor instead of the built-in one; null: built-in."""
    save_replay_buffer: bool = False
    """Also write the replay buffer beside the latest checkpoint every round."""

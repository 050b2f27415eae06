"""FlashSAC's hyper-parameters (``algo_params`` of ``algo: flash_sac``), each with its meaning.

Defaults are the paper's sizes (arXiv 2604.04539); Method.md's table lists the same fields (a
test keeps the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drlcli.actors.spec import ActorConfig
from drlcli.config_fields import in_range, positive, read_only_with


@dataclass(frozen=True)
class FlashSACParams:
    """Hyper-parameters of FlashSAC."""

    batch_size: int = field(default=512, metadata=positive())
    """Transitions per update."""
    updates_per_env_step: float = field(default=1.0, metadata=in_range(0.0, low_open=True))
    """Update-to-data ratio: updates per transition collected."""
    buffer_size: int = field(default=1_000_000, metadata=positive())
    """Replay capacity per learner, in transitions."""
    warmup_steps: int = field(default=5_000, metadata=in_range(0))
    """Uniform random actions until this many transitions; updates start at
    ``max(warmup_steps, batch_size)``."""
    actor_hidden_dim: int = field(default=128, metadata=positive())
    """Width of the built-in actor."""
    actor_num_blocks: int = field(default=2, metadata=in_range(0))
    """Inverted residual blocks of the built-in actor."""
    critic_hidden_dim: int = field(default=256, metadata=positive())
    """Width of the critic."""
    critic_num_blocks: int = field(default=2, metadata=in_range(0))
    """Inverted residual blocks of the critic."""
    num_bins: int = field(default=101, metadata=in_range(2))
    """Atoms of the categorical critic."""
    v_min: float = -5.0
    """Lowest atom, in scaled-reward units."""
    v_max: float = 5.0
    """Highest atom, in scaled-reward units."""
    target_tau: float = field(default=0.01, metadata=in_range(0.0, 1.0, low_open=True))
    """Step of the target critic's exponential moving average."""
    initial_temperature: float = field(default=0.01, metadata=in_range(0.0, low_open=True))
    """Entropy temperature alpha at the start."""
    target_sigma: float = field(default=0.15, metadata=in_range(0.0, low_open=True))
    """Per-dimension std of the Gaussian that defines the entropy target."""
    learning_rate: float = field(default=3e-4, metadata=in_range(0.0, low_open=True))
    """Start of every optimiser's cosine learning-rate schedule."""
    learning_rate_end: float = field(default=1.5e-4, metadata=in_range(0.0))
    """End of the cosine schedule, reached at the run's last planned update."""
    actor_update_period: int = field(default=2, metadata=positive())
    """Actor and temperature step once every this many critic updates."""
    normalize_rewards: bool = True
    """Scale rewards so discounted returns fit the critic's support."""
    normalized_return_max: float = field(
        default=5.0,
        metadata={**in_range(0.0, low_open=True), **read_only_with("normalize_rewards", True)},
    )
    """G_max: the largest discounted return magnitude after scaling."""
    noise_zeta_mu: float = field(default=2.0, metadata=in_range(0.0, low_open=True))
    """Exponent of the zeta distribution of exploration-noise hold lengths."""
    noise_zeta_max: int = field(default=16, metadata=positive())
    """Longest hold of one exploration noise draw, in env steps."""
    actor_normalize_parameters: bool = True
    """Project the built-in actor's weights to unit norm after init and every step."""
    critic_normalize_parameters: bool = True
    """Project the critic's weights to unit norm after init and every step."""
    use_whole_cycle_cuda_graph: bool | None = None
    """Capture the whole update as a CUDA graph; null: on for an NVIDIA CUDA learner."""
    actor_config: ActorConfig | None = None
    """A custom policy actor instead of the built-in one; null: built-in."""
    save_replay_buffer: bool = False
    """Also write the replay buffer beside the latest checkpoint every round."""

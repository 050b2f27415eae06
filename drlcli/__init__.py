"""drl: command-line deep reinforcement learning for MuJoCo robots."""

__version__ = "0.1.0"

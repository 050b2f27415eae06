"""The off-policy replay of transitions: a ring buffer of plain arrays, sampled uniformly."""

from __future__ import annotations

import numpy as np
import torch


class TransitionReplay:
    """The off-policy replay buffer (FlashSAC's, SAC's): uniform replay of transitions
    ``(s, a, r, s', terminated)``, a numpy ring buffer living with the learner. (PPO's
    on-policy ``ReplayBuffer`` holds one round's trajectories instead.)"""

    def __init__(self, capacity: int, obs_dim: int, action_dim: int, seed: int = 0) -> None:
        self.capacity = capacity
        self.obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.act = np.zeros((capacity, action_dim), dtype=np.float32)
        self.rew = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=np.float32)
        self.size = 0
        self._next = 0
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
    ) -> None:
        """Add ``n`` transitions (arrays with a leading axis ``n``). ``next_obs`` is the
        observation before any reset (the final one on a truncated step)."""
        count = len(obs)
        index = (self._next + np.arange(count)) % self.capacity
        self.obs[index], self.act[index], self.rew[index] = obs, act, rew
        self.next_obs[index], self.terminated[index] = next_obs, terminated
        self._next = (self._next + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    FIELDS = ("obs", "act", "rew", "next_obs", "terminated")

    def arrays(self) -> dict[str, np.ndarray]:
        """The stored transitions, oldest first (plain arrays: saved with allow_pickle=False)."""
        order = (self._next - self.size + np.arange(self.size)) % self.capacity
        return {name: getattr(self, name)[order] for name in self.FIELDS}

    def load_arrays(self, arrays: dict[str, np.ndarray], next_index: int | None = None) -> None:
        """Replace the contents (the newest ``capacity`` transitions are kept), oldest first
        from ring position 0, or, with ``next_index``, so that the newest ends just before it:
        the positions they held in the buffer ``arrays()`` read them from."""
        count = min(len(arrays["obs"]), self.capacity)
        start = 0 if next_index is None else (int(next_index) - count) % self.capacity
        self.size, self._next = 0, start
        if count:
            self.add(*(np.asarray(arrays[name])[-self.capacity :] for name in self.FIELDS))

    def sample(self, batch_size: int, reward_scale: float, device: torch.device) -> dict:
        index = self._rng.integers(0, self.size, size=batch_size)
        return {
            "obs": torch.from_numpy(self.obs[index]).to(device),
            "act": torch.from_numpy(self.act[index]).to(device),
            "rew": torch.from_numpy(self.rew[index] / np.float32(reward_scale)).to(device),
            "next_obs": torch.from_numpy(self.next_obs[index]).to(device),
            "terminated": torch.from_numpy(self.terminated[index]).to(device),
        }

"""The on-policy buffer: the trajectories of one round, handed to the learner and then cleared."""

from __future__ import annotations

import numpy as np

TRAJECTORY_KEYS = ("obs", "act", "logp", "value", "adv", "ret")


class ReplayBuffer:
    """Holds columnar trajectories ``{obs [N, O], act [N, A], logp, value, adv, ret [N]}``;
    a recurrent policy's are chunked (``sequences.chunk_trajectory``): ``N`` chunks of ``L``
    steps, with ``mask`` and the chunks' first states beside them. Every trajectory of a
    round holds the same columns."""

    def __init__(self) -> None:
        self._chunks: list[dict[str, np.ndarray]] = []

    def add(self, trajectory: dict[str, np.ndarray]) -> None:
        """Append one rollout actor's trajectory (every key of TRAJECTORY_KEYS, any more the
        round's other trajectories hold, same length)."""
        missing = [key for key in TRAJECTORY_KEYS if key not in trajectory]
        if missing:
            raise ValueError(f"trajectory lacks {missing}")
        if self._chunks and set(trajectory) != set(self._chunks[0]):
            raise ValueError(
                f"trajectory columns {sorted(trajectory)} differ from the round's "
                f"{sorted(self._chunks[0])}"
            )
        lengths = {key: len(column) for key, column in trajectory.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"trajectory columns differ in length: {lengths}")
        self._chunks.append({key: np.asarray(column) for key, column in trajectory.items()})

    def __len__(self) -> int:
        return sum(len(chunk["obs"]) for chunk in self._chunks)

    def lengths(self) -> list[int]:
        """Rows of each trajectory added since the last clear, in order."""
        return [len(chunk["obs"]) for chunk in self._chunks]

    def data(self) -> dict[str, np.ndarray]:
        """Everything added since the last clear, concatenated per key."""
        if not self._chunks:
            raise ValueError("the on-policy buffer is empty: sample before train_step")
        if len(self._chunks) == 1:
            return dict(self._chunks[0])
        return {key: np.concatenate([c[key] for c in self._chunks]) for key in self._chunks[0]}

    def clear(self) -> None:
        self._chunks.clear()

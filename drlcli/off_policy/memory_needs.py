"""What an off-policy run holds in memory besides its learners' networks: the replay buffers
(checked before anything starts, ``Algorithm.memory_needs``). No torch: the registry's entries
import it."""

from __future__ import annotations

from typing import Any

from drlcli.algos.entry_types import MemoryNeed, RunShape


def replay_memory_needs(params: Any, shape: RunShape) -> list[MemoryNeed]:
    """Every learner's replay buffer (float32 ``s, s', a, r, terminated``), and twice more
    while it is saved (``params``: ``buffer_size``, ``save_replay_buffer``)."""
    transition_bytes = 8 * shape.obs_dim + 4 * shape.action_dim + 8
    replay = shape.num_learners * params.buffer_size * transition_bytes
    needs = [
        MemoryNeed(
            f"{shape.num_learners} replay buffer(s) of {params.buffer_size} transitions",
            replay,
            "algo_params.buffer_size",
        )
    ]
    if params.save_replay_buffer:
        needs.append(
            MemoryNeed(
                "the copies of saving the replay buffers",
                2 * replay,
                "algo_params.buffer_size, or save_replay_buffer: false",
            )
        )
    return needs

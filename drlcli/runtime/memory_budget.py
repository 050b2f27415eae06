"""Memory checked before anything is allocated: a run whose rollouts, replay buffers or
networks do not fit in this machine's free memory is refused with what it needs, what is free
and the field to shrink."""

from __future__ import annotations

import os
from pathlib import Path

from drlcli.actors.memory import format_bytes
from drlcli.algos.entry_types import Algorithm, MemoryNeed, RunShape
from drlcli.errors import ConfigError


def available_memory_bytes() -> int | None:
    """Memory the kernel can give without swapping (``MemAvailable``); None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def run_memory_needs(
    algorithm: Algorithm, params: object, shape: RunShape, actor_bytes: int
) -> list[MemoryNeed]:
    """The algorithm's needs, and the policy actor's copies: parameters, gradients and Adam's
    two moments in every learner, one copy in every rollout actor and in the evaluator."""
    copies = 4 * shape.num_learners + shape.num_actors + 1
    actor = MemoryNeed(
        f"{copies} copies of the policy actor's parameters and optimiser state",
        copies * actor_bytes,
        "the actor's hidden sizes",
    )
    return [*algorithm.memory_needs(params, shape), actor]


def check_memory(needs: list[MemoryNeed], available: int | None) -> None:
    """Raise ConfigError when the needs together exceed ``available`` bytes (None: unknown,
    nothing is checked), naming the largest need and its field."""
    total = sum(need.bytes for need in needs)
    if available is None or total <= available or not needs:
        return
    largest = max(needs, key=lambda need: need.bytes)
    raise ConfigError(
        f"this run needs {format_bytes(total)} of memory, {format_bytes(available)} is free: "
        f"{largest.what} alone take {format_bytes(largest.bytes)}; shrink {largest.shrink}"
    )

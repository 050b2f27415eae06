"""How runs of one config on several seeds are named: ``<name>_seed<N>``. ``drl train --seed``
names a run so; ``drl compare`` and the dashboard group runs by the name without that ending.
No drl imports: the CLI, the config and the run-folder reader share it."""

from __future__ import annotations

import re

_SEED_SUFFIX = re.compile(r"[_-]seed[_-]?\d+$")


def seed_group(name: str) -> str:
    """Runs of one config with different seeds share a group: the name without a trailing
    ``_seed<N>`` (``hopper_ppo_seed2`` -> ``hopper_ppo``; also ``-seed-2``, ``_seed_2``)."""
    return _SEED_SUFFIX.sub("", name)


def seeded_name(name: str, seed: int) -> str:
    """The name of ``name``'s run on ``seed``: ``hopper_ppo`` -> ``hopper_ppo_seed3``; a name
    that already ends with a seed has it replaced (``hopper_ppo_seed0`` -> ``hopper_ppo_seed3``)."""
    return f"{seed_group(name)}_seed{seed}"

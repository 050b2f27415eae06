"""The algorithm registry: every algorithm drl trains, by its config name.

Each algorithm package declares one ``Algorithm`` (``algos/<name>/algorithm.py``; the type is in
``algos/entry_types.py``) and this module lists them. ``config.py``, ``runtime/``,
``checkpoints/``, ``metrics/schema.py``, ``export.py`` and ``drl verify`` look an algorithm up here
instead of branching on its name. Adding an algorithm is a package under ``algos/`` plus one
entry in ``_registered``.

No torch and no Ray at import time: the CLI validates configs through this module.
"""

from __future__ import annotations

from typing import Any

from drlcli.algos.entry_types import Algorithm
from drlcli.errors import ConfigError


def _registered() -> dict[str, Algorithm]:
    from drlcli.algos.flash_sac.algorithm import FLASH_SAC
    from drlcli.algos.ppo.algorithm import PPO
    from drlcli.algos.sac.algorithm import SAC

    return {algorithm.name: algorithm for algorithm in (PPO, FLASH_SAC, SAC)}


ALGORITHMS: dict[str, Algorithm] = _registered()
DEFAULT_ALGORITHM: str = next(iter(ALGORITHMS))
BUILTIN_BUILDERS: frozenset[str] = frozenset(
    builder
    for algorithm in ALGORITHMS.values()
    for builder in (algorithm.builtin_builder, *algorithm.other_builtin_builders)
)
"""drl's own policy-actor builders: the only ones imported without the user's consent."""


def get_algorithm(name: Any, key_path: str = "algo") -> Algorithm:
    """The registered algorithm called ``name``.

    Raises:
        ConfigError: an unknown name, listing the known ones.
    """
    if isinstance(name, str) and name in ALGORITHMS:
        return ALGORITHMS[name]
    known = ", ".join(sorted(ALGORITHMS))
    raise ConfigError(f"{key_path}: unknown algorithm {name!r}; choose one of: {known}")


def actor_kind(builder: str) -> str:
    """``builtin`` for drl's registered builders, ``custom`` for everything else."""
    return "builtin" if builder in BUILTIN_BUILDERS else "custom"

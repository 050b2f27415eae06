"""Dict observations as the one flat vector a policy reads (Method.md, "Observations").

Robotics tasks report their observation as a ``Dict`` of named parts, often nested (a DMC
walker's ``orientations``, ``height``, ``velocity``; a goal-conditioned arm's ``observation``,
``achieved_goal``, ``desired_goal``). drl flattens the parts it is told to read, in a fixed order,
into one float64 vector: every part (a ``Box`` leaf of the space, named by its path ``outer/inner``)
is raveled in C order and the parts are concatenated. The order and shapes are the task's
``ObservationLayout``: a checkpoint records it, and resume, play, evaluation and export rebuild the
task with the same layout or refuse to run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from drlcli.errors import EnvironmentSpecError

KEY_SEPARATOR = "/"


@dataclass(frozen=True)
class ObservationField:
    """One part of the flat observation: ``flat[start:stop]`` is the part ``key`` raveled."""

    key: str
    shape: tuple[int, ...]
    start: int
    stop: int

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "shape": list(self.shape), "start": self.start, "stop": self.stop}


ObservationLayout = tuple[ObservationField, ...]


def leaf_spaces(space: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a (nested) ``Dict`` space by its path (``outer/inner``), sorted by path."""
    from gymnasium import spaces

    leaves: dict[str, Any] = {}
    for name, part in space.spaces.items():
        path = f"{prefix}{name}"
        if isinstance(part, spaces.Dict):
            leaves |= leaf_spaces(part, path + KEY_SEPARATOR)
        else:
            leaves[path] = part
    return dict(sorted(leaves.items()))


def layout_of(space: Any, keys: Sequence[str] | None, env_id: str) -> ObservationLayout:
    """The layout of a ``Dict`` observation space read through ``keys`` (``env.observation_keys``).

    Args:
        space: the task's ``gymnasium.spaces.Dict`` (nested dicts allowed).
        keys: paths in the order the vector holds them; a path naming a nested ``Dict`` stands
            for all its leaves, sorted. None: every leaf, sorted by path.
        env_id: the task, for messages.

    Raises:
        EnvironmentSpecError: a key the space does not have (the keys it has are listed), a key
            named twice, or a leaf that is not a ``Box``.
    """
    from gymnasium import spaces

    leaves = leaf_spaces(space)
    chosen: list[str] = []
    for key in list(leaves) if keys is None else keys:
        under = [path for path in leaves if path.startswith(key + KEY_SEPARATOR)]
        paths = [key] if key in leaves else under
        if not paths:
            raise EnvironmentSpecError(
                f"env.observation_keys: {env_id} has no observation key {key!r}; its keys are "
                + ", ".join(leaves)
            )
        for path in paths:
            if path in chosen:
                raise EnvironmentSpecError(
                    f"env.observation_keys: {path!r} is named twice (a key, or a key and its "
                    "enclosing dict)"
                )
            chosen.append(path)
    fields: list[ObservationField] = []
    start = 0
    for path in chosen:
        leaf = leaves[path]
        if not isinstance(leaf, spaces.Box):
            raise EnvironmentSpecError(
                f"{env_id}: observation key {path!r} is {leaf}; drl reads Box parts only (leave "
                "it out with env.observation_keys)"
            )
        size = int(np.prod(leaf.shape, dtype=np.int64))
        fields.append(
            ObservationField(path, tuple(int(n) for n in leaf.shape), start, start + size)
        )
        start += size
    return tuple(fields)


def flatten(observation: Mapping[str, Any], layout: ObservationLayout) -> np.ndarray:
    """The flat float64 vector ``[layout[-1].stop]`` of one Dict observation."""
    parts = []
    for field in layout:
        value: Any = observation
        for name in field.key.split(KEY_SEPARATOR):
            value = value[name]
        parts.append(np.asarray(value, dtype=np.float64).reshape(-1))
    return np.concatenate(parts) if parts else np.zeros(0)


def flat_box(space: Any, layout: ObservationLayout) -> Any:
    """The ``Box`` of the flat vectors: each part's bounds raveled in the layout's order."""
    from gymnasium import spaces

    leaves = leaf_spaces(space)
    low = np.concatenate([np.asarray(leaves[f.key].low, np.float64).reshape(-1) for f in layout])
    high = np.concatenate([np.asarray(leaves[f.key].high, np.float64).reshape(-1) for f in layout])
    return spaces.Box(low, high, dtype=np.float64)


def layout_record(layout: ObservationLayout | None) -> list[dict[str, Any]] | None:
    """The layout as plain data (a checkpoint's ``env.observation_layout``, export metadata)."""
    return None if layout is None else [field.to_dict() for field in layout]


def layout_from_record(record: Any) -> ObservationLayout | None:
    """The layout a record describes.

    Raises:
        ValueError: a malformed record (not a list of ``{key, shape, start, stop}`` whose slices
            follow each other from 0 and match the shapes).
    """
    if record is None:
        return None
    if not isinstance(record, list) or not record:
        raise ValueError("observation_layout must be a non-empty list or null")
    fields, start = [], 0
    for entry in record:
        try:
            key, shape = entry["key"], tuple(int(n) for n in entry["shape"])
            field = ObservationField(key, shape, int(entry["start"]), int(entry["stop"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"observation_layout entry {entry!r} is malformed ({error})") from None
        size = int(np.prod(shape, dtype=np.int64))
        if not isinstance(key, str) or field.start != start or field.stop != start + size:
            raise ValueError(f"observation_layout entry {entry!r} does not follow its predecessor")
        fields.append(field)
        start = field.stop
    return tuple(fields)


def describe_layout(layout: ObservationLayout | None) -> str:
    """``a[3], b/c[2x2]`` (or ``a flat Box``) for messages."""
    if layout is None:
        return "a flat Box"
    return ", ".join(f"{f.key}[{'x'.join(map(str, f.shape)) or '1'}]" for f in layout)


def flat_observation_env(env: Any, keys: Sequence[str] | None, env_id: str) -> Any:
    """``env`` reading its Dict observation as the flat vector of ``layout_of(keys)``; a task
    whose observation is a ``Box`` is returned as it is (``keys`` must then be None).

    Raises:
        EnvironmentSpecError: as ``layout_of``, or ``keys`` given for a Box observation.
    """
    import gymnasium
    from gymnasium import spaces

    space = env.observation_space
    if not isinstance(space, spaces.Dict):
        if keys is not None:
            raise EnvironmentSpecError(
                f"env.observation_keys: the observation of {env_id} is {space}, not a Dict; "
                "remove observation_keys"
            )
        return env
    layout = layout_of(space, keys, env_id)
    box = flat_box(space, layout)

    class FlatObservation(gymnasium.ObservationWrapper):
        """The Dict observation as drl's flat vector (``drlcli.observations``)."""

        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.observation_space = box
            self.observation_layout = layout

        def observation(self, observation: Any) -> np.ndarray:
            return flatten(observation, layout)

    return FlatObservation(env)

"""Dict observations as the one flat vector a policy reads (Method.md, "Observations").

Robotics tasks report their observation as a ``Dict`` of named parts, often nested (a DMC
walker's ``orientations``, ``height``, ``velocity``; a goal-conditioned arm's ``observation``,
``achieved_goal``, ``desired_goal``). drl flattens the parts it is told to read, in a fixed order,
into one float64 vector: every part (a ``Box`` leaf of the space, named by its path ``outer/inner``)
is raveled in C order and the parts are concatenated. The order and shapes are the task's
``ObservationLayout``: a checkpoint records it, and resume, play, evaluation and export rebuild the
task with the same layout or refuse to run. A flat ``Box`` observation's parts are its slices
(``"0:11"``).

With a privileged critic (``env.observation_groups``) training reads one vector of both groups'
parts, the policy's first (``ObservationGroups``); ``GroupReader`` gives each network its group.
"""

from __future__ import annotations

import functools
import re
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

# A part of a flat Box observation: ``start:stop`` (either end may be left out) or one index.
SLICE_PATTERN = re.compile(r"^\s*(\d*)\s*:\s*(\d*)\s*$|^\s*(\d+)\s*$")


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


def layout_of(
    space: Any, keys: Sequence[str] | None, env_id: str, setting: str = "env.observation_keys"
) -> ObservationLayout:
    """The layout of an observation space read through ``keys`` (``env.observation_keys``, or a
    group of ``env.observation_groups``).

    Args:
        space: the task's ``gymnasium.spaces.Dict`` (nested dicts allowed), or a 1-D ``Box``
            whose parts ``keys`` names as slices (``"0:11"``, ``"11:"``, ``"5"``).
        keys: paths in the order the vector holds them; a path naming a nested ``Dict`` stands
            for all its leaves, sorted. None: every leaf, sorted by path (a Box: all of it).
        env_id: the task, for messages.
        setting: the config setting ``keys`` comes from, for messages.

    Raises:
        EnvironmentSpecError: a key the space does not have (the keys it has are listed), a key
            named twice, a leaf that is not a ``Box``, or a slice outside a Box observation.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return _box_layout(space, [":"] if keys is None else keys, env_id, setting)
    leaves = leaf_spaces(space)
    chosen: list[str] = []
    for key in list(leaves) if keys is None else keys:
        under = [path for path in leaves if path.startswith(key + KEY_SEPARATOR)]
        paths = [key] if key in leaves else under
        if not paths:
            raise EnvironmentSpecError(
                f"{setting}: {env_id} has no observation key {key!r}; its keys are "
                + ", ".join(leaves)
            )
        for path in paths:
            if path in chosen:
                raise EnvironmentSpecError(
                    f"{setting}: {path!r} is named twice (a key, or a key and its enclosing dict)"
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


@functools.lru_cache(maxsize=1024)  # read for every part of every step of a Box task's env
def box_slice(key: str, size: int) -> slice | None:
    """The entries of a flat Box of ``size`` a slice key names (``"0:11"``, ``"11:"``, ``"5"``),
    None when ``key`` is not a slice or leaves the Box or names nothing."""
    match = SLICE_PATTERN.match(key)
    if match is None:
        return None
    first, last, index = match.groups()
    if index is not None:
        start, stop = int(index), int(index) + 1
    else:
        start, stop = int(first or 0), int(last) if last else size
    return slice(start, stop) if 0 <= start < stop <= size else None


def _box_layout(space: Any, keys: Sequence[str], env_id: str, setting: str) -> ObservationLayout:
    """The layout of the slices ``keys`` of a flat Box observation (each named ``start:stop``)."""
    if len(space.shape) != 1:
        raise EnvironmentSpecError(
            f"{setting}: the observation of {env_id} is {space}; name slices of a flat Box only "
            "(flatten it first with env.wrappers: [{name: FlattenObservation}])"
        )
    size = int(space.shape[0])
    fields: list[ObservationField] = []
    start = 0
    for key in keys:
        part = box_slice(key, size)
        if part is None:
            raise EnvironmentSpecError(
                f"{setting}: {key!r} is not a part of the observation of {env_id}, a Box of "
                f"{size} entries; name its parts as slices 'start:stop' with 0 <= start < stop "
                f"<= {size} (quoted in YAML)"
            )
        name = f"{part.start}:{part.stop}"
        if any(field.key == name for field in fields):
            raise EnvironmentSpecError(f"{setting}: {name!r} is named twice")
        width = part.stop - part.start
        fields.append(ObservationField(name, (width,), start, start + width))
        start += width
    return tuple(fields)


def _part(observation: Any, key: str) -> np.ndarray:
    """One part of an observation, raveled: a Dict's leaf by its path, a Box's slice."""
    if not isinstance(observation, Mapping):
        flat = np.asarray(observation, dtype=np.float64).reshape(-1)
        part = box_slice(key, len(flat))
        assert part is not None, f"{key!r} is not a slice of a Box of {len(flat)}"
        return flat[part]
    value: Any = observation
    for name in key.split(KEY_SEPARATOR):
        value = value[name]
    return np.asarray(value, dtype=np.float64).reshape(-1)


def flatten(observation: Any, layout: ObservationLayout) -> np.ndarray:
    """The flat float64 vector ``[layout[-1].stop]`` of one Dict observation (or of the slices
    of a Box one)."""
    parts = [_part(observation, field.key) for field in layout]
    return np.concatenate(parts) if parts else np.zeros(0)


def flat_box(space: Any, layout: ObservationLayout) -> Any:
    """The ``Box`` of the flat vectors: each part's bounds raveled in the layout's order."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        low = np.concatenate([_part(space.low, f.key) for f in layout])
        high = np.concatenate([_part(space.high, f.key) for f in layout])
    else:
        leaves = leaf_spaces(space)
        low = np.concatenate([np.asarray(leaves[f.key].low, np.float64).ravel() for f in layout])
        high = np.concatenate([np.asarray(leaves[f.key].high, np.float64).ravel() for f in layout])
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


@dataclass(frozen=True)
class ObservationGroups:
    """What the policy and the critic read of the training observation (Method.md,
    "Observation groups"): the training vector holds the policy group's parts first, then the
    parts only the critic group reads. The policy reads the prefix ``[:policy_dim]``; the
    critic reads its parts, in its own order, out of the whole vector.

    Attributes:
        layout: the training vector's parts.
        policy_parts: how many of ``layout``'s first parts are the policy group.
        critic_keys: the critic group's parts, in its order (each a key of ``layout``).
    """

    layout: ObservationLayout
    policy_parts: int
    critic_keys: tuple[str, ...]

    @property
    def policy_layout(self) -> ObservationLayout:
        return self.layout[: self.policy_parts]

    @property
    def policy_dim(self) -> int:
        return self.layout[self.policy_parts - 1].stop

    @property
    def critic_only_keys(self) -> tuple[str, ...]:
        """The parts the critic reads and the policy does not: training only."""
        return tuple(field.key for field in self.layout[self.policy_parts :])

    def critic_positions(self) -> np.ndarray:
        """The entries of the training vector the critic reads, in its order ``[critic_dim]``."""
        where = {field.key: field for field in self.layout}
        ranges = [np.arange(where[key].start, where[key].stop) for key in self.critic_keys]
        return np.concatenate(ranges).astype(np.int64)

    @property
    def critic_dim(self) -> int:
        return len(self.critic_positions())

    def to_record(self) -> dict[str, Any]:
        """Plain data: a checkpoint's ``env.observation_groups``."""
        return {
            "layout": layout_record(self.layout),
            "policy_parts": self.policy_parts,
            "critic": list(self.critic_keys),
        }

    @staticmethod
    def from_record(record: Any) -> ObservationGroups | None:
        """The groups a record describes (None for None).

        Raises:
            ValueError: a malformed record (a layout that ``layout_from_record`` refuses, a
                policy of no part or more parts than the layout has, a critic part the layout
                does not have, a part that neither group reads).
        """
        if record is None:
            return None
        if not isinstance(record, dict):
            raise ValueError(f"observation_groups must be a mapping or null, got {record!r}")
        layout = layout_from_record(record.get("layout"))
        policy_parts, critic = record.get("policy_parts"), record.get("critic")
        if layout is None or type(policy_parts) is not int or not 0 < policy_parts <= len(layout):
            raise ValueError(f"observation_groups: policy_parts {policy_parts!r} out of range")
        keys = [field.key for field in layout]
        if not isinstance(critic, list) or not critic or not set(critic) <= set(keys):
            raise ValueError(f"observation_groups: critic {critic!r} is not parts of the layout")
        unread = set(keys[policy_parts:]) - set(critic)
        if unread:
            raise ValueError(f"observation_groups: no group reads {sorted(unread)}")
        return ObservationGroups(layout, policy_parts, tuple(critic))


def groups_of(
    space: Any, policy: Sequence[str], critic: Sequence[str] | None, env_id: str
) -> ObservationGroups:
    """The groups of an observation space (``env.observation_groups``).

    Args:
        space: the task's observation space (a ``Dict``, or a flat ``Box`` named by slices).
        policy: the policy group's keys or slices, in order.
        critic: the critic group's; None: the policy's.
        env_id: the task, for messages.

    Raises:
        EnvironmentSpecError: as ``layout_of``, naming the group.
    """
    policy_layout = layout_of(space, policy, env_id, "env.observation_groups.policy")
    critic_layout = layout_of(
        space, policy if critic is None else critic, env_id, "env.observation_groups.critic"
    )
    policy_keys = [field.key for field in policy_layout]
    critic_keys = [field.key for field in critic_layout]
    training_keys = policy_keys + [key for key in critic_keys if key not in policy_keys]
    layout = layout_of(space, training_keys, env_id, "env.observation_groups")
    return ObservationGroups(layout, len(policy_layout), tuple(critic_keys))


class GroupReader:
    """Reads the policy's and the critic's inputs out of training observations ``[..., O]``
    (numpy arrays, or torch tensors on ``device``): the policy's a view of the prefix, the
    critic's a view where its parts are contiguous and in order, else a gather. Without groups
    both are the observations themselves."""

    def __init__(self, groups: ObservationGroups | None, device: Any = None) -> None:
        self.policy_stop: int | None = None
        self.critic_selection: Any = None
        self.groups = groups
        if groups is None:
            return
        self.policy_stop = groups.policy_dim
        positions = groups.critic_positions()
        contiguous = bool((np.diff(positions) == 1).all())
        if contiguous:
            self.critic_selection = slice(int(positions[0]), int(positions[-1]) + 1)
        elif device is not None:
            import torch

            self.critic_selection = torch.as_tensor(positions, device=device)
        else:
            self.critic_selection = positions

    def widths(self, obs_dim: int) -> tuple[int, int]:
        """``(policy_dim, critic_dim)`` of training observations of ``obs_dim`` entries: what
        the policy actor and the critic networks are built to read."""
        if self.groups is None:
            return obs_dim, obs_dim
        return self.groups.policy_dim, self.groups.critic_dim

    def policy(self, observations: Any) -> Any:
        """The policy group ``[..., policy_dim]``."""
        return observations if self.policy_stop is None else observations[..., : self.policy_stop]

    def critic(self, observations: Any) -> Any:
        """The critic group ``[..., critic_dim]``."""
        selection = self.critic_selection
        return observations if selection is None else observations[..., selection]


def flat_observation_env(
    env: Any,
    keys: Sequence[str] | None,
    env_id: str,
    groups: tuple[Sequence[str], Sequence[str] | None] | None = None,
) -> Any:
    """``env`` reading its observation as the flat vector of ``layout_of(keys)`` (a Dict's
    parts, or a Box's slices), or with ``groups`` ``(policy, critic)`` the training vector of
    ``groups_of``; a task whose observation is a Box and that names no parts is returned as
    it is.

    Raises:
        EnvironmentSpecError: as ``layout_of``, or ``keys`` given for a Box observation.
    """
    import gymnasium
    from gymnasium import spaces

    space = env.observation_space
    grouped = None
    if groups is not None:
        grouped = groups_of(space, groups[0], groups[1], env_id)
        layout = grouped.layout
    elif isinstance(space, spaces.Dict) or keys is not None:
        layout = layout_of(space, keys, env_id)
    else:
        return env
    box = flat_box(space, layout)

    class FlatObservation(gymnasium.ObservationWrapper):
        """The observation as drl's flat vector (``drlcli.observations``)."""

        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.observation_space = box
            self.observation_layout = layout
            self.observation_groups = grouped

        def observation(self, observation: Any) -> np.ndarray:
            return flatten(observation, layout)

    return FlatObservation(env)

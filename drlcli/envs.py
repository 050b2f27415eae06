"""Making Gymnasium MuJoCo environments and stepping several of them together.

Only continuous control is supported: a bounded ``Box`` action, and an observation that is a
flat ``Box`` or a ``Dict`` of ``Box`` parts (read as one flat vector, ``drlcli.observations``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drlcli.config import EnvConfig
from drlcli.env_facts import EnvFacts
from drlcli.env_wrappers import apply_wrappers
from drlcli.errors import EnvironmentSpecError, TrainingError
from drlcli.observations import flat_observation_env
from drlcli.success import ANY_STEP, EpisodeSuccess


def env_module(env_id: str) -> str | None:
    """The module an id of the form ``module:Task-v0`` names (``gymnasium.make`` imports it to
    register the task), or None for a plain registered id."""
    module, separator, _ = env_id.partition(":")
    return module if separator and module else None


def make_task_env(env_config: EnvConfig, **overrides: Any) -> Any:
    """The task ``env_config`` describes (its id, time limit, kwargs, wrappers, observation
    keys or groups), as every training process of a run makes it; ``overrides``
    (``render_mode``, ``width``...) win over the kwargs. ``env_config.policy_view()`` is the
    task as the policy alone reads it (evaluation)."""
    return make_env(
        env_config.id,
        max_episode_steps=env_config.max_episode_steps,
        observation_keys=env_config.observation_keys,
        observation_groups=group_keys(env_config),
        wrappers=env_config.wrappers,
        **{**env_config.kwargs, **overrides},
    )


def group_keys(env_config: EnvConfig) -> tuple[tuple[str, ...], tuple[str, ...] | None] | None:
    """``(policy, critic)`` of ``env.observation_groups``, None without groups."""
    groups = env_config.observation_groups
    return None if groups is None else (groups.policy, groups.critic)


def make_env(
    env_id: str,
    *,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    observation_keys: tuple[str, ...] | list[str] | None = None,
    observation_groups: tuple[Sequence[str], Sequence[str] | None] | None = None,
    wrappers: Sequence[Any] = (),
    **kwargs: Any,
) -> Any:
    """``gymnasium.make`` with drl's error messages and space checks, inside ``wrappers``
    (``drlcli.env_wrappers``); a ``Dict`` observation is read as the flat vector of
    ``observation_keys``, or of ``observation_groups`` ``(policy, critic)`` when training with
    a privileged critic (``drlcli.observations``).

    Raises:
        EnvironmentSpecError: unknown id, missing dependency, unsupported spaces, or
            observation keys the task does not have.
    """
    import gymnasium as gym

    _route_mujoco_warnings()
    try:
        env = gym.make(
            env_id, max_episode_steps=max_episode_steps, render_mode=render_mode, **kwargs
        )
    except gym.error.Error as error:
        raise EnvironmentSpecError(
            f"env.id: cannot make {env_id!r} ({error}); MuJoCo tasks look like 'Hopper-v5'"
        ) from error
    except ImportError as error:
        raise EnvironmentSpecError(
            f"env.id: {env_id!r} needs a missing package ({error})"
        ) from error
    except Exception as error:  # whatever the task's package raises: one line, never a traceback
        reason = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        missing = _missing_relative_path(error, kwargs)
        if missing is not None:
            key, value = missing
            raise EnvironmentSpecError(
                f"env.kwargs.{key}: {value}: no such file from {Path.cwd()} (a relative path "
                "is read from the folder drl runs in); run drl from the folder the config was "
                "written for, or give the config an absolute path"
            ) from error
        if _rejects_kwargs(error, kwargs):
            raise EnvironmentSpecError(
                f"env.kwargs: {env_id} does not accept {kwargs}: {reason}"
            ) from error
        raise EnvironmentSpecError(
            f"env.id: making {env_id} failed inside {_package_of(env_id)} under MuJoCo "
            f"{_mujoco_version()} ({reason}); the package may need another MuJoCo "
            "(drl doctor shows the versions installed)"
        ) from error
    try:
        env = apply_wrappers(env, wrappers)
        env = flat_observation_env(env, observation_keys, env_id, observation_groups)
        env_facts(env)
    except BaseException:
        env.close()
        raise
    return env


def _missing_relative_path(error: Exception, kwargs: dict[str, Any]) -> tuple[str, str] | None:
    """The kwarg whose relative path names no file from here, where ``error`` names it (a
    checkpoint played from another folder than the one it trained in); None otherwise."""
    for key, value in kwargs.items():
        if (
            isinstance(value, str)
            and value in str(error)
            and not Path(value).is_absolute()
            and not Path(value).exists()
        ):
            return str(key), value
    return None


def _rejects_kwargs(error: Exception, kwargs: dict[str, Any]) -> bool:
    """Whether ``error`` is about the user's ``kwargs``: a call that does not take them, or a
    message naming one of them or its value (an ``xml_file`` path that does not exist). Any
    other failure is the task package's own, whatever the kwargs."""
    if not kwargs:
        return False
    message = str(error)
    if isinstance(error, TypeError) and (
        "keyword argument" in message or "positional argument" in message
    ):
        return True
    named = [str(key) for key in kwargs] + [
        str(value) for value in kwargs.values() if isinstance(value, str) and len(value) > 2
    ]
    return any(name in message for name in named)


def _package_of(env_id: str) -> str:
    """The package that makes ``env_id`` (its entry point's top module), with its version."""
    import importlib.metadata

    import gymnasium as gym

    registered = env_id.partition(":")[2] if env_module(env_id) else env_id  # once imported
    try:
        entry_point = gym.spec(registered).entry_point
    except gym.error.Error:
        return "its package"
    module = entry_point if isinstance(entry_point, str) else entry_point.__module__
    top = module.split(":")[0].split(".")[0]
    distributions = importlib.metadata.packages_distributions().get(top, [top])
    try:
        return f"{top} {importlib.metadata.version(distributions[0])}"
    except importlib.metadata.PackageNotFoundError:
        return top


def _mujoco_version() -> str:
    import mujoco

    return str(mujoco.__version__)


def _warn_from_mujoco(message: str) -> None:
    warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


def _route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings to Python's ``warnings`` (once per message and process).

    MuJoCo's default handler also appends every warning to ``MUJOCO_LOG.TXT`` in the working
    directory, e.g. gymnasium's HalfCheetah model's deprecated ``settotalmass`` on each run. A
    handler someone else installed is left alone.
    """
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_warn_from_mujoco)


def env_facts(env: Any) -> EnvFacts:
    """Check the spaces (flat Box observation, finite Box action) and describe them."""
    from gymnasium import spaces

    env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    obs_space, action_space = env.observation_space, env.action_space
    if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        hint = (
            "; flatten it with env.wrappers: [{name: FlattenObservation}]"
            if isinstance(obs_space, spaces.Box)
            else ""
        )
        raise EnvironmentSpecError(
            f"{env_id}: observation space must be a flat Box or a Dict of Boxes, got "
            f"{obs_space}{hint}"
        )
    if not isinstance(action_space, spaces.Box) or len(action_space.shape) != 1:
        raise EnvironmentSpecError(f"{env_id}: action space must be a flat Box, got {action_space}")
    low = np.asarray(action_space.low, dtype=np.float64)
    high = np.asarray(action_space.high, dtype=np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (low < high).all()):
        raise EnvironmentSpecError(f"{env_id}: action bounds must be finite with low < high")
    try:
        layout = env.get_wrapper_attr("observation_layout")
        groups = env.get_wrapper_attr("observation_groups")
    except AttributeError:
        layout = groups = None
    return EnvFacts(
        env_id, int(obs_space.shape[0]), int(action_space.shape[0]), low, high, layout, groups
    )


@dataclass
class StepBatch:
    """One synchronous step of every environment; arrays are ``[num_envs, ...]``.

    ``final_obs`` is the observation each env returned before its automatic reset (equal to
    ``next_obs`` where the episode did not end); ``next_obs`` is what the policy sees next.
    ``finished_successes``: the outcome of each finished episode the task reported success in
    (``drlcli.success``), in the order they finished.
    """

    next_obs: np.ndarray
    final_obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    finished_returns: list[float]
    finished_lengths: list[int]
    finished_successes: list[bool]


def rollout_actor_seed(env_config: EnvConfig, actor_id: int) -> int:
    """The seed of rollout actor ``actor_id``: its env ``i`` is reset with this ``+ i``."""
    return env_config.seed + 10_000 * actor_id


class EnvBatch:
    """``num_envs`` independent environments stepped in one loop, with same-step auto-reset.

    A plain loop rather than gymnasium's vector wrappers: it keeps the pre-reset observation for
    truncation bootstrapping and it tracks episode returns without wrapper overhead.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        observation_keys: tuple[str, ...] | None = None,
        observation_groups: tuple[Sequence[str], Sequence[str] | None] | None = None,
        success_key: str | None = None,
        success_when: str = ANY_STEP,
        wrappers: Sequence[Any] = (),
    ) -> None:
        self.envs = [
            make_env(
                env_id,
                max_episode_steps=max_episode_steps,
                observation_keys=observation_keys,
                observation_groups=observation_groups,
                wrappers=wrappers,
                **(env_kwargs or {}),
            )
            for _ in range(num_envs)
        ]
        self.facts = env_facts(self.envs[0])
        self.num_envs = num_envs
        self.seed = seed
        self.success = EpisodeSuccess(num_envs, success_key, success_when)
        self.restart()

    def restart(self) -> None:
        """Reset env ``i`` with seed ``seed + i`` and forget the episodes in progress: the
        batch is as it was made (the same first observations, the same random streams)."""
        self._episode_returns = np.zeros(self.num_envs, dtype=np.float64)
        self._episode_lengths = np.zeros(self.num_envs, dtype=np.int64)
        self.success.load_state_dict(None)
        self.obs = np.stack(
            [env.reset(seed=self.seed + index)[0] for index, env in enumerate(self.envs)]
        ).astype(np.float64)
        if not np.isfinite(self.obs).all():
            raise TrainingError(f"{self.facts.env_id} reset to a non-finite observation")

    @classmethod
    def for_rollout_actor(cls, env_config: EnvConfig, actor_id: int) -> EnvBatch:
        """Rollout actor ``actor_id``'s environments as ``env_config`` describes them."""
        return cls(
            env_config.id,
            env_config.num_envs,
            seed=rollout_actor_seed(env_config, actor_id),
            max_episode_steps=env_config.max_episode_steps,
            env_kwargs=env_config.kwargs,
            observation_keys=env_config.observation_keys,
            observation_groups=group_keys(env_config),
            success_key=env_config.success_key,
            success_when=env_config.success_when,
            wrappers=env_config.wrappers,
        )

    def step(self, env_actions: np.ndarray) -> StepBatch:
        """Step every env with its row of ``env_actions`` ``[num_envs, action_dim]``."""
        next_obs = np.empty_like(self.obs)
        final_obs = np.empty_like(self.obs)
        rewards = np.empty(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        finished_returns: list[float] = []
        finished_lengths: list[int] = []
        finished_successes: list[bool] = []
        for index, env in enumerate(self.envs):
            obs, reward, term, trunc, info = env.step(env_actions[index])
            self.success.step(index, info)
            rewards[index] = reward
            terminated[index], truncated[index] = term, trunc
            final_obs[index] = obs
            self._episode_returns[index] += reward
            self._episode_lengths[index] += 1
            if term or trunc:
                finished_returns.append(float(self._episode_returns[index]))
                finished_lengths.append(int(self._episode_lengths[index]))
                if (outcome := self.success.finish(index)) is not None:
                    finished_successes.append(outcome)
                self._episode_returns[index] = 0.0
                self._episode_lengths[index] = 0
                obs, _ = env.reset()
            next_obs[index] = obs
        if not (np.isfinite(next_obs).all() and np.isfinite(final_obs).all()):
            raise TrainingError(f"{self.facts.env_id} returned a non-finite observation")
        if not np.isfinite(rewards).all():
            raise TrainingError(f"{self.facts.env_id} returned a non-finite reward")
        self.obs = next_obs
        return StepBatch(
            next_obs,
            final_obs,
            rewards,
            terminated,
            truncated,
            finished_returns,
            finished_lengths,
            finished_successes,
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything the batch's episodes in progress depend on (``env_state`` of every env,
        the current observations, the episodes' running returns, lengths and success so far):
        plain data."""
        from drlcli.env_state import env_state

        return {
            "envs": [env_state(env) for env in self.envs],
            "obs": self.obs.copy(),
            "episode_returns": self._episode_returns.copy(),
            "episode_lengths": self._episode_lengths.copy(),
            "episode_success": self.success.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the episodes ``state_dict`` recorded (of a batch made the same way).

        Raises:
            ValueError: the state is of another number of environments or another task.
        """
        from drlcli.env_state import load_env_state

        if len(state["envs"]) != self.num_envs:
            raise ValueError(f"{len(state['envs'])} environments stored, {self.num_envs} here")
        obs = np.asarray(state["obs"], dtype=np.float64)
        if obs.shape != self.obs.shape:
            raise ValueError(f"stored observations {obs.shape}, this batch {self.obs.shape}")
        for env, env_record in zip(self.envs, state["envs"], strict=True):
            load_env_state(env, env_record)
        self.obs = obs.copy()
        self._episode_returns = np.asarray(state["episode_returns"], dtype=np.float64).copy()
        self._episode_lengths = np.asarray(state["episode_lengths"], dtype=np.int64).copy()
        self.success.load_state_dict(state.get("episode_success"))  # absent in older checkpoints

    def close(self) -> None:
        for env in self.envs:
            env.close()

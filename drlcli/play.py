"""``drl play``: ``load_play_actor`` (also what ``drl export`` and the learning benchmark load),
a window or a video of the policy's episodes (``evaluation.run_episodes``).

``load_play_actor`` reads a checkpoint safely, validates its actor_semantics against the
environment it will run in and against the rebuilt actor, and only then loads the weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drlcli.actors.contract import declared_inference_memory
from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.registry import actor_kind
from drlcli.checkpoints.checks import check_fits, validate_actor_semantics
from drlcli.checkpoints.record import Checkpoint
from drlcli.checkpoints.semantics import actor_semantics
from drlcli.checkpoints.verified import read_verified_checkpoint
from drlcli.env_facts import EnvFacts
from drlcli.envs import env_facts, env_module, make_env
from drlcli.errors import CheckpointError, EnvironmentSpecError, SemanticsError, UsageError
from drlcli.evaluation import EpisodeResult, FrozenPolicy, run_episodes
from drlcli.normalization import RmsState
from drlcli.observations import describe_layout
from drlcli.success import ANY_STEP, FINAL_STEP

# The views of --camera besides a model camera's name (view_from).
CAMERA_FOLLOW, CAMERA_FIXED = "follow", "fixed"


@dataclass
class PlayPolicy(FrozenPolicy):
    """A checkpoint's policy with its frozen observation statistics and its environment.

    Attributes:
        env_id: the environment the checkpoint was trained on (or the validated override).
        env_kwargs: the ``gymnasium.make`` keyword arguments training used ({} for an override).
        facts: that environment's spaces.
        max_episode_steps: the time limit training used (None: the task's own).
        observation_keys: a Dict task's parts the policy reads, in order (the checkpoint's
            layout); None for a flat Box observation.
        success: ``(env.success_key, env.success_when)`` of the training config: how an
            episode's success is read (``drlcli.success``).
        wrappers: the Gymnasium wrappers training put around the task (the checkpoint's).
        checkpoint: the whole checkpoint.
        inference_memory: bytes per category the rebuilt actor declares it needs for inference.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    facts: EnvFacts
    max_episode_steps: int | None
    observation_keys: tuple[str, ...] | None
    success: tuple[str | None, str]
    wrappers: list[dict[str, Any]]
    checkpoint: Checkpoint
    inference_memory: dict[str, int]

    def make_env(self, **overrides: Any) -> Any:
        """The policy's environment as training made it; ``overrides`` (render_mode, width,
        height) take precedence over the stored kwargs."""
        return make_env(
            self.env_id,
            max_episode_steps=self.max_episode_steps,
            observation_keys=self.observation_keys,
            wrappers=self.wrappers,
            **{**self.env_kwargs, **overrides},
        )

    def make_render_env(self, render_mode: str, camera: str = CAMERA_FOLLOW, **overrides: Any):
        """The environment with a render mode and the view ``camera`` names (``view_from``)."""
        model_camera = {} if camera in (CAMERA_FOLLOW, CAMERA_FIXED) else {"camera_name": camera}
        env = self.make_env(render_mode=render_mode, **model_camera, **overrides)
        try:
            view_from(env, camera)
        except BaseException:
            env.close()
            raise
        return env


def view_from(env: Any, camera: str) -> None:
    """Set the view of a MuJoCo env before its first frame.

    ``follow``: its free camera tracks the body its camera settings name (``trackbodyid``), or
    the first body that moves (``tracked_body``), with their distance and angles (Gymnasium
    sets those but leaves the camera free, so a hopper leaves the frame within seconds).
    ``fixed``: Gymnasium's free camera, in place. Any other value names a camera of the model
    (``make_render_env`` passes it on); refused with the model's camera names when there is
    none of that name.
    """
    import mujoco

    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    if renderer is None:  # not a MuJoCo task: it renders its own way
        return
    model = env.unwrapped.model
    if camera not in (CAMERA_FOLLOW, CAMERA_FIXED):
        if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
            names = [model.camera(i).name for i in range(model.ncam)]
            raise UsageError(
                f"--camera {camera}: the model has no such camera; use follow, fixed"
                + (f" or one of {', '.join(names)}" if names else " (it has no cameras)")
            )
        return
    if camera == CAMERA_FOLLOW:
        config = dict(renderer.default_cam_config or {})
        config["trackbodyid"] = tracked_body(model, int(config.get("trackbodyid", 0) or 0))
        config["type"] = mujoco.mjtCamera.mjCAMERA_TRACKING
        renderer.default_cam_config = config  # applied when the viewer is made, at frame one
        renderer.camera_id = None  # -1 would reset the camera to free at every frame


def tracked_body(model: Any, configured: int) -> int:
    """The body the ``follow`` view tracks: the one the task's camera settings name, else the
    first body that moves (has a joint). That is the root body of a walking robot; for a
    fixed-base arm whose first body is a static floor or table (Gymnasium-Robotics' Fetch), the
    arm's first moving link, so the arm stays in the frame."""
    if 0 < configured < model.nbody:
        return configured
    for body in range(1, model.nbody):
        if model.body_jntnum[body] > 0:
            return body
    return 1 if model.nbody > 1 else 0


def load_play_actor(
    path: str | Path,
    *,
    env_id: str | None = None,
    allow_builders: Iterable[str] = (),
    allow_env_modules: Iterable[str] = (),
) -> PlayPolicy:
    """Load a checkpoint's policy after every semantics check passes.

    Args:
        path: the checkpoint.
        env_id: run in this environment instead of the checkpoint's; its spaces must match.
        allow_builders: modules whose builders may be imported (custom actors only; the
            built-in ``drlcli.*`` builders need no consent).
        allow_env_modules: modules that the checkpoint's env id ``module:Task-v0`` may import
            (an ``env_id`` the caller gives is its own choice and needs none).

    Raises:
        CheckpointError: unreadable file.
        SemanticsError: missing/unsupported semantics, a custom builder without consent,
            or a mismatch with the environment or the rebuilt actor.
    """
    checkpoint = read_verified_checkpoint(path)
    source = str(path)
    semantics = validate_actor_semantics(checkpoint.actor_semantics, source=source)
    spec = ActorSpec(semantics["builder"], semantics["kwargs"])
    kind = actor_kind(spec.builder)
    if kind != semantics["kind"]:
        raise SemanticsError(
            f"{source}: actor_semantics.kind is {semantics['kind']!r} but builder "
            f"{spec.builder} is {kind}"
        )
    if kind == "custom" and spec.module not in set(allow_builders):
        raise SemanticsError(
            f"{source}: the policy is built by custom code {spec.builder}; importing it runs "
            f"that module. If you trust it, pass --allow-builder {spec.module}"
        )
    module = env_module(checkpoint.env.id)
    if env_id is None and module is not None and module not in set(allow_env_modules):
        raise SemanticsError(
            f"{source}: the task {checkpoint.env.id} is registered by module {module}; making "
            f"it imports that module. If you trust it, pass --allow-env-module {module}"
        )
    run_env_id = env_id or checkpoint.env.id
    # Another task does not take the trained task's kwargs (an xml_file, say).
    env_kwargs = checkpoint.env.kwargs if run_env_id == checkpoint.env.id else {}
    stored_layout = checkpoint.env.facts().observation_layout
    keys = None if stored_layout is None else tuple(field.key for field in stored_layout)
    try:
        env = make_env(
            run_env_id, observation_keys=keys, wrappers=checkpoint.env.wrappers, **env_kwargs
        )
    except EnvironmentSpecError as error:
        if keys is None:
            raise
        raise SemanticsError(
            f"{source}: checkpoint does not fit environment {run_env_id}: the policy reads "
            f"observation {describe_layout(stored_layout)} ({error})"
        ) from None
    facts = env_facts(env)
    env.close()
    check_fits(checkpoint, facts, source)

    actor = build_policy_actor(
        spec, facts.obs_dim, facts.action_dim, "cpu", facts.action_low, facts.action_high
    )
    rebuilt = actor_semantics(spec, facts.obs_dim, facts.action_dim, actor.action_transform_id)
    validate_actor_semantics(semantics, rebuilt, source=source)
    try:
        actor.load_state_dict(checkpoint.actor)
    except (KeyError, RuntimeError) as error:
        reason = " ".join(str(error).split())[:300]
        raise CheckpointError(f"{source}: actor weights do not fit the actor: {reason}") from error
    actor.eval()
    obs_rms = None
    if checkpoint.obs_rms_state is not None:
        obs_rms = RmsState.from_dict(checkpoint.obs_rms_state)
    return PlayPolicy(
        actor=actor,
        obs_rms=obs_rms,
        observation_clip=checkpoint.observation_clip,
        env_id=run_env_id,
        env_kwargs=dict(env_kwargs),
        facts=facts,
        max_episode_steps=checkpoint.env.max_episode_steps,
        observation_keys=keys,
        success=_success_settings(checkpoint),
        wrappers=checkpoint.env.wrappers,
        checkpoint=checkpoint,
        inference_memory=declared_inference_memory(actor),
    )


def _success_settings(checkpoint: Checkpoint) -> tuple[str | None, str]:
    """How the training config read success (a checkpoint from before it: the defaults)."""
    env = checkpoint.config.get("env")
    env = env if isinstance(env, dict) else {}
    key, when = env.get("success_key"), env.get("success_when", ANY_STEP)
    return (key if isinstance(key, str) else None), (when if when == FINAL_STEP else ANY_STEP)


def has_display() -> bool:
    """Whether a window can open (an X11 or Wayland display on Linux; always elsewhere)."""
    import os
    import sys

    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def play_in_window(
    policy: PlayPolicy,
    episodes: int,
    seed: int,
    deterministic: bool,
    camera: str = CAMERA_FOLLOW,
) -> list:
    """Run episodes in the MuJoCo viewer at real-time pace (the env's render_fps), viewed as
    ``camera`` says (``view_from``)."""
    if not has_display():
        raise UsageError(
            "--render needs a display and none was found (no DISPLAY or WAYLAND_DISPLAY); "
            "record a video instead with --video out.mp4"
        )
    env = policy.make_render_env("human", camera)
    step_seconds = getattr(env.unwrapped, "dt", None) or 1.0 / env.metadata.get("render_fps", 30)
    try:
        return run_episodes(
            policy, episodes, seed, deterministic, env=env, on_frame=RealTimePacer(step_seconds)
        )
    finally:
        env.close()


class RealTimePacer:
    """Called once per frame: sleeps so that frames are ``step_seconds`` of wall time apart
    (the viewer itself draws as fast as it can). Falls behind gracefully: no catch-up bursts."""

    def __init__(self, step_seconds: float) -> None:
        self.step_seconds = step_seconds
        self._next: float | None = None

    def __call__(self, env: Any) -> None:
        import time

        now = time.perf_counter()
        if self._next is not None and now < self._next:
            time.sleep(self._next - now)
            now = self._next
        self._next = now + self.step_seconds


def _render_env_sized(
    policy: PlayPolicy, camera: str, width: int, height: int
) -> tuple[Any, Callable[[np.ndarray], np.ndarray]]:
    """The render environment at ``width`` x ``height``, and what turns its frames into frames
    of that size: the identity where ``gymnasium.make`` takes the size; a task whose make does
    not (Shimmy's dm_control tasks) renders at its own size, and its frames are resized."""
    try:
        env = policy.make_render_env("rgb_array", camera, width=width, height=height)
        return env, lambda frame: frame
    except EnvironmentSpecError as error:
        if "width" not in str(error) and "height" not in str(error):
            raise
    from PIL import Image

    def resized(frame: np.ndarray) -> np.ndarray:
        if frame.shape[:2] == (height, width):
            return frame
        image = Image.fromarray(np.ascontiguousarray(frame))
        return np.asarray(image.resize((width, height), Image.Resampling.BILINEAR))

    return policy.make_render_env("rgb_array", camera), resized


def record_video(
    policy: PlayPolicy,
    path: str | Path,
    episodes: int,
    seed: int,
    deterministic: bool,
    width: int = 640,
    height: int = 480,
    fps: int | None = None,
    camera: str = CAMERA_FOLLOW,
) -> tuple[list[EpisodeResult], int]:
    """Render offscreen and write an MP4 (H.264 via imageio-ffmpeg), viewed as ``camera`` says
    (``view_from``).

    Frames are written to a temporary file beside ``path`` that replaces it only when every
    episode has been recorded, so a failure never leaves a truncated video. Returns the episode
    results and the number of frames (one per reset and one per step).
    """
    import os

    import imageio.v2 as imageio

    from drlcli.atomic import atomic_output

    os.environ.setdefault("MUJOCO_GL", "egl" if not has_display() else "glfw")
    path = Path(path)
    if path.suffix.lower() not in (".mp4", ".mov", ".mkv"):
        raise UsageError(f"--video {path}: use a .mp4 (or .mov/.mkv) file name")
    if width <= 0 or height <= 0 or width % 2 or height % 2:
        raise UsageError(f"--width/--height must be positive even numbers, got {width}x{height}")
    env, resized = _render_env_sized(policy, camera, width, height)
    fps = fps or int(env.metadata.get("render_fps", 30))
    frames = 0
    with atomic_output(path) as temp:
        writer = imageio.get_writer(temp, fps=fps, codec="libx264", macro_block_size=1)
        try:

            def capture(frame_env: Any) -> None:
                nonlocal frames
                writer.append_data(resized(frame_env.render()))
                frames += 1

            results = run_episodes(policy, episodes, seed, deterministic, env=env, on_frame=capture)
        finally:
            writer.close()
            env.close()
    return results, frames

"""``drl play``: a window or a video of a checkpoint's policy's episodes
(``evaluation.run_episodes``), the policy loaded by ``checkpoints.policy.load_play_actor``, with
the view the user asks for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from drlcli.checkpoints.policy import PlayPolicy
from drlcli.errors import EnvironmentSpecError, UsageError
from drlcli.evaluation import EpisodeResult, run_episodes

# The views of --camera besides a model camera's name (view_from).
CAMERA_FOLLOW, CAMERA_FIXED = "follow", "fixed"


def make_render_env(
    policy: PlayPolicy, render_mode: str, camera: str = CAMERA_FOLLOW, **overrides: Any
) -> Any:
    """``policy``'s environment with a render mode and the view ``camera`` names
    (``view_from``).

    Raises:
        UsageError: the task does not list ``render_mode`` in its ``metadata["render_modes"]``
            (a task of your own that cannot draw frames): it would fail at its first frame.
    """
    import warnings

    model_camera = {} if camera in (CAMERA_FOLLOW, CAMERA_FIXED) else {"camera_name": camera}
    with warnings.catch_warnings():
        # Gymnasium's warning of an unlisted mode: the check below says it in one line.
        warnings.filterwarnings("ignore", message=".*not in the possible render_modes")
        env = policy.make_env(render_mode=render_mode, **model_camera, **overrides)
    try:
        modes = list(env.metadata.get("render_modes") or [])
        if render_mode not in modes:
            flag = "--render" if render_mode == "human" else "--video"
            raise UsageError(
                f"{flag}: {policy.env_id} does not draw {render_mode!r} frames (its "
                f"metadata's render_modes: {modes or 'none'}); play it without {flag} for its "
                "returns, or give the task that render mode"
            )
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
    env = make_render_env(policy, "human", camera)
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
        env = make_render_env(policy, "rgb_array", camera, width=width, height=height)
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

    return make_render_env(policy, "rgb_array", camera), resized


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

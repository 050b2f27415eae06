"""load_play_actor and `drl play`: semantics checks before weights, episodes, video, consent."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from drlcli.checkpoints.policy import load_play_actor
from drlcli.cli import app
from drlcli.errors import CheckpointError, SemanticsError, UsageError
from drlcli.evaluation import run_episodes
from drlcli.play import play_in_window, record_video

runner = CliRunner()


def test_loaded_policy_acts_with_frozen_statistics_and_clipped_mean(checkpoint_file):
    policy = load_play_actor(checkpoint_file())
    assert policy.env_id == "InvertedPendulum-v5"
    obs = np.random.default_rng(0).normal(size=(5, 4))
    actions = policy.act(obs)
    normalized = (obs - np.arange(4.0)) / np.sqrt(1.0 + 1e-8)
    with torch.no_grad():
        expected = policy.actor.as_export_module()(torch.as_tensor(normalized, dtype=torch.float32))
    np.testing.assert_allclose(actions, expected.numpy(), atol=1e-6)
    assert actions.dtype == np.float32 and actions.shape == (5, 1)


def test_episodes_are_reproducible_for_a_seed(checkpoint_file):
    policy = load_play_actor(checkpoint_file())
    first = run_episodes(policy, 2, seed=4)
    second = run_episodes(policy, 2, seed=4)
    assert first == second and len(first) == 2
    assert all(result.length >= 1 for result in first)


def _drop_semantics_and_break_weights(payload):
    payload["actor_semantics"] = None
    payload["actor"]["mean_network.0.weight"] = torch.zeros(3, 3)


def test_semantics_are_checked_before_any_weight(checkpoint_file):
    path = checkpoint_file(_drop_semantics_and_break_weights)
    with pytest.raises(SemanticsError, match="missing or null; retraining is the only remedy"):
        load_play_actor(path)


def test_weights_that_do_not_fit_are_refused(checkpoint_file):
    def break_weights(payload):
        payload["actor"]["mean_network.0.weight"] = torch.zeros(3, 3)

    with pytest.raises(
        CheckpointError,
        match=r"fails drl verify's 'dimensions' check: actor tensor shapes do not match .* "
        r"mean_network.0.weight \(3, 3\) != \(8, 4\)",
    ):
        load_play_actor(checkpoint_file(break_weights))


def test_env_override_must_match_the_spaces(checkpoint_file):
    path = checkpoint_file()
    with pytest.raises(SemanticsError, match="obs_dim: checkpoint 4 != env 9"):
        load_play_actor(path, env_id="InvertedDoublePendulum-v5")
    policy = load_play_actor(path, env_id="InvertedPendulum-v4")  # same spaces: allowed
    assert policy.env_id == "InvertedPendulum-v4"


def _env_kwargs(value):
    def modify(payload):
        payload["env"]["kwargs"] = value

    return modify


def test_the_trained_env_kwargs_rebuild_the_task(checkpoint_file):
    policy = load_play_actor(checkpoint_file(_env_kwargs({"reset_noise_scale": 0.05})))
    assert policy.env_kwargs == {"reset_noise_scale": 0.05}
    assert policy.make_env().unwrapped._reset_noise_scale == 0.05
    video_env = policy.make_env(render_mode="rgb_array", width=64, height=48)
    assert video_env.unwrapped._reset_noise_scale == 0.05 and video_env.unwrapped.width == 64
    # Another task does not inherit them (an xml_file would not fit it).
    other = load_play_actor(
        checkpoint_file(_env_kwargs({"reset_noise_scale": 0.05})), env_id="InvertedPendulum-v4"
    )
    assert other.env_kwargs == {}


def test_malformed_env_kwargs_are_a_checkpoint_error(checkpoint_file):
    with pytest.raises(CheckpointError, match="checkpoint env.kwargs: expected a mapping"):
        load_play_actor(checkpoint_file(_env_kwargs(["reset_noise_scale", 0.05])))


def test_action_bounds_must_match_the_env(checkpoint_file):
    def other_bounds(payload):
        payload["env"]["action_high"] = [2.0]

    with pytest.raises(SemanticsError, match=r"action_high: checkpoint \[2.0\] != env \[3.0\]"):
        load_play_actor(checkpoint_file(other_bounds))


def test_semantics_must_match_the_rebuilt_actor(checkpoint_file):
    def other_transform(payload):
        payload["actor_semantics"]["action_transform"] = "tanh"

    with pytest.raises(
        SemanticsError, match="action_transform: checkpoint 'tanh' != expected 'clip'"
    ):
        load_play_actor(checkpoint_file(other_transform))


CUSTOM_MODULE = """
from drlcli.actors.gaussian import build_gaussian_actor
open({marker!r}, "w").close()

def build(obs_dim, action_dim, device="cpu", **kwargs):
    return build_gaussian_actor(obs_dim, action_dim, device, **kwargs)
"""


def test_custom_builder_needs_consent(checkpoint_file, tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "my_custom_actor.py").write_text(CUSTOM_MODULE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))

    def custom(payload):
        payload["actor_semantics"].update(kind="custom", builder="my_custom_actor:build")

    path = checkpoint_file(custom)
    with pytest.raises(SemanticsError, match="pass --allow-builder my_custom_actor"):
        load_play_actor(path)
    assert not marker.exists()
    policy = load_play_actor(path, allow_builders=["my_custom_actor"])
    assert marker.exists()
    assert policy.act(np.zeros((1, 4))).shape == (1, 1)


@pytest.mark.subprocess
def test_video_decodes_to_the_expected_frames(checkpoint_file, tmp_path):
    import imageio.v3 as iio

    policy = load_play_actor(checkpoint_file())
    path = tmp_path / "clip.mp4"
    results, frames = record_video(
        policy, path, episodes=2, seed=0, deterministic=True, width=64, height=48, fps=25
    )
    assert frames == sum(r.length for r in results) + len(results)  # a frame per reset and step
    decoded = iio.imread(path)
    assert decoded.shape == (frames, 48, 64, 3)
    assert not list(tmp_path.glob(".clip*")), "temporary file left behind"


@pytest.mark.subprocess  # imageio's ffmpeg process writes the video
def test_a_task_whose_make_takes_no_size_is_recorded_at_the_size_asked(checkpoint_file, tmp_path):
    """drltest/FixedSizeRender-v0 renders 64 x 48 and refuses width/height (as Shimmy's
    dm_control tasks do): its frames are resized to the 96 x 80 asked."""
    import imageio.v3 as iio

    import tests.range_envs  # noqa: F401  (registers the task)

    policy = load_play_actor(checkpoint_file(), env_id="drltest/FixedSizeRender-v0")
    path = tmp_path / "clip.mp4"
    results, frames = record_video(
        policy, path, episodes=1, seed=0, deterministic=True, width=96, height=80, fps=25
    )
    assert iio.imread(path).shape == (frames, 80, 96, 3)
    assert frames == results[0].length + 1


def test_bad_video_arguments_write_nothing(checkpoint_file, tmp_path):
    policy = load_play_actor(checkpoint_file())
    with pytest.raises(UsageError, match="positive even numbers"):
        record_video(policy, tmp_path / "v.mp4", 1, 0, True, width=63, height=48)
    with pytest.raises(UsageError, match="use a .mp4"):
        record_video(policy, tmp_path / "v.gif", 1, 0, True)
    assert list(tmp_path.glob("v.*")) == []


@pytest.mark.parametrize(("render_mode", "flag"), [("rgb_array", "--video"), ("human", "--render")])
def test_a_task_that_draws_no_frames_is_refused_in_one_line(render_mode, flag):
    """A task of your own whose metadata lists no render mode failed at its first frame with
    gymnasium's NotImplementedError; now one line before any episode, without gymnasium's
    warning of the unlisted mode."""
    import warnings
    from types import SimpleNamespace

    import gymnasium

    import tests.range_envs  # noqa: F401  (registers drltest/Ranged-v0, render_modes [])
    from drlcli.play import make_render_env

    made = []

    def make_env(**kwargs):
        made.append(gymnasium.make("drltest/Ranged-v0", low=[-1.0], high=[1.0], **kwargs))
        return made[-1]

    policy = SimpleNamespace(env_id="drltest/Ranged-v0", make_env=make_env)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(UsageError) as refused:
        warnings.simplefilter("always")
        make_render_env(policy, render_mode)
    assert str(refused.value) == (
        f"{flag}: drltest/Ranged-v0 does not draw {render_mode!r} frames (its metadata's "
        f"render_modes: none); play it without {flag} for its returns, or give the task that "
        "render mode"
    )
    assert [str(w.message) for w in caught] == []
    assert len(made) == 1  # made with the mode, so gymnasium had its warning to give


def test_render_without_display_suggests_video(checkpoint_file, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    policy = load_play_actor(checkpoint_file())
    with pytest.raises(UsageError, match="record a video instead with --video out.mp4"):
        play_in_window(policy, 1, 0, True)


def test_play_command_prints_the_episode_table(checkpoint_file):
    result = runner.invoke(
        app,
        ["play", str(checkpoint_file()), "--episodes", "3", "--seed", "1"],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    # The title wraps to the table's width wherever the checkpoint's path puts it.
    assert "deterministictransform(mean)" in "".join(result.output.split())
    assert "mean" in result.output and "±" in result.output
    stochastic = runner.invoke(
        app,
        ["play", str(checkpoint_file()), "--episodes", "1", "--stochastic"],
        env={"COLUMNS": "120"},
    )
    assert stochastic.exit_code == 0
    assert "stochasticexplore" in "".join(stochastic.output.split())


def test_play_command_errors(checkpoint_file, tmp_path):
    missing = runner.invoke(app, ["play", str(tmp_path / "none.pt")])
    assert missing.exit_code == 1 and "checkpoint not found" in missing.output
    both = runner.invoke(app, ["play", str(checkpoint_file()), "--render", "--video", "x.mp4"])
    assert both.exit_code == 2 and "choose one of --render and --video" in both.output
    wrong_env = runner.invoke(app, ["play", str(checkpoint_file()), "--env", "Hopper-v5"])
    assert wrong_env.exit_code == 1 and "does not fit environment Hopper-v5" in wrong_env.output


def test_real_time_pacer_spaces_frames_by_the_env_step():
    import time

    from drlcli.play import RealTimePacer

    pacer = RealTimePacer(0.02)
    started = time.perf_counter()
    for _ in range(11):
        pacer(None)
    assert time.perf_counter() - started >= 0.2 - 1e-3


@pytest.mark.subprocess
def test_render_in_a_window_under_xvfb_at_real_time_pace(checkpoint_file):
    import os
    import shutil
    import subprocess
    import sys
    import time

    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb libgl1-mesa-dri)")
    path = checkpoint_file()
    server = subprocess.Popen(
        ["Xvfb", ":97", "-screen", "0", "640x480x24"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {**os.environ, "DISPLAY": ":97", "MUJOCO_GL": "glfw", "COLUMNS": "120"}

    def idle_seconds(*extra):
        """Wall time minus CPU time of a play run: its sleeps (and waits for a busy CPU)."""
        import resource

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "drlcli", "play", str(path), "--episodes", "5", *extra],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert result.returncode == 0, result.stderr
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall - cpu

    try:
        time.sleep(1.0)
        rendered_idle = idle_seconds("--render")
    finally:
        server.terminate()
    # The same five deterministic episodes in-process give the step count; real time is 0.04 s
    # of simulation a step, which the window run spends waiting between frames. (Its own CPU
    # time, not a second run's wall time: a loaded machine only lengthens the wait.)
    steps = sum(r.length for r in run_episodes(load_play_actor(path), 5, seed=0))
    assert rendered_idle >= 0.04 * steps * 0.8


@pytest.mark.parametrize("where", ["weights", "statistics"])
def test_non_finite_weights_or_statistics_are_not_played_or_exported(
    checkpoint_file, tmp_path, where
):
    from drlcli.errors import CheckpointError
    from drlcli.export import export_onnx

    def poison(payload):
        if where == "weights":
            payload["actor"]["log_std"][0] = float("nan")
        else:
            payload["obs_rms_state"]["mean"][2] = float("inf")

    path = checkpoint_file(poison)
    refusal = {
        "weights": "fails drl verify's 'finite tensors' check: non-finite values in actor.log_std",
        "statistics": "fails drl verify's 'observation statistics' check: obs_rms_state.mean is "
        "not finite",
    }[where]
    with pytest.raises(CheckpointError, match=refusal):
        load_play_actor(path)
    out = tmp_path / "policy.onnx"
    with pytest.raises(CheckpointError, match=refusal):
        export_onnx(path, out)
    assert not out.exists()


def test_a_file_that_would_run_code_is_named_as_such(tmp_path):
    import os
    import pickle

    from drlcli.errors import CheckpointError

    class Hostile:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    torch_file, plain_file = tmp_path / "torch.pt", tmp_path / "plain.pt"
    torch.save({"format": "drl-checkpoint", "x": Hostile()}, torch_file)
    plain_file.write_bytes(pickle.dumps(Hostile(), protocol=4))
    for path in (torch_file, plain_file):
        with pytest.raises(CheckpointError) as error:
            load_play_actor(path)
        message = str(error.value)
        assert "would call posix.system" in message or "would call nt.system" in message
        assert "truncated or corrupt" not in message and "will likely succeed" not in message


def robot_pixels(env) -> int:
    """Pixels of the frame that change when the robot's geoms are hidden: the robot's."""
    model = env.unwrapped.model
    shown = env.render().astype(int)
    alpha = model.geom_rgba[:, 3].copy()
    model.geom_rgba[model.geom_bodyid > 0, 3] = 0.0  # body 0 (the world) holds the floor
    hidden = env.render().astype(int)
    model.geom_rgba[:, 3] = alpha
    return int((np.abs(shown - hidden).sum(axis=-1) > 30).sum())


@pytest.mark.parametrize(("camera", "in_frame"), [("follow", True), ("fixed", False)])
def test_the_default_view_follows_the_robot_to_the_end_of_a_long_run(camera, in_frame):
    """A hopper 30 m from its start (a good policy's 1000-step episode) is still in the frame
    with the default view; Gymnasium's free camera, kept by ``fixed``, shows an empty floor."""
    import mujoco

    from drlcli.envs import make_env
    from drlcli.play import view_from

    env = make_env("Hopper-v5", render_mode="rgb_array", width=96, height=96)
    try:
        view_from(env, camera)
        env.reset(seed=0)
        assert robot_pixels(env) > 100  # at the start, both views show it
        env.unwrapped.data.qpos[0] = 30.0  # rootx: 30 m along the floor
        mujoco.mj_forward(env.unwrapped.model, env.unwrapped.data)
        assert (robot_pixels(env) > 100) is in_frame
    finally:
        env.close()


def test_a_model_camera_is_used_by_name_and_an_unknown_one_is_refused(checkpoint_file, tmp_path):
    from drlcli.envs import make_env
    from drlcli.play import view_from

    env = make_env("Hopper-v5", render_mode="rgb_array", camera_name="track")
    try:
        view_from(env, "track")  # Hopper's model camera: accepted, the env renders from it
        with pytest.raises(UsageError, match=r"--camera top: .* use follow, fixed or one of track"):
            view_from(env, "top")
    finally:
        env.close()
    result = CliRunner().invoke(
        app,
        ["play", str(checkpoint_file()), "--video", str(tmp_path / "v.mp4"), "--camera", "top"],
    )
    assert result.exit_code == 2
    assert "the model has no such camera; use follow, fixed (it has no cameras)" in result.stderr
    assert not (tmp_path / "v.mp4").exists()


ENV_MODULE = """
import gymnasium
open({marker!r}, "w").close()
gymnasium.register(
    "MyPendulum-v0",
    entry_point="gymnasium.envs.mujoco.inverted_pendulum_v5:InvertedPendulumEnv",
    max_episode_steps=1000,
)
"""


@pytest.mark.parametrize("command", ["play", "export"])
def test_an_env_id_that_imports_a_module_needs_consent(
    checkpoint_file, tmp_path, monkeypatch, command
):
    """A checkpoint's env id ``module:Task-v0`` imports ``module`` when the task is made: code
    run because a file said so. Refused in one line naming the module, before any import."""
    module = f"my_robot_envs_{command}"  # a module of its own: each is imported once
    marker = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(ENV_MODULE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))

    def foreign_task(payload):
        payload["env"]["id"] = f"{module}:MyPendulum-v0"

    path = checkpoint_file(foreign_task)
    extra = ["--episodes", "1"] if command == "play" else [str(tmp_path / "policy.onnx")]
    refused = CliRunner().invoke(app, [command, str(path), *extra])
    assert refused.exit_code == 1, refused.output
    assert f"registered by module {module}" in refused.output
    assert f"--allow-env-module {module}" in refused.output
    assert not marker.exists() and module not in sys.modules
    allowed = CliRunner().invoke(app, [command, str(path), *extra, "--allow-env-module", module])
    assert allowed.exit_code == 0, allowed.output
    assert marker.exists()


def test_an_env_the_user_names_needs_no_consent(checkpoint_file):
    def foreign_task(payload):
        payload["env"]["id"] = "not_imported_module:MyPendulum-v0"

    policy = load_play_actor(checkpoint_file(foreign_task), env_id="InvertedPendulum-v5")
    assert policy.env_id == "InvertedPendulum-v5"
    assert "not_imported_module" not in sys.modules


@pytest.mark.parametrize("camera", ["follow", "fixed"])
def test_the_default_view_frames_a_fixed_base_arm_whose_first_body_is_static(tmp_path, camera):
    """Gymnasium's Reacher arm, its model's first body a static one 3 m away (as Fetch's first
    body is its floor): ``follow`` tracks the arm's first moving link, not that body."""
    from pathlib import Path

    import gymnasium

    from drlcli.envs import make_env
    from drlcli.play import tracked_body, view_from

    assets = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets"
    xml = (assets / "reacher.xml").read_text()
    xml = xml.replace("<worldbody>", '<worldbody>\n<body name="table" pos="3 3 0"/>', 1)
    (tmp_path / "reacher_on_a_table.xml").write_text(xml)
    env = make_env(
        "Reacher-v5",
        render_mode="rgb_array",
        width=128,
        height=128,
        xml_file=str(tmp_path / "reacher_on_a_table.xml"),
    )
    try:
        model = env.unwrapped.model
        assert model.body(1).name == "table"
        assert model.body(tracked_body(model, 0)).name == "body0"
        view_from(env, camera)
        env.reset(seed=0)
        # The arm is small in Reacher's view (about 10 pixels); tracking the static first body
        # instead, as before, left none of it in the frame.
        assert robot_pixels(env) > 5
    finally:
        env.close()

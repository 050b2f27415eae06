"""make_env's checks, EnvBatch's same-step auto-reset, MuJoCo's warnings."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from drlcli.envs import EnvBatch, make_env
from drlcli.errors import EnvironmentSpecError, TrainingError


def test_make_env_refuses_unknown_ids_and_unsupported_spaces():
    with pytest.raises(EnvironmentSpecError, match="cannot make 'Hoper-v5'"):
        make_env("Hoper-v5")
    with pytest.raises(EnvironmentSpecError, match="action space must be a flat Box"):
        make_env("CartPole-v1")


def test_env_kwargs_reach_gymnasium_and_bad_ones_are_an_env_error():
    assert make_env("Ant-v5").observation_space.shape == (105,)
    batch = EnvBatch("Ant-v5", 2, seed=0, env_kwargs={"include_cfrc_ext_in_observation": False})
    assert batch.obs.shape == (2, 27)
    batch.close()
    with pytest.raises(EnvironmentSpecError, match="env.kwargs: Hopper-v5 does not accept"):
        make_env("Hopper-v5", xml_file="/no/such/robot.xml")


def test_a_relative_model_path_that_names_no_file_from_here_says_where_it_was_read(
    tmp_path, monkeypatch
):
    """A checkpoint trained with ``xml_file: ./robot.xml`` and played from another folder: the
    line says the path is relative and from where it was read, not that the task refuses it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EnvironmentSpecError) as refused:
        make_env("Hopper-v5", xml_file="./robots/hopper.xml")
    assert str(refused.value) == (
        f"env.kwargs.xml_file: ./robots/hopper.xml: no such file from {tmp_path} (a relative "
        "path is read from the folder drl runs in); run drl from the folder the config was "
        "written for, or give the config an absolute path"
    )


def test_env_batch_resets_finished_episodes_in_the_same_step():
    batch = EnvBatch("InvertedPendulum-v5", num_envs=2, seed=0, max_episode_steps=5)
    reward_sums = np.zeros(2)
    finished: list[float] = []
    for step in range(5):
        result = batch.step(np.zeros((2, 1)))
        reward_sums += result.rewards
        finished += result.finished_returns
        done = result.terminated | result.truncated
        # Where the episode went on, the final observation is the next one.
        np.testing.assert_array_equal(result.final_obs[~done], result.next_obs[~done])
        if step < 4:
            assert not done.any()  # zero torque keeps the pole up for 5 steps
    assert result.truncated.all()  # the 5-step limit
    assert sorted(finished) == sorted(reward_sums.tolist())
    # Auto-reset: the policy sees a fresh episode, the final observation is the pre-reset one.
    assert not np.allclose(result.final_obs, result.next_obs)
    np.testing.assert_array_equal(batch.obs, result.next_obs)
    batch.close()


@pytest.mark.parametrize(("what", "message"), [("reset", "reset to"), ("obs", "returned")])
def test_env_batch_refuses_a_non_finite_first_or_stepped_observation(what, message):
    import tests.range_envs  # noqa: F401  (registers the task)

    env_id = tests.range_envs.NAN_ENV_ID
    with pytest.raises(TrainingError, match=f"^{env_id} {message} a non-finite observation$"):
        batch = EnvBatch(env_id, num_envs=2, seed=0, env_kwargs={"after": 1, "what": what})
        batch.step(np.zeros((2, 1)))


@pytest.mark.subprocess
def test_mujoco_warnings_become_python_warnings_and_leave_no_log_file(tmp_path):
    # gymnasium 1.4's HalfCheetah model uses a compiler attribute MuJoCo 4 deprecates.
    code = (
        "from drlcli.envs import make_env\n"
        "for _ in range(3):\n"
        "    make_env('HalfCheetah-v5').close()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("RuntimeWarning: MuJoCo: compiler attribute") == 1
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("Hopper-v5", {}),  # contacts: the solver's warm start is part of the state
        ("tests.user_robot:PuckReach-v0", {}),  # mocap target set on reset
        ("tests.range_envs:drltest/Ranged-v0", {"low": [-1.0], "high": [1.0]}),  # no MuJoCo
    ],
)
def test_an_env_state_through_a_checkpoint_continues_the_episode_bit_for_bit(env_id, kwargs):
    """``env_state`` taken mid-episode, written as a checkpoint holds it (tensors, weights_only)
    and loaded into a fresh env: the same steps, rewards, ends and resets follow."""
    import io

    import gymnasium
    import torch

    from drlcli.checkpoints.record import _to_tensors
    from drlcli.env_state import env_state, load_env_state

    original = gymnasium.make(env_id, max_episode_steps=60, **kwargs)
    restored = gymnasium.make(env_id, max_episode_steps=60, **kwargs)
    actions = np.random.default_rng(0).uniform(-1, 1, (200, *original.action_space.shape))
    original.reset(seed=3)
    restored.reset(seed=99)
    for action in actions[:37]:
        original.step(action)
    buffer = io.BytesIO()
    torch.save(_to_tensors(env_state(original)), buffer)
    buffer.seek(0)
    load_env_state(restored, torch.load(buffer, weights_only=True))
    for action in actions[37:]:  # past the time limit: the reset draws from the env's generator
        expected, got = original.step(action), restored.step(action)
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1:4] == expected[1:4]
        if expected[2] or expected[3]:
            np.testing.assert_array_equal(restored.reset()[0], original.reset()[0])


def test_an_env_state_of_another_task_is_refused():
    import gymnasium

    from drlcli.env_state import env_state, load_env_state

    hopper = gymnasium.make("Hopper-v5")
    hopper.reset(seed=0)
    pendulum = gymnasium.make("InvertedPendulum-v5")
    pendulum.reset(seed=0)
    with pytest.raises(ValueError, match="MuJoCo state does not fit"):
        load_env_state(pendulum, env_state(hopper))


def test_a_package_that_fails_while_making_its_task_is_one_line_that_never_blames_kwargs():
    import mujoco

    with pytest.raises(EnvironmentSpecError) as error:
        make_env("tests.range_envs:drltest/BrokenPackage-v0", env_name="reach-v3")
    message = str(error.value)
    assert message.startswith(
        "env.id: making tests.range_envs:drltest/BrokenPackage-v0 failed inside tests"
    )
    assert (
        f"under MuJoCo {mujoco.__version__} (ValueError: could not broadcast input array from "
        "shape (39,) into shape (36,)); the package may need another MuJoCo"
    ) in message
    assert "env.kwargs" not in message and "\n" not in message


def test_kwargs_a_task_does_not_take_are_still_blamed_on_env_kwargs():
    with pytest.raises(
        EnvironmentSpecError, match=r"env.kwargs: Hopper-v5 does not accept \{'wings"
    ):
        make_env("Hopper-v5", wings=2)

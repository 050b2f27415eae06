"""Gymnasium's own wrappers from the config (``env.wrappers``): names from gymnasium.wrappers
only, applied in order by every process that makes the task, recorded in the checkpoint and
rebuilt by play and export; resume under other wrappers is refused."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from drlcli.checkpoints.files import read_checkpoint
from drlcli.cli import app
from drlcli.config import EnvWrapperConfig, load_config
from drlcli.env_wrappers import apply_wrappers
from drlcli.envs import env_facts, make_env
from drlcli.errors import CheckpointError, EnvironmentSpecError, SemanticsError

STACKED = (
    EnvWrapperConfig("FrameStackObservation", {"stack_size": 3}),
    EnvWrapperConfig("FlattenObservation"),
)


def test_wrappers_apply_in_order_the_first_innermost():
    env = make_env("InvertedPendulum-v5", wrappers=STACKED)
    assert env_facts(env).obs_dim == 3 * 4
    obs, _ = env.reset(seed=0)
    # Gymnasium's default padding: the stack starts as three copies of the first frame.
    assert obs.shape == (12,) and (obs[:4] == obs[4:8]).all() and (obs[4:8] == obs[8:]).all()
    env.close()
    rescaled = make_env(
        "InvertedPendulum-v5",
        wrappers=[{"name": "RescaleAction", "kwargs": {"min_action": -1.0, "max_action": 1.0}}],
    )
    facts = env_facts(rescaled)
    assert facts.action_low.tolist() == [-1.0] and facts.action_high.tolist() == [1.0]


@pytest.mark.parametrize(
    ("wrapper", "message"),
    [
        (
            EnvWrapperConfig("FrameStack", {"stack_size": 3}),
            "env.wrappers[0]: 'FrameStack' is not a wrapper of gymnasium.wrappers (only those "
            "are taken, by name); did you mean FrameStackObservation?",
        ),
        (
            EnvWrapperConfig("os.system"),
            "env.wrappers[0]: 'os.system' is not a wrapper of gymnasium.wrappers",
        ),
        (
            EnvWrapperConfig("TimeLimit", {"max_episode_steps": 10}),
            "env.wrappers[0]: TimeLimit is refused: use env.max_episode_steps",
        ),
        (
            EnvWrapperConfig("Autoreset"),
            "env.wrappers[0]: Autoreset is refused: drl resets each environment itself",
        ),
        (
            EnvWrapperConfig("FrameStackObservation", {"stack_size": 3, "depth": 2}),
            "env.wrappers[0] FrameStackObservation: cannot wrap the task with {'stack_size': 3, "
            "'depth': 2} (TypeError:",
        ),
    ],
)
def test_a_wrapper_drl_does_not_take_is_one_line_naming_it(wrapper, message):
    with pytest.raises(EnvironmentSpecError) as error:
        make_env("InvertedPendulum-v5", wrappers=[wrapper])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_stacked_box_without_flattening_says_how_to_flatten_it():
    with pytest.raises(EnvironmentSpecError, match=r"\[\{name: FlattenObservation\}\]"):
        make_env("InvertedPendulum-v5", wrappers=STACKED[:1])


def test_apply_wrappers_takes_a_checkpoints_records():
    import gymnasium

    env = apply_wrappers(
        gymnasium.make("InvertedPendulum-v5"),
        [{"name": "FrameStackObservation", "kwargs": {"stack_size": 2}}],
    )
    assert env.observation_space.shape == (2, 4)


def wrapped_config(tmp_path, wrappers: str, total: int = 256):
    path = tmp_path / "run.yaml"
    path.write_text(
        f"algo: ppo\nenv: {{id: InvertedPendulum-v5, num_envs: 2, wrappers: {wrappers}}}\n"
        f"total_env_steps: {total}\nrollout_length: 64\noutput_dir: {tmp_path / 'out'}\n"
        "evaluation: {episodes: 1}\n"
        "algo_params: {num_epochs: 1, num_minibatches: 2, hidden_sizes: [8]}\n"
    )
    return path


STACKED_YAML = (
    "[{name: FrameStackObservation, kwargs: {stack_size: 3}}, {name: FlattenObservation}]"
)


@pytest.mark.usefixtures("ray_cluster")
def test_a_wrapped_task_trains_plays_exports_and_refuses_other_wrappers_on_resume(tmp_path):
    from drlcli.checkpoints.policy import load_play_actor
    from drlcli.evaluation import run_episodes
    from drlcli.export import export_onnx
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    no_gpu = AvailableDevices(cuda_devices=0, mps=False)
    config = load_config(wrapped_config(tmp_path, STACKED_YAML))
    train(config, quiet=True, devices=no_gpu)
    checkpoint = read_checkpoint(config.checkpoint_path)
    assert checkpoint.env.wrappers == [
        {"name": "FrameStackObservation", "kwargs": {"stack_size": 3}},
        {"name": "FlattenObservation", "kwargs": {}},
    ]
    assert checkpoint.actor_semantics["obs_dim"] == 12
    policy = load_play_actor(config.checkpoint_path)
    assert policy.facts.obs_dim == 12
    assert len(run_episodes(policy, episodes=1, seed=0)) == 1
    assert export_onnx(config.checkpoint_path, tmp_path / "policy.onnx").max_abs_error <= 1e-5

    before = config.checkpoint_path.read_bytes()
    other = load_config(
        wrapped_config(
            tmp_path,
            "[{name: FrameStackObservation, kwargs: {stack_size: 3}}, {name: FlattenObservation},"
            " {name: ClipReward, kwargs: {max_reward: 0.5}}]",
            total=512,
        )
    )
    with pytest.raises(SemanticsError, match="env.wrappers: checkpoint .* != config"):
        train(other, resume=config.checkpoint_path, quiet=True, devices=no_gpu)
    assert config.checkpoint_path.read_bytes() == before


def test_a_checkpoint_with_malformed_wrappers_is_refused(checkpoint_file):
    def modify(payload):
        payload["env"]["wrappers"] = [{"name": "FlattenObservation"}]

    with pytest.raises(CheckpointError, match="wrappers must be a list of"):
        read_checkpoint(checkpoint_file(modify))


def test_train_with_an_unknown_wrapper_is_one_line_before_anything_starts(tmp_path):
    result = CliRunner().invoke(
        app, ["train", str(wrapped_config(tmp_path, "[{name: NormaliseObservation}]"))]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: env.wrappers[0]: 'NormaliseObservation' is not a wrapper of gymnasium.wrappers "
        "(only those are taken, by name); did you mean NormalizeObservation?"
    ]
    assert not (tmp_path / "out").exists()


OFF_POLICY_PARAMS = {
    "sac": "{batch_size: 16, warmup_steps: 40, hidden_sizes: [16, 16]}",
    "flash_sac": (
        "{batch_size: 16, warmup_steps: 40, actor_hidden_dim: 16, actor_num_blocks: 1, "
        "critic_hidden_dim: 16, critic_num_blocks: 1, num_bins: 11}"
    ),
}


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("algo", sorted(OFF_POLICY_PARAMS))
def test_an_off_policy_history_is_a_frame_stack_that_trains_plays_and_exports(tmp_path, algo):
    """SAC's and FlashSAC's way to a history (they refuse algo_params.recurrent, ADR 0018):
    the stacked task of the refusal's message trains, plays and exports."""
    from drlcli.checkpoints.policy import load_play_actor
    from drlcli.evaluation import run_episodes
    from drlcli.export import export_onnx
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    path = tmp_path / "run.yaml"
    path.write_text(
        f"algo: {algo}\nenv: {{id: InvertedPendulum-v5, num_envs: 2, wrappers: "
        "[{name: FrameStackObservation, kwargs: {stack_size: 4}}, {name: FlattenObservation}]}\n"
        f"total_env_steps: 120\nrollout_length: 40\noutput_dir: {tmp_path / 'out'}\n"
        f"evaluation: {{episodes: 1}}\nalgo_params: {OFF_POLICY_PARAMS[algo]}\n"
    )
    config = load_config(path)
    train(config, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
    policy = load_play_actor(config.checkpoint_path)
    assert policy.facts.obs_dim == 4 * 4
    assert len(run_episodes(policy, episodes=1, seed=0)) == 1
    summary = export_onnx(config.checkpoint_path, tmp_path / "policy.onnx", parity_steps=50)
    assert summary.max_abs_error <= 1e-5 and summary.state_names == ()

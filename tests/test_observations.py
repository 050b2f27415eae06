"""Dict observations (Method.md, "Observations"): the layout of a nested Dict, the flat vector
every process reads, and a Dict task trained, resumed, verified, played and exported."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from gymnasium import spaces
from typer.testing import CliRunner

import tests.dict_envs  # noqa: F401  (registers drltest/DictReach-v0)
from drlcli.checkpoints.audit import audit_checkpoint
from drlcli.checkpoints.files import read_checkpoint
from drlcli.cli import app
from drlcli.config import load_config
from drlcli.envs import env_facts, make_env
from drlcli.errors import CheckpointError, EnvironmentSpecError, SemanticsError
from drlcli.observations import (
    ObservationField,
    flatten,
    layout_from_record,
    layout_of,
    layout_record,
)

DICT_REACH = "tests.dict_envs:drltest/DictReach-v0"
PLANE = spaces.Box(-5.0, 5.0, shape=(2,))
NESTED = spaces.Dict(
    {
        "target": PLANE,
        "agent": spaces.Dict({"velocity": PLANE, "position": PLANE}),
        "time_left": spaces.Box(0.0, 1.0, shape=()),
        "grid": spaces.Box(0.0, 1.0, shape=(2, 3)),
    }
)


def test_a_nested_dict_is_read_as_every_part_sorted_by_path():
    layout = layout_of(NESTED, None, "task")
    assert layout == (
        ObservationField("agent/position", (2,), 0, 2),
        ObservationField("agent/velocity", (2,), 2, 4),
        ObservationField("grid", (2, 3), 4, 10),
        ObservationField("target", (2,), 10, 12),
        ObservationField("time_left", (), 12, 13),
    )


def test_observation_keys_pick_and_order_the_parts_and_flatten_in_c_order():
    layout = layout_of(NESTED, ["time_left", "grid", "agent"], "task")
    assert [field.key for field in layout] == [
        "time_left",
        "grid",
        "agent/position",
        "agent/velocity",
    ]
    observation = {
        "target": np.array([9.0, 9.0]),
        "agent": {"velocity": np.array([3.0, 4.0]), "position": np.array([1.0, 2.0])},
        "time_left": np.float32(0.5),
        "grid": np.array([[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]]),
    }
    flat = flatten(observation, layout)
    assert flat.dtype == np.float64
    np.testing.assert_array_equal(
        flat, [0.5, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 1.0, 2.0, 3.0, 4.0]
    )


@pytest.mark.parametrize(
    ("keys", "space", "message"),
    [
        (
            ["target", "agent/speed"],
            NESTED,
            "env.observation_keys: task has no observation key 'agent/speed'; its keys are "
            "agent/position, agent/velocity, grid, target, time_left",
        ),
        (["agent", "agent/position"], NESTED, "'agent/position' is named twice"),
        (
            None,
            spaces.Dict({"mode": spaces.Discrete(3), "x": PLANE}),
            "observation key 'mode' is Discrete(3); drl reads Box parts only",
        ),
    ],
)
def test_keys_that_do_not_fit_the_space_are_one_line(keys, space, message):
    with pytest.raises(EnvironmentSpecError) as error:
        layout_of(space, keys, "task")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_make_env_reads_a_dict_task_as_its_flat_vector():
    env = make_env(DICT_REACH, observation_keys=["target", "agent/position"])
    flat, _ = env.reset(seed=4)
    raw, _ = env.unwrapped.reset(seed=4)
    np.testing.assert_array_equal(flat, np.concatenate([raw["target"], raw["agent"]["position"]]))
    facts = env_facts(env)
    assert facts.obs_dim == 4 and [f.key for f in facts.observation_layout] == [
        "target",
        "agent/position",
    ]
    assert env.observation_space.contains(flat)
    env.close()
    assert env_facts(make_env("InvertedPendulum-v5")).observation_layout is None
    with pytest.raises(
        EnvironmentSpecError,
        match=r"env.observation_keys: 'qpos' is not a part of the observation of "
        r"InvertedPendulum-v5, a Box of 4 entries; name its parts as slices 'start:stop'",
    ):
        make_env("InvertedPendulum-v5", observation_keys=["qpos"])


def test_a_layout_record_round_trips_and_a_malformed_one_is_refused():
    layout = layout_of(NESTED, None, "task")
    assert layout_from_record(json.loads(json.dumps(layout_record(layout)))) == layout
    assert layout_from_record(None) is None and layout_record(None) is None
    broken = layout_record(layout)
    broken[1]["start"] = 3  # a gap after the first part
    with pytest.raises(ValueError, match="does not follow its predecessor"):
        layout_from_record(broken)


def dict_config(tmp_path, algo: str, extra_env: str = "", total: int = 160, name: str = "run"):
    params = {
        "ppo": "{num_epochs: 1, num_minibatches: 2, hidden_sizes: [16]}",
        "sac": "{batch_size: 16, warmup_steps: 20, hidden_sizes: [16]}",
        "flash_sac": "{batch_size: 16, warmup_steps: 20, actor_hidden_dim: 8, actor_num_blocks: "
        "1, critic_hidden_dim: 8, critic_num_blocks: 1, num_bins: 11}",
    }[algo]
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"algo: {algo}\nenv: {{id: '{DICT_REACH}', num_envs: 2{extra_env}}}\n"
        f"total_env_steps: {total}\nrollout_length: 40\nevaluation: {{episodes: 1}}\n"
        f"output_dir: {tmp_path / 'out'}\nalgo_params: {params}\n"
    )
    return path


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("algo", ["ppo", "sac", "flash_sac"])
def test_a_dict_task_trains_verifies_plays_and_exports(tmp_path, algo):
    from drlcli.checkpoints.policy import load_play_actor
    from drlcli.evaluation import run_episodes
    from drlcli.export import export_onnx
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    config = load_config(dict_config(tmp_path, algo))
    summary = train(config, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
    assert summary.rounds == 2
    checkpoint = read_checkpoint(config.checkpoint_path)
    assert [entry["key"] for entry in checkpoint.env.observation_layout] == [
        "agent/position",
        "agent/velocity",
        "target",
        "time_left",
    ]
    assert checkpoint.actor_semantics["obs_dim"] == 7
    report = audit_checkpoint(config.checkpoint_path)
    assert not report.failed, report.checks
    check = next(c for c in report.checks if c.name == "observation layout")
    assert check.detail == (
        "the policy (and its export) reads 4 parts: agent/position[2], agent/velocity[2], "
        "target[2], time_left[1]"
    )

    policy = load_play_actor(config.checkpoint_path, allow_env_modules=["tests.dict_envs"])
    (episode,) = run_episodes(policy, episodes=1, seed=0)
    assert episode.length == tests.dict_envs.EPISODE_STEPS

    # One export and one resume are enough: the layout is the same record for all three.
    if algo == "ppo":
        out = tmp_path / "policy.onnx"
        export_onnx(config.checkpoint_path, out, allow_env_modules=["tests.dict_envs"])
        metadata = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
        assert json.loads(metadata["drl.observation_layout"]) == [
            {"key": "agent/position", "shape": [2], "start": 0, "stop": 2},
            {"key": "agent/velocity", "shape": [2], "start": 2, "stop": 4},
            {"key": "target", "shape": [2], "start": 4, "stop": 6},
            {"key": "time_left", "shape": [], "start": 6, "stop": 7},
        ]
        assert_resume_under_other_observation_keys_is_refused_and_writes_nothing(tmp_path, config)


def assert_resume_under_other_observation_keys_is_refused_and_writes_nothing(tmp_path, config):
    """``config``: the PPO dict task, trained."""
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    no_gpu = AvailableDevices(cuda_devices=0, mps=False)
    before = config.checkpoint_path.read_bytes()
    reordered = load_config(
        dict_config(
            tmp_path, "ppo", ", observation_keys: [target, agent, time_left]", total=320, name="run"
        )
    )
    with pytest.raises(SemanticsError) as error:
        train(reordered, resume=config.checkpoint_path, quiet=True, devices=no_gpu)
    message = str(error.value)
    assert "\n" not in message
    assert (
        "observation: checkpoint agent/position[2], agent/velocity[2], target[2], time_left[1] "
        "!= env target[2], agent/position[2], agent/velocity[2], time_left[1]"
    ) in message
    assert config.checkpoint_path.read_bytes() == before
    # The same parts named explicitly in the stored order: the layout is equal, resume goes on.
    same = load_config(
        dict_config(
            tmp_path, "ppo", ", observation_keys: [agent, target, time_left]", total=320, name="run"
        )
    )
    assert train(same, resume=config.checkpoint_path, quiet=True, devices=no_gpu).rounds == 4


def test_a_checkpoint_with_a_malformed_layout_is_refused(checkpoint_file):
    def modify(payload):
        payload["env"]["observation_layout"] = [{"key": "a", "shape": [3], "start": 0, "stop": 3}]

    with pytest.raises(CheckpointError, match="observation_layout ends at 3, the observation has"):
        read_checkpoint(checkpoint_file(modify))


def test_train_with_an_unknown_observation_key_is_one_line_before_anything_starts(tmp_path):
    path = dict_config(tmp_path, "ppo", ", observation_keys: [target, gripper]")
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        f"error: env.observation_keys: {DICT_REACH} has no observation key 'gripper'; "
        "its keys are agent/position, agent/velocity, target, time_left"
    ]
    assert not (tmp_path / "out").exists()


def test_a_dict_task_is_the_flat_vector_in_the_dry_run(tmp_path):
    path = dict_config(tmp_path, "sac")
    result = CliRunner().invoke(app, ["train", str(path), "--dry-run"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "agent/position [0:2], agent/velocity [2:4], target [4:6], time_left [6:7]" in (
        " ".join(result.output.split())
    )


def test_gymnasium_sorts_a_plain_dicts_keys_but_drl_sorts_paths_itself():
    """drl's default order is by path, whatever order a space keeps its keys in."""
    from collections import OrderedDict

    unsorted = spaces.Dict(OrderedDict([("b", PLANE), ("a", PLANE)]))
    assert list(unsorted.spaces) == ["b", "a"]
    assert [f.key for f in layout_of(unsorted, None, "task")] == ["a", "b"]

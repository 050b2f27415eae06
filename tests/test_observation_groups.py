"""Observation groups and a privileged critic (Method.md, "Observation groups"): the training
vector, what the policy and the critic read of it, the checkpoint's record, play, verify and
export on the policy group only, resume and bad input. That the critic's extra input makes
learning faster is a learning claim: ``scripts/bench/learning_claims.py privileged-critic``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
import torch
from gymnasium import spaces
from typer.testing import CliRunner

import tests.dict_envs  # noqa: F401  (registers drltest/DictReach-v0, drltest/HiddenBonus-v0)
from drlcli.checkpoints.audit import audit_checkpoint
from drlcli.checkpoints.files import read_checkpoint, write_checkpoint
from drlcli.cli import app
from drlcli.config import config_from_dict, load_config
from drlcli.envs import env_facts, make_task_env
from drlcli.errors import ConfigError, EnvironmentSpecError, SemanticsError
from drlcli.observations import GroupReader, ObservationGroups, groups_of, layout_of

DICT_REACH = "tests.dict_envs:drltest/DictReach-v0"
ALLOW = ["tests.dict_envs"]
PLANE = spaces.Box(-5.0, 5.0, shape=(2,))
SPACE = spaces.Dict(
    {
        "target": PLANE,
        "agent": spaces.Dict({"velocity": PLANE, "position": PLANE}),
        "friction": spaces.Box(0.0, 1.0, shape=()),
    }
)


# --- the training vector ----------------------------------------------------------------------


def test_the_training_vector_holds_the_policy_group_first_then_what_only_the_critic_reads():
    groups = groups_of(SPACE, ["target", "agent/position"], ["agent", "target", "friction"], "t")
    assert [f.key for f in groups.layout] == [
        "target",
        "agent/position",
        "agent/velocity",
        "friction",
    ]
    assert groups.policy_dim == 4 and groups.critic_only_keys == ("agent/velocity", "friction")
    # The critic's own order: agent/position, agent/velocity, target, friction.
    np.testing.assert_array_equal(groups.critic_positions(), [2, 3, 4, 5, 0, 1, 6])
    assert groups.critic_dim == 7
    observations = np.arange(14.0).reshape(2, 7)
    reader = GroupReader(groups)
    np.testing.assert_array_equal(reader.policy(observations), observations[:, :4])
    np.testing.assert_array_equal(
        reader.critic(observations), observations[:, [2, 3, 4, 5, 0, 1, 6]]
    )
    tensor = torch.as_tensor(observations)
    torch.testing.assert_close(
        GroupReader(groups, "cpu").critic(tensor), tensor[:, [2, 3, 4, 5, 0, 1, 6]]
    )


def test_a_critic_that_reads_the_policy_group_and_more_reads_a_view_not_a_copy():
    groups = groups_of(SPACE, ["target"], ["target", "friction"], "t")
    reader = GroupReader(groups, "cpu")
    assert reader.critic_selection == slice(0, 3)
    observations = torch.zeros(5, 3)
    assert reader.critic(observations).data_ptr() == observations.data_ptr()
    same = groups_of(SPACE, ["target"], None, "t")  # critic default: the policy's
    assert same.critic_keys == ("target",) and same.critic_dim == same.policy_dim == 2
    plain = GroupReader(None)
    assert plain.policy(observations) is observations and plain.critic(observations) is observations


def test_a_flat_box_is_named_by_slices():
    box = spaces.Box(-1.0, 1.0, shape=(17,))
    layout = layout_of(box, ["0:5", "8", "11:"], "Walker")
    assert [(f.key, f.start, f.stop) for f in layout] == [
        ("0:5", 0, 5),
        ("8:9", 5, 6),
        ("11:17", 6, 12),
    ]
    groups = groups_of(box, ["0:8"], ["0:17"], "Walker")  # overlapping slices are both read
    assert groups.policy_dim == 8 and groups.critic_dim == 17 and groups.layout[-1].stop == 25
    for bad in ("0:18", "5:5", "-1:3", "qpos", "1:2:3"):
        with pytest.raises(EnvironmentSpecError) as error:
            layout_of(box, [bad], "Walker", "env.observation_groups.critic")
        assert str(error.value).startswith(
            f"env.observation_groups.critic: {bad!r} is not a part of the observation of "
            "Walker, a Box of 17 entries; name its parts as slices 'start:stop'"
        )
    with pytest.raises(EnvironmentSpecError, match="'0:5' is named twice"):
        layout_of(box, ["0:5", ":5"], "Walker")


def test_a_key_the_task_does_not_have_names_its_group():
    with pytest.raises(EnvironmentSpecError) as error:
        groups_of(SPACE, ["target"], ["target", "mass"], "Reach")
    assert str(error.value) == (
        "env.observation_groups.critic: Reach has no observation key 'mass'; its keys are "
        "agent/position, agent/velocity, friction, target"
    )


def test_the_groups_record_round_trips_and_a_damaged_one_is_refused():
    groups = groups_of(SPACE, ["target"], ["agent", "friction"], "t")
    assert ObservationGroups.from_record(groups.to_record()) == groups
    assert ObservationGroups.from_record(None) is None
    record = groups.to_record()
    for change, message in (
        ({"policy_parts": 0}, "policy_parts 0 out of range"),
        ({"policy_parts": 9}, "policy_parts 9 out of range"),
        ({"critic": ["agent/position", "mass"]}, "is not parts of the layout"),
        ({"critic": ["agent/position"]}, "no group reads"),
        ({"layout": None}, "policy_parts 1 out of range"),
    ):
        with pytest.raises(ValueError, match=message):
            ObservationGroups.from_record({**record, **change})


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"observation_groups": {"policy": []}},
            "env.observation_groups.policy: empty; the policy must read at least one part",
        ),
        (
            {"observation_groups": {"policy": ["a"], "critic": []}},
            "env.observation_groups.critic: empty; leave it out to give the critic the "
            "policy's parts",
        ),
        (
            {"observation_keys": ["a"], "observation_groups": {"policy": ["a"]}},
            "env.observation_keys: set observation_groups.policy instead",
        ),
        (
            {"observation_groups": {"policy": ["0:11"], "critic": [677]}},
            "env.observation_groups.critic[0]: 677 is a number; quote a slice ('11:17'",
        ),
        (
            {"observation_groups": {"policy": ["a"], "critc": ["b"]}},
            "env.observation_groups.critc: unknown key; did you mean 'critic'?",
        ),
        ({"observation_groups": {"critic": ["a"]}}, "env.observation_groups.policy: required"),
        ({"observation_keys": []}, "env.observation_keys: empty; name at least one part"),
    ],
)
def test_bad_groups_in_a_config_are_one_line(env, message):
    with pytest.raises(ConfigError) as error:
        config_from_dict({"env": env})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_policy_view_of_a_config_reads_the_policy_group_only():
    config = config_from_dict(
        {"env": {"id": DICT_REACH, "observation_groups": {"policy": ["target"]}}}
    )
    assert config.env.observation_groups.critic is None
    view = config.env.policy_view()
    assert view.observation_keys == ("target",) and view.observation_groups is None
    training = env_facts(make_task_env(config.env))
    assert training.observation_groups is not None and training.policy_dim == 2
    policy = env_facts(make_task_env(view))
    expected = training.policy_facts()
    assert policy.obs_dim == expected.obs_dim == 2 and policy.observation_groups is None
    assert policy.observation_layout == expected.observation_layout


# --- training, play, verify, export ----------------------------------------------------------


def group_config(tmp_path, algo, groups, total=160, name="run", env_id=DICT_REACH, extra=""):
    params = {
        "ppo": "{num_epochs: 1, num_minibatches: 2, hidden_sizes: [16]}",
        "sac": "{batch_size: 16, warmup_steps: 20, hidden_sizes: [16]}",
        "flash_sac": "{batch_size: 16, warmup_steps: 20, critic_hidden_dim: 8, "
        "critic_num_blocks: 1, num_bins: 11, actor_config: {builder: "
        "'tests.custom_actors:build', kwargs: {action_low: [-1.0, -1.0], action_high: [1.0, "
        "1.0], hidden_dim: 8}}}",
    }[algo]
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"algo: {algo}\nenv: {{id: '{env_id}', num_envs: 2, {groups}}}\n"
        f"total_env_steps: {total}\nrollout_length: 40\nevaluation: {{episodes: 1}}\n"
        f"output_dir: {tmp_path / 'out'}\nalgo_params: {params}\n{extra}"
    )
    return path


PRIVILEGED = (
    "observation_groups: {policy: [agent/position, target], critic: [agent, target, time_left]}"
)


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("algo", ["ppo", "sac", "flash_sac"])
def test_a_privileged_critic_trains_and_everything_after_training_reads_the_policy_group(
    tmp_path, algo
):
    from drlcli.checkpoints.policy import load_play_actor
    from drlcli.evaluation import run_episodes
    from drlcli.export import export_onnx
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    config = load_config(group_config(tmp_path, algo, PRIVILEGED))
    summary = train(config, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
    assert summary.rounds == 2 and summary.final_evaluation is not None
    checkpoint = read_checkpoint(config.checkpoint_path)
    # The policy's view: 4 entries (a custom FlashSAC actor's builder was given 4 too).
    assert checkpoint.actor_semantics["obs_dim"] == 4
    assert checkpoint.env.observation_shape == [4]
    assert [f["key"] for f in checkpoint.env.observation_layout] == ["agent/position", "target"]
    groups = checkpoint.env.training_groups()
    assert groups.critic_only_keys == ("agent/velocity", "time_left")
    assert groups.critic_dim == 7
    # The value network reads 7 entries; the Q networks 7 and the 2 of the action.
    critic = checkpoint.learner_states[0]["value" if algo == "ppo" else "critic"]
    input_width = 7 if algo == "ppo" else 9
    widths = {tensor.shape[-1] for tensor in critic.values() if tensor.ndim >= 2}
    assert input_width in widths and input_width - 3 not in widths, widths
    if algo == "ppo":
        assert checkpoint.obs_rms_state["mean"].shape == (4,)
        training_mean = checkpoint.training_obs_rms_state["mean"]
        assert training_mean.shape == (7,)
        torch.testing.assert_close(training_mean[:4], checkpoint.obs_rms_state["mean"])
        # Statistics whose policy part is not the checkpoint's own: verify fails the file.
        moved = training_mean.clone()
        moved[0] += 1.0
        damaged = tmp_path / "damaged.pt"
        training = {**checkpoint.training_obs_rms_state, "mean": moved}
        write_checkpoint(damaged, dataclasses.replace(checkpoint, training_obs_rms_state=training))
        (check,) = [c for c in audit_checkpoint(damaged).checks if "statistics" in c.name]
        assert check.status == "FAIL"
        assert check.detail == "obs_rms_state.mean is not the policy's part of the training one"
    else:
        assert checkpoint.obs_rms_state is None and checkpoint.training_obs_rms_state is None

    report = audit_checkpoint(config.checkpoint_path)
    assert not report.failed, report.checks
    check = next(c for c in report.checks if c.name == "observation layout")
    assert check.detail == (
        "the policy (and its export) reads 2 parts: agent/position[2], target[2]; the critic "
        "reads 7 entries, also agent/velocity, time_left"
    )

    allow = {"allow_env_modules": ALLOW}
    if algo == "flash_sac":
        allow["allow_builders"] = ["tests.custom_actors"]
    policy = load_play_actor(config.checkpoint_path, **allow)
    assert policy.facts.obs_dim == 4 and policy.observation_keys == ("agent/position", "target")
    (episode,) = run_episodes(policy, episodes=1, seed=0)
    assert episode.length == tests.dict_envs.EPISODE_STEPS

    if algo != "sac":  # the export reads the same record for every algorithm
        out = tmp_path / "policy.onnx"
        export_onnx(config.checkpoint_path, out, **allow)
        model = onnx.load(str(out))
        width = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
        assert width == 4
        metadata = {p.key: p.value for p in model.metadata_props}
        assert [f["key"] for f in json.loads(metadata["drl.observation_layout"])] == [
            "agent/position",
            "target",
        ]
    if algo == "ppo":  # the groups' resume checks are the same record for every algorithm
        assert_resume_keeps_the_groups_and_refuses_another_critic_without_writing(tmp_path, config)


@pytest.mark.usefixtures("ray_cluster")
def test_a_box_task_groups_its_slices_and_plays_them(tmp_path):
    from drlcli.checkpoints.policy import load_play_actor
    from drlcli.evaluation import run_episodes
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    config = load_config(
        group_config(
            tmp_path,
            "ppo",
            "observation_groups: {policy: ['0:2'], critic: ['0:4']}",
            env_id="InvertedPendulum-v5",
        )
    )
    train(config, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
    checkpoint = read_checkpoint(config.checkpoint_path)
    assert checkpoint.actor_semantics["obs_dim"] == 2
    assert checkpoint.env.observation_layout == [
        {"key": "0:2", "shape": [2], "start": 0, "stop": 2}
    ]
    policy = load_play_actor(config.checkpoint_path)
    assert policy.facts.obs_dim == 2
    (episode,) = run_episodes(policy, episodes=1, seed=0)
    assert episode.length >= 1


def assert_resume_keeps_the_groups_and_refuses_another_critic_without_writing(tmp_path, config):
    """``config``: the PPO task with ``PRIVILEGED`` groups, trained."""
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    no_gpu = AvailableDevices(cuda_devices=0, mps=False)
    before = config.checkpoint_path.read_bytes()
    other = "observation_groups: {policy: [agent/position, target], critic: [agent, target]}"
    changed = load_config(group_config(tmp_path, "ppo", other, total=320))
    with pytest.raises(SemanticsError) as error:
        train(changed, resume=config.checkpoint_path, quiet=True, devices=no_gpu)
    message = str(error.value)
    assert "\n" not in message
    assert (
        "env.observation_groups: checkpoint critic agent/position, agent/velocity, target, "
        "time_left != config critic agent/position, agent/velocity, target (the critic's "
        "inputs would change)"
    ) in message
    assert config.checkpoint_path.read_bytes() == before
    # Without groups the policy reads the same parts, but the critic would lose its own.
    plain = load_config(
        group_config(tmp_path, "ppo", "observation_keys: [agent/position, target]", total=320)
    )
    with pytest.raises(SemanticsError, match="env.observation_groups: checkpoint critic"):
        train(plain, resume=config.checkpoint_path, quiet=True, devices=no_gpu)
    same = load_config(group_config(tmp_path, "ppo", PRIVILEGED, total=320))
    assert train(same, resume=config.checkpoint_path, quiet=True, devices=no_gpu).rounds == 4
    resumed = read_checkpoint(config.checkpoint_path)
    assert resumed.training_obs_rms_state["count"] > read_checkpoint_count(before)


def read_checkpoint_count(payload_bytes: bytes) -> float:
    import io

    payload = torch.load(io.BytesIO(payload_bytes), weights_only=False)
    return float(payload["training_obs_rms_state"]["count"])


def test_a_group_key_the_task_lacks_is_one_line_before_anything_starts(tmp_path):
    path = group_config(
        tmp_path, "ppo", "observation_groups: {policy: [target], critic: [target, mass]}"
    )
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0] == (
        f"error: env.observation_groups.critic: {DICT_REACH} has no observation key 'mass'; its "
        "keys are agent/position, agent/velocity, target, time_left"
    )
    assert not (tmp_path / "out").exists()


def test_the_dry_run_lists_what_each_group_reads(tmp_path):
    result = CliRunner().invoke(
        app, ["train", str(group_config(tmp_path, "ppo", PRIVILEGED)), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "policy reads │ 4: agent/position[2], target[2] (exported)" in text
    assert "critic reads │ 7: agent/position, agent/velocity, target, time_left" in text


# --- what each network is fed -------------------------------------------------------------------

# A Box of 5: the policy reads entries 0-1, the critic 2-4 then 0-1 (a gather, not a view).
BOX_GROUPS = groups_of(spaces.Box(-1.0, 1.0, shape=(5,)), ["0:2"], ["2:5", "0:2"], "t")
CRITIC_ORDER = [2, 3, 4, 0, 1]


def recorded_inputs(module: torch.nn.Module) -> list[torch.Tensor]:
    """The first argument of every call of ``module`` from now on."""
    calls: list[torch.Tensor] = []
    module.register_forward_pre_hook(lambda _, args: calls.append(args[0].detach().clone()))
    return calls


@pytest.mark.parametrize("algo", ["sac", "flash_sac"])
def test_an_off_policy_update_feeds_the_actor_the_policy_group_and_the_critic_its_own(algo):
    from drlcli.algos.flash_sac.algorithm import flash_sac_actor_spec
    from drlcli.algos.flash_sac.learner import FlashSACLearner
    from drlcli.algos.flash_sac.params import FlashSACParams
    from drlcli.algos.sac.algorithm import sac_actor_spec
    from drlcli.algos.sac.learner import SACLearner
    from drlcli.algos.sac.params import SACParams
    from drlcli.env_facts import EnvFacts
    from drlcli.off_policy.replay import TransitionReplay
    from tests.learner_contexts import learner_context

    low, high = [-1.0], [1.0]
    facts = EnvFacts("t", 5, 1, np.array(low), np.array(high), observation_groups=BOX_GROUPS)
    if algo == "sac":
        params = SACParams(batch_size=8, hidden_sizes=(8,), actor_update_period=1)
        spec = sac_actor_spec(params, low, high)
        learner = SACLearner(learner_context(spec, facts, params))
    else:
        params = FlashSACParams(
            batch_size=8,
            actor_hidden_dim=8,
            actor_num_blocks=1,
            critic_hidden_dim=8,
            critic_num_blocks=1,
            num_bins=11,
        )
        spec = flash_sac_actor_spec(params, low, high)
        learner = FlashSACLearner(learner_context(spec, facts, params, updates=10))
    actor_inputs = recorded_inputs(learner.actor)
    critic_calls = recorded_inputs(learner.critic)
    target_inputs = recorded_inputs(learner.target_critic)
    rng = np.random.default_rng(0)
    replay = TransitionReplay(64, 5, 1, 0)
    replay.add(
        rng.normal(size=(64, 5)),
        rng.uniform(-1, 1, (64, 1)),
        rng.normal(size=64),
        rng.normal(size=(64, 5)),
        rng.random(64) < 0.2,
    )
    batch = replay.sample(8, reward_scale=1.0, device=torch.device("cpu"))
    learner.update(batch)
    obs, next_obs = batch["obs"], batch["next_obs"]
    both = torch.cat([obs, next_obs])
    policy_views = [obs[:, :2], next_obs[:, :2], both[:, :2]]
    critic_views = [v[:, CRITIC_ORDER] for v in (obs, next_obs, both)]
    assert actor_inputs and critic_calls and target_inputs
    for seen in actor_inputs:
        assert any(torch.equal(seen, view) for view in policy_views), seen.shape
    for seen in critic_calls + target_inputs:
        assert any(torch.equal(seen, view) for view in critic_views), seen.shape


def test_ppos_closed_form_update_with_a_privileged_critic_matches_autograd():
    from drlcli.algos.ppo.algorithm import gaussian_actor_spec
    from drlcli.algos.ppo.learner import Learner
    from drlcli.algos.ppo.params import PPOParams

    params = PPOParams(num_epochs=2, num_minibatches=2, hidden_sizes=(8,))
    spec = gaussian_actor_spec(params, [-1.0], [1.0])
    learners = [
        Learner(spec, 5, 1, params, seed=3, closed_form=flag, groups=BOX_GROUPS)
        for flag in (True, False)
    ]
    assert learners[0].closed_form is not None and learners[1].closed_form is None
    value_inputs = recorded_inputs(learners[1].value_network)
    rng = np.random.default_rng(0)
    data = {
        "obs": rng.standard_normal((32, 5)).astype(np.float32),
        "act": rng.standard_normal((32, 1)).astype(np.float32),
        "logp": np.full(32, -1.0, dtype=np.float32),
        "value": rng.standard_normal(32).astype(np.float32),
        "adv": rng.standard_normal(32).astype(np.float32),
        "ret": rng.standard_normal(32).astype(np.float32),
    }
    results = []
    for learner in learners:
        learner.add({k: v.copy() for k, v in data.items()})
        results.append(learner.train_step(0.0))
    (state, _), (reference, _) = results
    for part in ("actor", "value"):
        for name, value in state[part].items():
            torch.testing.assert_close(value, reference[part][name], rtol=1e-4, atol=1e-5)
    assert state["actor"]["mean_network.0.weight"].shape == (8, 2)
    assert state["value"]["network.0.weight"].shape[1] == 5
    rows = {tuple(row) for row in data["obs"][:, CRITIC_ORDER].tolist()}
    assert all(tuple(row) in rows for call in value_inputs for row in call.tolist())

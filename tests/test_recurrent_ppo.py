"""Recurrent PPO (ADR 0018, Method.md "Recurrent policies"): the learner's masked sequence loss
against a loop over steps, the rollout actor's memory, and the evaluator's state resets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drlcli.algos.ppo.algorithm import gaussian_actor_spec
from drlcli.algos.ppo.learner import Learner
from drlcli.algos.ppo.params import PPOParams, RecurrentParams
from drlcli.algos.ppo.sequences import cut_into_chunks, time_major
from drlcli.config import EnvConfig
from drlcli.envs import make_env
from drlcli.errors import CheckpointError
from drlcli.evaluation import FrozenPolicy, run_episodes
from drlcli.runtime.mujoco_actor import MuJoCoActor
from drlcli.runtime.run_context import RolloutActorContext

OBS, ACTIONS = 3, 2


def recurrent_params(cell: str, sequence_length: int = 32, **changes) -> PPOParams:
    core = RecurrentParams(cell=cell, size=6, layers=1, sequence_length=sequence_length)
    return PPOParams(hidden_sizes=(8,), num_minibatches=1, recurrent=core, **changes)


def learner_of(params: PPOParams, obs_dim: int = OBS, action_dim: int = ACTIONS) -> Learner:
    spec = gaussian_actor_spec(params, [-1.0] * action_dim, [1.0] * action_dim)
    return Learner(spec, obs_dim, action_dim, params, seed=0)


def stored_state(state: torch.Tensor) -> torch.Tensor:
    """A core's state of ``B`` environments as a trajectory stores it, ``[B, *state]``."""
    return state.movedim(-2, 0)


def keep_where(state: torch.Tensor, envs: torch.Tensor, replacement: torch.Tensor) -> torch.Tensor:
    """``state`` of ``N`` envs with ``replacement``'s where ``envs [N]`` is true."""
    selected = envs.view(*([1] * (state.dim() - 2)), -1, 1)
    return torch.where(selected, replacement, state)


def synthetic_rollout(learner: Learner, steps: int, envs: int, seed: int) -> dict:
    """A rollout as ``MuJoCoActor.sample`` writes one, made by stepping the learner's own cores
    with resets at random episode starts (one inside each env's first chunk at least); the
    stored log-probs are moved off the policy's so that ratios differ from 1 and clip."""
    rng = np.random.default_rng(seed)
    obs = torch.as_tensor(rng.normal(size=(steps, envs, OBS)), dtype=torch.float32)
    actions = torch.as_tensor(rng.normal(size=(steps, envs, ACTIONS)), dtype=torch.float32)
    starts = rng.random((steps, envs)) < 0.15
    starts[0] = True
    starts[3, 0] = True  # an episode starts inside a chunk
    actor, value = learner.actor, learner.value_network
    policy_state = actor.core.initial_state(envs)
    value_state = value.core.initial_state(envs)
    policy_before, value_before, log_probs = [], [], []
    with torch.no_grad():
        for t in range(steps):
            reset = torch.as_tensor(starts[t])
            policy_state = actor.core.reset(policy_state, reset)
            value_state = value.core.reset(value_state, reset)
            policy_before.append(stored_state(policy_state).clone())
            value_before.append(stored_state(value_state).clone())
            features, policy_state = actor.core.step(obs[t], policy_state)
            mean = actor.mean_network(features)
            normal = torch.distributions.Normal(mean, actor.log_std.exp())
            log_probs.append(normal.log_prob(actions[t]).sum(-1))
            _, value_state = value.step(obs[t], value_state)
    count = steps * envs
    return {
        "obs": obs.reshape(count, OBS).numpy(),
        "act": actions.reshape(count, ACTIONS).numpy(),
        "logp": (
            torch.stack(log_probs).reshape(count).numpy() + rng.normal(size=count) * 0.3
        ).astype(np.float32),
        "value": rng.normal(size=count).astype(np.float32),
        "adv": rng.normal(size=count).astype(np.float32),
        "ret": rng.normal(size=count).astype(np.float32),
        "episode_start": starts,
        "policy_state": torch.stack(policy_before)
        .reshape(count, *policy_before[0].shape[1:])
        .numpy(),
        "value_state": torch.stack(value_before).reshape(count, *value_before[0].shape[1:]).numpy(),
    }


def unrolled_loss(learner: Learner, rollout: dict, steps: int, envs: int) -> tuple:
    """The PPO loss of every step by a loop over time, as a reader of the paper writes it: the
    states carried from step to step, zeroed at episode starts and cut from the gradient where
    a training chunk begins (truncated BPTT); the means over all the round's steps."""
    params, actor, value = learner.params, learner.actor, learner.value_network
    chunk_begins = np.zeros((steps, envs), dtype=bool)
    for first in cut_into_chunks(rollout["episode_start"], params.recurrent.sequence_length).first:
        chunk_begins[first // envs, first % envs] = True
    obs = torch.as_tensor(rollout["obs"]).view(steps, envs, OBS)
    actions = torch.as_tensor(rollout["act"]).view(steps, envs, ACTIONS)
    policy_state = actor.core.initial_state(envs)
    value_state = value.core.initial_state(envs)
    log_probs, entropies, values = [], [], []
    for t in range(steps):
        starts = torch.as_tensor(rollout["episode_start"][t])
        begins = torch.as_tensor(chunk_begins[t])
        policy_state = keep_where(policy_state, begins, policy_state.detach())
        value_state = keep_where(value_state, begins, value_state.detach())
        policy_state = actor.core.reset(policy_state, starts)
        value_state = value.core.reset(value_state, starts)
        features, policy_state = actor.core.step(obs[t], policy_state)
        normal = torch.distributions.Normal(actor.mean_network(features), actor.log_std.exp())
        log_probs.append(normal.log_prob(actions[t]).sum(-1))
        entropies.append(normal.entropy().sum(-1))
        step_values, value_state = value.step(obs[t], value_state)
        values.append(step_values)
    new_logprob = torch.stack(log_probs).reshape(-1)
    entropy = torch.stack(entropies).reshape(-1)
    new_value = torch.stack(values).reshape(-1)
    old_logprob, old_value, returns = (
        torch.as_tensor(rollout[k]) for k in ("logp", "value", "ret")
    )
    advantages = torch.as_tensor(rollout["adv"])
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    ratio = (new_logprob - old_logprob).exp()
    clipped = torch.clamp(ratio, 1 - params.clip_coef, 1 + params.clip_coef)
    pg_loss = torch.max(-advantages * ratio, -advantages * clipped).mean()
    v_loss_unclipped = (new_value - returns) ** 2
    if params.clip_value_loss:
        v_clipped = old_value + torch.clamp(
            new_value - old_value, -params.clip_coef, params.clip_coef
        )
        v_loss = 0.5 * torch.max(v_loss_unclipped, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * v_loss_unclipped.mean()
    entropy_loss = entropy.mean()
    loss = pg_loss + params.vf_coef * v_loss - params.ent_coef * entropy_loss
    return loss, pg_loss, v_loss, entropy_loss


@pytest.mark.parametrize(
    ("cell", "sequence_length", "clip_value_loss"),
    [("lstm", 4, False), ("gru", 4, True), ("lstm", 32, True), ("gru", 32, False)],
)
def test_the_masked_sequence_loss_and_its_gradients_are_those_of_a_loop_over_steps(
    cell, sequence_length, clip_value_loss
):
    """Chunks cut at episode starts and every ``sequence_length`` steps, padded to one width,
    read in one fused call each, the means over the mask: the loss, its parts and autograd's
    gradients of the loop over steps above. Length 4 cuts chunks inside episodes (padding,
    truncated BPTT); 32 holds whole episodes."""
    steps, envs = 13, 3
    params = recurrent_params(cell, sequence_length, clip_value_loss=clip_value_loss, ent_coef=0.01)
    learner = learner_of(params)
    assert learner.closed_form is None  # the closed form is the MLP's
    rollout = synthetic_rollout(learner, steps, envs, seed=1)
    chunks = cut_into_chunks(rollout["episode_start"], sequence_length)
    assert (~chunks.mask).any()  # the test's rollout has padding

    learner.add(rollout)
    columns = learner._round_columns()[0]
    stats = learner.minibatch_gradients(**columns)  # the whole round as one minibatch
    parameters = [*learner.actor.parameters(), *learner.value_network.parameters()]
    fused_gradients = [p.grad.clone() for p in parameters]

    loss, *parts = unrolled_loss(learner, rollout, steps, envs)
    pg_loss, v_loss, entropy_loss = (float(part.detach()) for part in parts)
    assert float(stats["pg_loss"]) == pytest.approx(pg_loss, rel=1e-5, abs=1e-7)
    assert float(stats["v_loss"]) == pytest.approx(v_loss, rel=1e-5)
    assert float(stats["entropy_loss"]) == pytest.approx(entropy_loss, rel=1e-6)
    assert len(stats["logratio"]) == steps * envs  # the KL statistics read real steps only
    by_hand = torch.autograd.grad(loss, parameters)
    for fused, expected in zip(fused_gradients, by_hand, strict=True):
        torch.testing.assert_close(fused, expected, rtol=1e-4, atol=1e-6)
    assert any(float(g.abs().max()) > 0 for g in by_hand[: len(list(learner.actor.parameters()))])


@pytest.mark.parametrize(("cell", "clip_value_loss"), [("lstm", True), ("gru", False)])
def test_the_value_networks_thread_writes_the_gradient_of_the_whole_loss(cell, clip_value_loss):
    """The update runs the value network's forward and backward on a second thread: its
    gradients, the policy's and the stats are those of ``ppo_loss(...).backward()`` on one
    thread, bit for bit, and an error on either side is raised with no thread left writing."""
    from drlcli.algos.ppo.maths import ppo_loss
    from drlcli.algos.ppo.sequences import sequence_steps

    params = recurrent_params(cell, 4, clip_value_loss=clip_value_loss, ent_coef=0.01)
    learner = learner_of(params)
    learner.add(synthetic_rollout(learner, 13, 3, seed=4))
    columns = learner._round_columns()[0]
    stats = learner.minibatch_gradients(**columns)
    threaded = learner.flat.values.grad.clone()

    chunks = sequence_steps(columns)
    new_logprob, entropy, new_value = learner.evaluate_actions(chunks)
    loss, one_thread = ppo_loss(
        new_logprob=new_logprob,
        entropy=entropy,
        new_value=new_value,
        old_logprob=chunks["old_logprob"],
        old_value=chunks["old_value"],
        advantages=chunks["advantages"],
        returns=chunks["returns"],
        params=params,
        mask=chunks["mask"],
    )
    learner.flat.zero_grad()
    loss.backward()
    assert torch.equal(learner.flat.values.grad, threaded)
    value_part = sum(p.numel() for p in learner.value_network.parameters())
    assert float(threaded[-value_part:].abs().max()) > 0  # the thread's share is there
    for name in ("pg_loss", "v_loss", "entropy_loss", "logratio"):
        assert torch.equal(stats[name], one_thread[name]), name

    broken = dict(columns, value_state=columns["value_state"][..., :1])  # a state too small
    with pytest.raises(RuntimeError):
        learner.minibatch_gradients(**broken)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_padded_step_changes_nothing(cell):
    """What a chunk's padding holds never reaches the losses or the gradients."""
    params = recurrent_params(cell, 4)
    learner = learner_of(params)
    learner.add(synthetic_rollout(learner, 13, 3, seed=2))
    columns = learner._round_columns()[0]
    first = learner.minibatch_gradients(**columns)
    first_gradients = [p.grad.clone() for p in learner.flat.parameters]
    padding = ~columns["mask"]
    noisy = dict(columns)
    for name in ("obs", "actions", "old_logprob", "old_value", "advantages", "returns"):
        column = columns[name].clone()
        column[padding] = 1e3
        noisy[name] = column
    second = learner.minibatch_gradients(**noisy)
    for name in ("pg_loss", "v_loss", "entropy_loss"):
        assert float(second[name]) == float(first[name])
    for before, after in zip(first_gradients, learner.flat.parameters, strict=True):
        torch.testing.assert_close(after.grad, before, rtol=0, atol=0)


ENV = EnvConfig(id="InvertedPendulum-v5", num_envs=3, seed=5)


def rollout_pair(cell: str, sequence_length: int = 8):
    params = recurrent_params(cell, sequence_length, num_epochs=1)
    spec = gaussian_actor_spec(params, [-3.0], [3.0])
    actor = MuJoCoActor(RolloutActorContext(0, ENV, spec, params, gamma=0.99))
    learner = Learner(spec, 4, 1, params, seed=0)
    return actor, learner


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_learners_chunk_read_gives_the_rollouts_log_probs_and_values(cell):
    """Before any update, the learner's sequences reproduce what the rollout actor sampled
    with: every ratio is 1 and every value the rollout's, on every real step."""
    actor, learner = rollout_pair(cell)
    try:
        trajectory, stats = actor.sample(learner.network_state(), 40, 0.99, 0.95, None)
    finally:
        actor.close()
    assert stats["episodes"] > 0  # episodes end inside the round: chunks start there
    learner.add(trajectory)
    steps = {name: time_major(name, column) for name, column in learner._round_columns()[0].items()}
    with torch.no_grad():
        log_prob, _, values = learner.evaluate_actions(steps)
    real = steps["mask"]
    assert int(real.sum()) == 40 * ENV.num_envs
    torch.testing.assert_close(log_prob[real], steps["old_logprob"][real], rtol=0, atol=2e-5)
    torch.testing.assert_close(values[real], steps["old_value"][real], rtol=0, atol=2e-5)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_rollout_actor_zeroes_each_envs_state_where_its_episode_starts_and_keeps_it_on(cell):
    actor, learner = rollout_pair(cell)
    try:
        first, _ = actor.sample(learner.network_state(), 30, 0.99, 0.95, None)
        carried = actor.state_dict()["recurrent"]
        second, _ = actor.sample(learner.network_state(), 30, 0.99, 0.95, None)
    finally:
        actor.close()
    assert first["episode_start"][0].all()  # a run's first step starts every episode
    for trajectory in (first, second):
        starts = trajectory["episode_start"].reshape(-1)
        for name in ("policy_state", "value_state"):
            norms = np.abs(trajectory[name]).reshape(len(starts), -1).max(axis=1)
            assert (norms[starts] == 0).all()  # zeros where an episode starts
            assert (norms[~starts] > 0).all()  # carried everywhere else
    assert starts.any() and not second["episode_start"][0].all()
    # The next round's first step reads the state the last one left, reset where it ended.
    resumed = second["episode_start"][0]
    expected = stored_state(carried["policy_state"]).numpy().copy()
    expected[resumed] = 0.0
    np.testing.assert_array_equal(second["policy_state"][: ENV.num_envs], expected)
    np.testing.assert_array_equal(carried["episode_starts"], resumed)


def test_a_rollout_actor_refuses_the_memory_of_another_core():
    actor, learner = rollout_pair("lstm")
    other, _ = rollout_pair("gru")
    try:
        actor.sample(learner.network_state(), 4, 0.99, 0.95, None)
        state = actor.state_dict()
        with pytest.raises(CheckpointError, match=r"does not fit it \(recurrent states of shapes"):
            other.load_state_dict(state)
    finally:
        actor.close()
        other.close()


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_each_evaluation_episode_starts_from_a_zero_state(cell):
    """Deterministic evaluation (and play) reset the state at each episode's first
    observation: episode i of a run of three is the episode played alone."""
    params = recurrent_params(cell)
    spec = gaussian_actor_spec(params, [-3.0], [3.0])
    torch.manual_seed(3)
    actor = Learner(spec, 4, 1, params, seed=3).actor.eval()
    with torch.no_grad():  # a state far from zero, so that a state left over would show
        for parameter in actor.core.parameters():
            parameter.mul_(4.0)
    policy = FrozenPolicy(actor, None, 10.0)
    env = make_env("InvertedPendulum-v5")
    try:
        together = run_episodes(policy, 3, seed=10, env=env)
        alone = [run_episodes(policy, 1, seed=10 + i, env=env)[0] for i in (2, 0, 1)]
    finally:
        env.close()
    by_seed = {10 + i: result for i, result in zip((2, 0, 1), alone, strict=True)}
    assert [r.episode_return for r in together] == [
        by_seed[10 + i].episode_return for i in range(3)
    ]
    assert actor.explore_state is not None and actor.explore_state.abs().max() > 0


# --- checkpoints: verify, resume, export ---------------------------------------------------


@pytest.fixture(scope="module")
def gru_checkpoint_payload():
    from tests.conftest import fresh_ppo_payload

    return fresh_ppo_payload({"hidden_sizes": [8], "recurrent": {"cell": "gru", "size": 8}})


def test_verify_reports_the_core_and_its_state_layout(checkpoint_file, lstm_checkpoint_payload):
    import json

    from drlcli.checkpoints.audit import audit_checkpoint

    report = audit_checkpoint(checkpoint_file(payload=lstm_checkpoint_payload))
    assert not report.failed
    (check,) = [check for check in report.checks if check.name == "recurrent state"]
    assert check.detail == (
        "lstm of size 8, 2 layers; state h [2, batch, 8] and c [2, batch, 8], zeros at an "
        "episode's start; 1 value networks alike, the states of 0 environments in progress"
    )
    record = json.loads(report.to_json())["recurrent"]
    assert record["cell"] == "lstm" and record["size"] == 8 and record["layers"] == 2
    assert record["state"] == {"h": [2, "batch", 8], "c": [2, "batch", 8]}
    one_step = audit_checkpoint(checkpoint_file())
    assert json.loads(one_step.to_json())["recurrent"] is None
    (check,) = [check for check in one_step.checks if check.name == "recurrent state"]
    assert check.detail == "none: the policy reads one observation at a time"


def _rollout_memory(core_shape_of_envs):
    return {
        "envs": {},
        "torch_rng": torch.zeros(1),
        "recurrent": {
            "policy_state": torch.zeros(core_shape_of_envs),
            "value_state": torch.zeros(core_shape_of_envs),
            "episode_starts": torch.ones(core_shape_of_envs[-2], dtype=torch.bool),
        },
    }


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda payload: payload["config"]["algo_params"]["recurrent"].update(size=16),
            "actor_semantics.kwargs ask for lstm of size 8, 2 layers, but the config's "
            "algo_params.recurrent asks for lstm of size 16, 2 layers",
        ),
        (
            lambda payload: payload["learner_states"][0].update(
                value={
                    k: v for k, v in payload["learner_states"][0]["value"].items() if "l1" not in k
                }
            ),
            "learner_states[0].value holds lstm of size 8, 1 layer, the policy lstm of size 8, "
            "2 layers",
        ),
        (
            lambda payload: payload["learner_states"][0].update(
                rollout_actors=[_rollout_memory((2, 2, 3, 8)), _rollout_memory((2, 3, 8))]
            ),
            "learner_states[0].rollout_actors[1].recurrent.policy_state is [2, 3, 8], "
            "expected [2, 2, 3, 8]",
        ),
        (
            lambda payload: payload["learner_states"][0].update(
                rollout_actors=[{"envs": {}, "torch_rng": torch.zeros(1), "recurrent": None}]
            ),
            "learner_states[0].rollout_actors[0] holds no recurrent state to resume from",
        ),
    ],
)
def test_verify_refuses_a_record_that_does_not_match_its_networks(
    checkpoint_file, lstm_checkpoint_payload, damage, message
):
    from drlcli.checkpoints.audit import audit_checkpoint
    from drlcli.checkpoints.verified import read_verified_checkpoint

    path = checkpoint_file(damage, payload=lstm_checkpoint_payload)
    report = audit_checkpoint(path)
    (check,) = [check for check in report.checks if check.name == "recurrent state"]
    assert (check.status, check.detail) == ("FAIL", message)
    with pytest.raises(CheckpointError, match="fails drl verify's 'recurrent state' check"):
        read_verified_checkpoint(path)  # what play, export and --resume read


@pytest.mark.parametrize(
    ("config_core", "checkpoint", "stored", "wanted"),
    [
        ("recurrent: {size: 8}", "mlp", "none (an MLP)", "lstm of size 8, 1 layer"),
        (
            "recurrent: {size: 8, cell: gru, layers: 2}",
            "lstm",
            "lstm of size 8, 2 layers",
            "gru of size 8, 2 layers",
        ),
        ("recurrent: null", "lstm", "lstm of size 8, 2 layers", "none (an MLP)"),
    ],
)
def test_resume_with_another_recurrent_core_is_one_line_exit_2_and_nothing_written(
    tmp_path, checkpoint_file, lstm_checkpoint_payload, config_core, checkpoint, stored, wanted
):
    from typer.testing import CliRunner

    from drlcli.cli import app

    payload = lstm_checkpoint_payload if checkpoint == "lstm" else None
    path = checkpoint_file(payload=payload)
    before = path.read_bytes()
    config = tmp_path / "run.yaml"
    config.write_text(
        "env: {id: InvertedPendulum-v5}\n"
        f"output_dir: {tmp_path / 'out'}\n"
        f"algo_params: {{hidden_sizes: [8], {config_core}}}\n"
    )
    result = CliRunner().invoke(app, ["train", str(config), "--resume", str(path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {path}: cannot resume: its policy's recurrent core is {stored}, the config "
        f"builds {wanted} (algo_params.recurrent): resume with the recurrent settings it was "
        "trained with, or start a new run"
    ]
    assert path.read_bytes() == before and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "algo_params: {recurrent: {cell: rnn}}",
            "algo_params.recurrent.cell: expected one of lstm, gru; got 'rnn'",
        ),
        (
            "algo_params: {recurrent: {size: 0}}",
            "algo_params.recurrent.size: must be a positive integer, got 0",
        ),
        (
            "algo_params: {recurrent: {sequence_length: -4}}",
            "algo_params.recurrent.sequence_length: must be a positive integer, got -4",
        ),
        (
            "algo_params: {recurrent: {cells: lstm}}",
            "algo_params.recurrent.cells: unknown key; did you mean 'cell'?",
        ),
        *(
            (
                f"algo: {algo}\nalgo_params: {{recurrent: {{cell: lstm}}}}",
                f"algo_params.recurrent: {algo}'s policies are not recurrent (ppo's are); give "
                "it a history of observations with env.wrappers: [{name: "
                "FrameStackObservation, kwargs: {stack_size: 4}}, {name: FlattenObservation}]",
            )
            for algo in ("sac", "flash_sac")
        ),
    ],
)
def test_a_bad_recurrent_setting_is_one_line_exit_2_and_nothing_written(tmp_path, text, message):
    from typer.testing import CliRunner

    from drlcli.cli import app

    config = tmp_path / "run.yaml"
    config.write_text(f"env: {{id: InvertedPendulum-v5}}\noutput_dir: {tmp_path / 'out'}\n{text}\n")
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: {config}: {message}"]
    assert not (tmp_path / "out").exists()


def test_a_custom_recurrent_actor_is_refused_in_one_line():
    """ADR 0018 decision 5: custom policy actors are one-step."""
    from drlcli.actors.spec import ActorSpec, build_policy_actor
    from drlcli.errors import PolicyActorContractError

    spec = ActorSpec("tests.custom_actors:build_recurrent_custom_actor", {})
    with pytest.raises(PolicyActorContractError) as error:
        build_policy_actor(spec, 4, 1, action_low=[-3.0], action_high=[3.0])
    assert str(error.value) == (
        "policy actor RecurrentCustomActor from tests.custom_actors:build_recurrent_custom_actor "
        "is recurrent (it has recurrent_state_shape), but custom policy actors are one-step "
        "(ADR 0018): give it a history with env.wrappers: [{name: FrameStackObservation, kwargs: "
        "{stack_size: 4}}, {name: FlattenObservation}], or train algo: ppo with "
        "algo_params.recurrent"
    )


@pytest.mark.parametrize("payload_name", ["lstm_checkpoint_payload", "gru_checkpoint_payload"])
def test_the_onnx_graph_carries_the_state_and_drives_an_episode_like_play(
    tmp_path, checkpoint_file, request, payload_name
):
    """The graph alone in onnxruntime, the client feeding the state back and zeroing it at
    the episode's start, gives deterministic play's actions at every step of an episode."""
    import json

    import onnx
    import onnxruntime

    from drlcli.checkpoints.policy import load_play_actor
    from drlcli.export import export_onnx

    payload = request.getfixturevalue(payload_name)
    path = checkpoint_file(payload=payload)
    output = tmp_path / "policy.onnx"
    summary = export_onnx(path, output, parity_steps=60)
    lstm = payload_name.startswith("lstm")
    names = ("h", "c") if lstm else ("h",)
    assert summary.state_names == names and summary.max_abs_error <= 1e-5
    assert summary.parity_samples == 4 + 60  # a batch of 64 for 4 steps, then the sequence
    layers = 2 if lstm else 1
    metadata = {p.key: p.value for p in onnx.load(str(output)).metadata_props}
    record = json.loads(metadata["drl.recurrent"])
    assert record["inputs"] == [f"{n}_in" for n in names]
    assert record["outputs"] == [f"{n}_out" for n in names]
    assert record["state"] == {n: [layers, "batch", 8] for n in names}
    assert record["reset"].startswith("zeros at an episode's first observation")

    session = onnxruntime.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", *(f"{n}_in" for n in names)]
    assert [o.name for o in session.get_outputs()] == ["action", *(f"{n}_out" for n in names)]
    assert session.get_inputs()[1].shape == [layers, "batch", 8]
    policy = load_play_actor(path)
    env = policy.make_env()
    obs, _ = env.reset(seed=4)
    state = [np.zeros((layers, 1, 8), np.float32) for _ in names]
    played, start, steps = [], True, 0
    while True:
        expected = policy.act(obs[None], dones=torch.tensor([start]))[0]
        action, *state = session.run(
            None,
            {
                "obs": obs[None].astype(np.float32),
                **{f"{n}_in": s for n, s in zip(names, state, strict=True)},
            },
        )
        np.testing.assert_allclose(action[0], expected, rtol=0, atol=1e-5)
        played.append(action[0])
        obs, _, terminated, truncated, _ = env.step(action[0])
        start, steps = False, steps + 1
        if terminated or truncated:
            break
    env.close()
    assert steps > 1 and np.abs(state[0]).max() > 0


@pytest.mark.parametrize(("cell", "layers"), [("lstm", 1), ("lstm", 2), ("gru", 1), ("gru", 2)])
def test_the_rollouts_numpy_cell_is_torchs_cell(cell, layers):
    """The rollout actor steps the cores in numpy on the parameters' memory
    (``DenseRecurrentCore``): torch's ``nn.LSTM``/``nn.GRU`` step to float32 rounding, and it
    sees an in-place update of the weights."""
    from drlcli.actors.recurrent import RecurrentCore
    from drlcli.algos.ppo.dense_recurrent import DenseRecurrentCore

    torch.manual_seed(7)
    core = RecurrentCore(cell, 5, 16, layers)
    dense = DenseRecurrentCore.of(core)
    features = torch.randn(6, 5) * 3.0
    state = torch.randn(core.state_shape(6))
    for _ in range(2):
        with torch.no_grad():
            expected_output, expected_state = core.step(features, state)
        output, after = dense.step(features.numpy(), state.numpy())
        np.testing.assert_allclose(output, expected_output.numpy(), rtol=0, atol=2e-6)
        np.testing.assert_allclose(after, expected_state.numpy(), rtol=0, atol=2e-6)
        with torch.no_grad():  # an optimiser step writes in place: the views see it
            for parameter in core.parameters():
                parameter.add_(0.05)


def test_the_example_client_plays_the_graph_as_drl_plays_the_checkpoint(
    tmp_path, checkpoint_file, lstm_checkpoint_payload, monkeypatch, capsys
):
    """examples/onnx_client.py (onnxruntime and Gymnasium alone) feeds the state back and
    zeroes it at each episode's start: its returns are deterministic play's."""
    import importlib.util
    import sys

    from drlcli.checkpoints.policy import load_play_actor
    from drlcli.export import export_onnx
    from tests.conftest import REPO_ROOT

    path = checkpoint_file(payload=lstm_checkpoint_payload)
    export_onnx(path, tmp_path / "policy.onnx", parity_steps=20)
    spec = importlib.util.spec_from_file_location(
        "onnx_client", REPO_ROOT / "examples/onnx_client.py"
    )
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    monkeypatch.setattr(
        sys, "argv", ["onnx_client", str(tmp_path / "policy.onnx"), "--episodes", "3"]
    )
    client.main()
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("episode")]
    played = run_episodes(load_play_actor(path), 3, seed=0)
    assert printed == [
        f"episode {i}: return {r.episode_return:.1f} over {r.length} steps"
        for i, r in enumerate(played)
    ]

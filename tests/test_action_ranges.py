"""Custom action ranges, behaviour-tested: a symmetric [-0.4, 0.4] and an asymmetric [0, 2] box.

The log-probability of a transformed action is checked against an independent computation (the
Gaussian density of the pre-transform sample minus log|det J| of the transform, J by autograd),
and exploration, training, deterministic play and the exported ONNX graph give the same action
for the same observation.
"""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch

import tests.range_envs  # noqa: F401  (registers drltest/Ranged-v0)
from drlcli.actors.contract import declared_inference_memory
from drlcli.algos.flash_sac.algorithm import FLASH_SAC, flash_sac_actor_spec
from drlcli.algos.flash_sac.learner import FlashSACLearner
from drlcli.algos.flash_sac.params import FlashSACParams
from drlcli.checkpoints.files import write_checkpoint
from drlcli.checkpoints.policy import load_play_actor
from drlcli.checkpoints.record import RunProgress
from drlcli.config import config_from_dict
from drlcli.env_facts import EnvFacts
from drlcli.envs import env_facts, make_env
from drlcli.export import export_onnx
from drlcli.runtime.checkpointing import build_checkpoint
from drlcli.runtime.probe import ProbedActor
from tests.learner_contexts import learner_context
from tests.range_envs import ENV_ID

RANGES = {"symmetric": ([-0.4, -0.4], [0.4, 0.4]), "asymmetric": ([0.0, 0.0], [2.0, 2.0])}
SMALL = {"actor_hidden_dim": 16, "actor_num_blocks": 1, "critic_hidden_dim": 16}


def _actor(low, high):
    params = FlashSACParams(**SMALL, critic_num_blocks=1, num_bins=11)
    spec = flash_sac_actor_spec(params, low, high)
    facts = EnvFacts(ENV_ID, 3, 2, np.array(low), np.array(high))
    learner = FlashSACLearner(learner_context(spec, facts, params, updates=10))
    return learner, spec, params


@pytest.mark.parametrize("bounds", RANGES.values(), ids=list(RANGES))
def test_log_prob_is_the_density_of_the_transformed_action(bounds):
    low, high = bounds
    torch.manual_seed(0)
    learner, _, _ = _actor(low, high)
    actor = learner.actor
    obs = torch.randn(128, 3)
    with torch.no_grad():
        actions, info = actor(obs, training=False)
        mean, std = actor.get_mean_and_std(obs)
    assert (actions >= torch.tensor(low)).all() and (actions <= torch.tensor(high)).all()
    # Invert the transform to the Gaussian sample, where float32 can (away from saturation).
    squashed = (actions - actor.action_bias) / actor.action_range
    usable = (squashed.abs() < 0.995).all(-1)
    assert usable.sum() > 100
    u = torch.atanh(squashed[usable].double())
    gaussian = torch.distributions.Normal(mean[usable].double(), std[usable].double())
    log_det = torch.stack(
        [
            torch.linalg.slogdet(
                torch.autograd.functional.jacobian(
                    lambda x: actor.transform(x.float()).double(), row
                )
            ).logabsdet
            for row in u
        ]
    )
    expected = gaussian.log_prob(u).sum(-1) - log_det
    torch.testing.assert_close(info["log_prob"][usable].double(), expected, rtol=1e-3, atol=2e-3)


@pytest.mark.parametrize("bounds", RANGES.values(), ids=list(RANGES))
def test_exploration_training_play_and_onnx_agree_on_the_action(bounds, tmp_path, monkeypatch):
    low, high = bounds
    torch.manual_seed(1)
    learner, spec, params = _actor(low, high)
    env_kwargs = {"low": low, "high": high}
    config = config_from_dict(
        {"algo": "flash_sac", "env": {"id": ENV_ID, "kwargs": env_kwargs}, "algo_params": SMALL},
        default_name="ranged",
    )
    facts = env_facts(make_env(ENV_ID, **env_kwargs))
    from drlcli.checkpoints.semantics import actor_semantics

    probed = ProbedActor(
        spec,
        actor_semantics(spec, 3, 2, learner.actor.action_transform_id),
        [],
        declared_inference_memory(learner.actor),
        parameter_bytes=0,
    )
    state = {**learner.state_dict(), "return_scaler": None, "transitions": 0}
    checkpoint = build_checkpoint(FLASH_SAC, config, probed, facts, RunProgress(), None, [state])
    path = write_checkpoint(tmp_path / "ranged.pt", checkpoint)

    policy = load_play_actor(path)
    obs = np.random.default_rng(0).normal(size=(5, 3))
    played = policy.act(obs)
    actor = policy.actor
    obs_tensor = torch.as_tensor(obs, dtype=torch.float32)
    with torch.no_grad():
        deterministic = actor.explore(obs_tensor, deterministic=True).numpy()
        exported = actor.as_export_module()(obs_tensor).numpy()
        # Exploration and training with their noise at zero take the same transform of the mean.
        monkeypatch.setattr(torch, "randn_like", lambda t: torch.zeros_like(t))
        trained, _ = actor(obs_tensor, training=False)
        actor.explore(obs_tensor, dones=torch.ones(5, dtype=torch.bool))
        actor._noise.zero_()  # held noise, zero, for a while
        actor._steps_left[:] = 100
        explored = actor.explore(obs_tensor, dones=torch.zeros(5, dtype=torch.bool)).numpy()
    monkeypatch.undo()
    onnx_path = tmp_path / "ranged.onnx"
    export_onnx(path, onnx_path)
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (from_onnx,) = session.run(None, {"obs": obs.astype(np.float32)})

    assert (played >= np.float32(low)).all() and (played <= np.float32(high)).all()
    paths = {
        "explore(deterministic=True)": deterministic,
        "as_export_module()": exported,
        "forward (noise 0)": trained.numpy(),
        "explore (noise 0)": explored,
        "ONNX": from_onnx,
    }
    for what, actions in paths.items():
        np.testing.assert_allclose(actions, played, rtol=1e-5, atol=1e-6, err_msg=what)

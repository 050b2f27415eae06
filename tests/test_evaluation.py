"""Deterministic evaluation: the evaluator, and training with periodic and final evaluation."""

from __future__ import annotations

import dataclasses

import pytest

from drlcli.algos.ppo.algorithm import gaussian_actor_spec
from drlcli.algos.ppo.learner import Learner
from drlcli.algos.ppo.params import PPOParams
from drlcli.checkpoints.audit import audit_checkpoint
from drlcli.checkpoints.files import read_checkpoint
from drlcli.config import EnvConfig, config_from_dict, load_config
from drlcli.evaluation import EVALUATION_SEED_OFFSET
from drlcli.metrics.csv_file import read_metrics
from drlcli.runtime.policy_evaluator import PolicyEvaluator
from drlcli.runtime.run_context import EvaluatorContext
from drlcli.runtime.training import train
from drlcli.topology import AvailableDevices
from tests.range_envs import SLOW_EVALUATION_ENV_ID

NO_GPU = AvailableDevices(cuda_devices=0, mps=False)


def test_the_evaluator_is_deterministic_and_seeded_apart_from_training():
    params = PPOParams(hidden_sizes=(8, 8))
    spec = gaussian_actor_spec(params, [-3.0], [3.0])
    env = EnvConfig(id="InvertedPendulum-v5", seed=4, max_episode_steps=50)
    evaluator = PolicyEvaluator(EvaluatorContext(env, spec, episodes=3))
    assert evaluator.seed == 4 + EVALUATION_SEED_OFFSET
    weights = Learner(spec, 4, 1, params).network_state()["actor"]
    first = evaluator.evaluate(weights, None, 10.0, env_steps=512)
    again = evaluator.evaluate(weights, None, 10.0, env_steps=512)
    assert first == again and len(first.returns) == 3 and first.env_steps == 512
    assert all(length <= 50 for length in first.lengths)
    assert first.metrics()["eval_env_steps"] == 512
    assert first.to_dict()["episodes"] == 3
    evaluator.close()


def _slow_evaluation_config(tmp_path, name: str):
    """512 env steps in rounds of 64, evaluated every 128 on episodes that wait at reset: each
    evaluation takes several rounds."""
    return config_from_dict(
        {
            "algo": "ppo",
            "env": {"id": f"tests.range_envs:{SLOW_EVALUATION_ENV_ID}", "num_envs": 2},
            "num_actors": 1,
            "rollout_length": 32,
            "total_env_steps": 512,
            "output_dir": str(tmp_path),
            "evaluation": {"interval_env_steps": 128, "episodes": 1},
            "algo_params": {"num_epochs": 1, "num_minibatches": 2, "hidden_sizes": [8]},
        },
        default_name=name,
    )


@pytest.mark.usefixtures("ray_cluster")
def test_the_weights_evaluated_are_on_the_schedule_however_slow_the_evaluations(tmp_path):
    # Each evaluation takes several rounds (its episode waits 0.3 s at reset): the run waits
    # for it where the next one is due, rather than skipping a point of the schedule.
    config = _slow_evaluation_config(tmp_path, "slow_evaluation")
    summary = train(config, quiet=True, devices=NO_GPU)
    rows = read_metrics(config.metrics_path)
    assert [int(row["env_steps"]) for row in rows][:2] == [64, 128]
    assert [int(row["eval_env_steps"]) for row in rows if row["eval_env_steps"]] == [128, 256, 384]
    assert summary.final_evaluation.env_steps == 512


@pytest.mark.usefixtures("ray_cluster")
def test_a_run_told_to_waits_for_each_evaluation_in_the_round_after_the_evaluated_one(tmp_path):
    # What a drl tune trial asks for: the row (and the checkpoint after it) that carries an
    # evaluation is the next round's, however long the evaluation takes; by default a slow
    # one arrives where the next evaluation is due.
    config = _slow_evaluation_config(tmp_path, "next_row")
    train(config, quiet=True, devices=NO_GPU, evaluations_in_next_row=True)
    carried = [
        (int(row["eval_env_steps"]), int(row["env_steps"]))
        for row in read_metrics(config.metrics_path)
        if row["eval_env_steps"]
    ]
    assert carried == [(128, 192), (256, 320), (384, 448)]


@pytest.mark.usefixtures("ray_cluster")
def test_periodic_evaluation_chooses_the_best_checkpoint_and_the_final_one_is_recorded(
    tiny_config,
):
    config = load_config(
        tiny_config(
            "evaluated", total=1024, extra="evaluation: {interval_env_steps: 256, episodes: 2}\n"
        )
    )
    summary = train(config, quiet=True, devices=NO_GPU)
    rows = read_metrics(config.metrics_path)
    assert {
        "eval_return_mean",
        "eval_return_std",
        "eval_episode_length_mean",
        "eval_env_steps",
    } <= set(rows[0])
    evaluated = [row for row in rows if row["eval_env_steps"]]
    assert evaluated, "no evaluation finished during training"
    for row in evaluated:  # the weights of an earlier (or this) round, on the schedule
        assert int(row["eval_env_steps"]) % 256 == 0
        assert int(row["eval_env_steps"]) <= int(row["env_steps"])
    latest = read_checkpoint(config.checkpoint_path)
    assert latest.evaluation is not None and latest.evaluation["env_steps"] == 1024
    assert summary.final_evaluation.return_mean == latest.evaluation["return_mean"]
    assert summary.best_criterion == latest.progress.best_criterion == "evaluation"
    best = read_checkpoint(config.best_checkpoint_path)
    candidates = [float(row["eval_return_mean"]) for row in evaluated]
    candidates.append(latest.evaluation["return_mean"])
    # The best of every evaluation (one collected after the last row may not be in the CSV).
    assert best.evaluation["return_mean"] >= max(candidates)
    assert best.evaluation["env_steps"] % 256 == 0
    assert best.progress.best_return == best.evaluation["return_mean"]
    assert summary.best_return == best.evaluation["return_mean"]
    checks = {check.name: check for check in audit_checkpoint(config.best_checkpoint_path).checks}
    assert (
        checks["evaluation"].status == "PASS"
        and "deterministic episodes" in checks["evaluation"].detail
    )


@pytest.mark.usefixtures("ray_cluster")
def test_without_periodic_evaluation_the_best_is_by_training_return_and_the_final_is_evaluated(
    trained, two_rounds
):
    config, summary = trained("plain"), two_rounds[1]
    assert "eval_return_mean" not in read_metrics(config.metrics_path)[0]
    latest = read_checkpoint(config.checkpoint_path)
    assert latest.evaluation is not None and latest.evaluation["episodes"] == 10
    assert summary.best_criterion == "training return"

    # Resumed with periodic evaluation on: the stored best measured something else.
    resumed = dataclasses.replace(
        config,
        total_env_steps=512,
        evaluation=dataclasses.replace(config.evaluation, interval_env_steps=128, episodes=2),
        metrics_path=str(config.metrics_path) + ".evaluated.csv",
    )
    summary = train(resumed, resume=config.checkpoint_path, quiet=True, devices=NO_GPU)
    assert summary.best_criterion == "evaluation"
    best = read_checkpoint(config.best_checkpoint_path)
    assert best.progress.best_criterion == "evaluation"
    assert best.progress.best_return == best.evaluation["return_mean"]
